#!/usr/bin/env bash
# End-to-end density, side by side with real Kubernetes (issue 10).
#
# In one run, on the same machine, one after the other:
#   kplane      `kplane up` (3 store members, 2 API services, the gateway,
#               2 schedulers, 2 controller managers, all over mTLS) with
#               NODES simulated nodes;
#   kplane-paced
#               the same with the controller managers' client paced as
#               Kubernetes paces its own (`kplane up
#               --controllers-kube-api-qps PACED_QPS
#               --controllers-kube-api-burst PACED_BURST`): pods are
#               created no faster than the rest of the cluster starts them;
#   k8s-stock   etcd (Debian's 3.4, one member), kube-apiserver,
#               kube-scheduler and kube-controller-manager K8S_VERSION with
#               their stock client limits, and KWOK simulating NODES nodes;
#   k8s-tuned   the same with --kube-api-qps/--kube-api-burst raised on the
#               scheduler and the controller manager (TUNED_QPS/TUNED_BURST).
# Each gets a Deployment of REPLICAS pods (K8S_REPLICAS for Kubernetes). The
# same Go client (internal/densitybench) watches the pods and reports pod
# startup latency (first seen -> Running, p50/p90/p99), the creation rate,
# the throughput to all Running, and each component's peak RSS and CPU
# seconds from /proc; then the rows side by side and the ratios
# kplane/Kubernetes.
#
# WORKLOAD picks another scenario (issue 26), timed until done, the same on
# both sides: statefulset (a StatefulSet of REPLICAS pods, Parallel, until
# all Ready), daemonset (a DaemonSet over the NODES nodes, first rolled out
# untimed, then its template changed: until every pod is updated and
# available, with rollingUpdate.maxUnavailable MAX_UNAVAILABLE, default
# 10%), jobs (REPLICAS Jobs of one pod exiting 0: on kplane's built-in
# runtime `sh -c "exit 0"`, on KWOK its pod-complete stage; until all
# Complete).
#
#   scripts/bench-density.sh                          100 nodes, 3,000 replicas
#   K8S_REPLICAS=1000 scripts/bench-density.sh        Kubernetes at the issue's anchor size
#   RUNS="kplane" scripts/bench-density.sh            only some rows
#   WORKLOAD=jobs REPLICAS=1000 RUNS="kplane k8s-stock k8s-tuned" scripts/bench-density.sh
#   WORKLOAD=daemonset NODES=1000 RUNS="kplane k8s-stock k8s-tuned" scripts/bench-density.sh
#   RUNS="kplane-paced" PACED_QPS=110 scripts/bench-density.sh
#   UP_ARGS="--controllers-kube-api-qps 100" ...      extra flags for kplane up
#   KPLANE=/path/to/kplane ...                        a kplane binary built elsewhere (A/B runs)
#   BUILD_ONLY=1 scripts/bench-density.sh             only build Kubernetes and KWOK
#
# Needs Go, Debian's etcd-server and openssl. Kubernetes and KWOK are built
# from the Go module proxy under ${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench
# (~10 min the first time on a quiet machine); nothing of them is written
# into the repository. Every server listens on loopback; everything started
# is stopped on exit (KEEP=1 keeps the logs).
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-100}
REPLICAS=${REPLICAS:-3000}
K8S_REPLICAS=${K8S_REPLICAS:-$REPLICAS}
RUNS=${RUNS:-"kplane kplane-paced k8s-stock k8s-tuned"}
WORKLOAD=${WORKLOAD:-deployment}
MAX_UNAVAILABLE=${MAX_UNAVAILABLE:-10%}
PACED_QPS=${PACED_QPS:-110}
PACED_BURST=${PACED_BURST:-10}
TUNED_QPS=${TUNED_QPS:-500}
TUNED_BURST=${TUNED_BURST:-1000}
TIMEOUT=${TIMEOUT:-20m}
K8S_VERSION=${K8S_VERSION:-v1.33.13}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench

# build_kubernetes: kube-apiserver, kube-scheduler and kube-controller-manager
# K8S_VERSION, built by scripts/lib/k8s-build.sh into the cache.
# shellcheck source=scripts/lib/k8s-build.sh
source scripts/lib/k8s-build.sh
build_kubernetes() {
	K8S_BIN=$(k8s_build "$K8S_VERSION" kube-apiserver kube-scheduler kube-controller-manager)
}

# build_kwok: `go install` into the cache; its stage files come from the
# module's own kustomize/stage directory.
build_kwok() {
	local dir=$cache/kwok-$KWOK_VERSION
	[[ -x $dir/bin/kwok ]] && return 0
	echo "== building KWOK $KWOK_VERSION in $dir"
	mkdir -p "$dir/bin"
	GOBIN=$dir/bin go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

[[ -z "${BUILD_ONLY:-}" ]] || { build_kwok; build_kubernetes; exit 0; }

ETCD=${ETCD:-$(command -v etcd || true)}
[[ -x "$ETCD" ]] || { echo "etcd not found: apt-get install -y etcd-server" >&2; exit 1; }
command -v openssl >/dev/null || { echo "openssl not found: apt-get install -y openssl" >&2; exit 1; }

case " $RUNS " in *" k8s-"*)
	build_kwok
	build_kubernetes
	;;
esac
K8S_BIN=${K8S_BIN:-$cache/kubernetes-$K8S_VERSION/bin}
KWOK=$cache/kwok-$KWOK_VERSION/bin/kwok

work=$(mktemp -d "${TMPDIR:-/tmp}/kplane-density.XXXXXX")
pids=()
cleanup() {
	if [[ -n "${kplane_dir:-}" && -f "$kplane_dir/up.json" ]]; then
		"$work/kplane" down --data-dir "$kplane_dir" --grace-period 10s >/dev/null 2>&1 || true
	fi
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	sleep 1
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ -n "${KEEP:-}" ]]; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT INT TERM

echo "== building kplane and the measuring client"
if [[ -n "${KPLANE:-}" ]]; then cp "$KPLANE" "$work/kplane"; else go build -o "$work/kplane" ./cmd/kplane; fi
go build -o "$work/densitybench" ./internal/densitybench

port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		ss -ltn "sport = :$p" | grep -q LISTEN || { echo "$p"; return; }
	done
}

echo "== $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); load $(cut -d' ' -f1-3 /proc/loadavg)"
results=()

# --- kplane -----------------------------------------------------------------
# run_kplane LABEL [KPLANE UP FLAGS...]
run_kplane() {
	local label=$1
	shift
	kplane_dir=$work/$label-data
	echo "== $label: kplane up, $NODES simulated nodes${*:+ ($*)}${UP_ARGS:+ ($UP_ARGS)}"
	# shellcheck disable=SC2086 # UP_ARGS: extra `kplane up` flags, split on spaces
	# Past 256 nodes the default cluster CIDR's /24 node subnets run out.
	local cidr=()
	((NODES <= 256)) || cidr=(--cluster-cidr 10.128.0.0/10)
	"$work/kplane" up --data-dir "$kplane_dir" --nodes "$NODES" --base-port 0 "${cidr[@]}" "$@" ${UP_ARGS:-} >"$work/$label-up.log" 2>&1 &
	local up=$!
	pids+=("$up")
	local until=$((SECONDS + 600))
	until [[ -f $kplane_dir/kubeconfig ]]; do
		if ! kill -0 "$up" 2>/dev/null || ((SECONDS > until)); then
			echo "kplane up did not get healthy; its log:" >&2
			tail -n 30 "$work/$label-up.log" >&2
			KEEP=1
			exit 1
		fi
		sleep 1
	done
	"$work/kplane" status --data-dir "$kplane_dir" -o json >"$work/$label-status.json"
	"$work/densitybench" -kubeconfig "$kplane_dir/kubeconfig" -label "$label" -nodes "$NODES" -replicas "$REPLICAS" \
		-workload "$WORKLOAD" -max-unavailable "$MAX_UNAVAILABLE" \
		-kplane-status "$work/$label-status.json" -timeout "$TIMEOUT" -out "$work/$label.json"
	results+=("$work/$label.json")
	"$work/kplane" down --data-dir "$kplane_dir" --grace-period 20s >/dev/null 2>&1 || true
	wait "$up" 2>/dev/null || true
}

# --- Kubernetes ---------------------------------------------------------------
# kwok_stages: KWOK's own stage files from its module (fast node and pod
# lifecycles: Ready nodes with lease heartbeats, Running pods).
kwok_stages() {
	local dir
	dir=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage
	[[ -d $dir ]] || GOFLAGS=-mod=mod go mod download "sigs.k8s.io/kwok@$KWOK_VERSION"
	local f
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
		[[ -f $dir/$f ]] || { echo "KWOK stage $dir/$f missing" >&2; exit 1; }
		cat "$dir/$f"
		echo "---"
	done
}

# run_k8s LABEL [SCHEDULER/CONTROLLER-MANAGER CLIENT FLAGS...]
run_k8s() {
	local label=$1
	shift
	local d=$work/$label
	mkdir -p "$d"
	echo "== $label: etcd, kube-apiserver, kube-scheduler, kube-controller-manager $K8S_VERSION, KWOK $KWOK_VERSION with $NODES nodes${*:+ ($*)}"
	local ec ep ap sp cp kp
	ec=$(port); ep=$(port); ap=$(port); sp=$(port); cp=$(port); kp=$(port)
	local first=${#pids[@]}
	"$ETCD" --name k --data-dir "$d/etcd" --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
		--listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" --initial-cluster "k=http://127.0.0.1:$ep" \
		--quota-backend-bytes 8589934592 --logger zap --log-level error >"$d/etcd.log" 2>&1 &
	pids+=($!)
	local etcd_pid=$!
	k8s_admin_files "$d" "$ap"
	"$K8S_BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ec" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
		--secure-port "$ap" --cert-dir "$d/certs" --token-auth-file "$d/tokens.csv" --authorization-mode Node,RBAC \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$d/sa.pub" \
		--service-account-signing-key-file "$d/sa.key" --service-cluster-ip-range 10.96.0.0/16 >"$d/kube-apiserver.log" 2>&1 &
	pids+=($!)
	local api_pid=$!
	local until=$((SECONDS + 300))
	until curl -skf -H "Authorization: Bearer admintoken" "https://127.0.0.1:$ap/readyz" >/dev/null 2>&1; do
		if ((SECONDS > until)) || ! kill -0 "$api_pid" 2>/dev/null; then
			echo "kube-apiserver did not get ready; its log:" >&2
			tail -n 30 "$d/kube-apiserver.log" >&2
			KEEP=1
			exit 1
		fi
		sleep 1
	done
	"$K8S_BIN/kube-controller-manager" --kubeconfig "$d/kubeconfig" --leader-elect=false --bind-address 127.0.0.1 \
		--secure-port "$cp" --service-account-private-key-file "$d/sa.key" "$@" >"$d/kube-controller-manager.log" 2>&1 &
	pids+=($!)
	local kcm_pid=$!
	"$K8S_BIN/kube-scheduler" --kubeconfig "$d/kubeconfig" --leader-elect=false --bind-address 127.0.0.1 \
		--secure-port "$sp" "$@" >"$d/kube-scheduler.log" 2>&1 &
	pids+=($!)
	local sched_pid=$!
	kwok_stages >"$d/kwok-stages.yaml"
	"$KWOK" --kubeconfig "$d/kubeconfig" --manage-all-nodes=false \
		--manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake --node-lease-duration-seconds 40 \
		--server-address "127.0.0.1:$kp" --node-ip 127.0.0.1 --config "$d/kwok-stages.yaml" >"$d/kwok.log" 2>&1 &
	pids+=($!)
	local kwok_pid=$!
	"$work/densitybench" -kubeconfig "$d/kubeconfig" -label "$label" -kwok-nodes "$NODES" -nodes "$NODES" \
		-replicas "$K8S_REPLICAS" -timeout "$TIMEOUT" -out "$work/$label.json" \
		-workload "$WORKLOAD" -max-unavailable "$MAX_UNAVAILABLE" \
		-procs "etcd=$etcd_pid,kube-apiserver=$api_pid,kube-scheduler=$sched_pid,kube-controller-manager=$kcm_pid,kwok=$kwok_pid"
	results+=("$work/$label.json")
	local p
	for p in "${pids[@]:first}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]:first}"; do wait "$p" 2>/dev/null || true; done
}

for r in $RUNS; do
	case $r in
	kplane) run_kplane kplane ;;
	kplane-paced) run_kplane kplane-paced --controllers-kube-api-qps "$PACED_QPS" --controllers-kube-api-burst "$PACED_BURST" ;;
	k8s-stock) run_k8s k8s-stock ;;
	k8s-tuned) run_k8s k8s-tuned --kube-api-qps "$TUNED_QPS" --kube-api-burst "$TUNED_BURST" ;;
	*) echo "unknown run $r (kplane, kplane-paced, k8s-stock, k8s-tuned)" >&2; exit 1 ;;
	esac
done

if ((${#results[@]} > 1)); then
	echo "== side by side (ratios: first row / each other row; > 1 means longer to done, more pods/s, longer startup, more memory or CPU)"
	"$work/densitybench" -compare "${results[@]}"
fi
