#!/usr/bin/env bash
# Kubernetes' scalability SLOs, measured on kplane and on Kubernetes side by
# side (issue 29).
#
# For each step N of STEPS, one after the other on the same machine, each on
# a fresh cluster:
#   kplane-N   `kplane up` (3 store members, 2 API services, the gateway,
#              2 schedulers, 2 controller managers, over mTLS) with N
#              simulated nodes in one node agent process (the built-in
#              runtime's many-nodes mode), given --cluster-cidr
#              10.128.0.0/10 (room for 16,384 nodes at /24; the default
#              10.244.0.0/16 holds 256, which broke the 500 step of
#              2026-11-27);
#   k8s-N      etcd (Debian's, one member), kube-apiserver,
#              kube-controller-manager and kube-scheduler K8S_VERSION, and
#              KWOK simulating N nodes. The controller manager and the
#              scheduler run with K8S_CLIENT_FLAGS (by default
#              --kube-api-qps 100 --kube-api-burst 100, as Kubernetes' own
#              scale tests run them; stock 20/30 would pace the load).
# The same Go client (internal/scalebench) puts a ClusterLoader2-style load
# on each: one namespace per 100 nodes, Deployments of 250, 30 and 5 pods
# (N × PODS_PER_NODE pods in all) each with a Service, a ConfigMap and a
# Secret its pods mount, created at QPS objects/s; once all run, DURATION of
# churn (scale up and down, roll out, delete and recreate) at POD_RATE
# pods/s; then everything deleted. It prints per step each SLO's p99 and
# whether it holds (API calls from apiserver_request_duration_seconds on
# /metrics: mutating and single-object reads ≤ 1 s, namespace lists ≤ 5 s,
# cluster lists ≤ 30 s; pod startup from the watch ≤ 5 s), the peak RSS and
# CPU of every component, and the store's size on disk; then a summary
# table. A system that breaks at a step is not run at the larger steps, nor
# one that misses an SLO unless CONTINUE=1 (on a loaded machine a miss may
# be the machine's).
#
#   STEPS=50 PODS_PER_NODE=10 DURATION=1m scripts/bench-scale.sh   a tiny run
#   STEPS="500 1000 2500 5000" scripts/bench-scale.sh              the issue's steps
#   RUNS=kplane ...  or  RUNS=k8s ...                             one side only
#   KPLANE=/path/to/kplane ...                                    a kplane binary built elsewhere
#   MODE=overload ...                                             the overload run instead of the
#                                                                 load (scripts/bench-overload.sh)
#
# Needs Go, Debian's etcd-server and openssl; Kubernetes and KWOK are built
# into ${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench by the recipes
# scripts/bench-density.sh uses. Every server listens on loopback;
# everything started is stopped on exit (KEEP=1 keeps the logs).
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=${STEPS:-"500 1000 2500 5000"}
MODE=${MODE:-scale}
PODS_PER_NODE=${PODS_PER_NODE:-30}
DURATION=${DURATION:-2m}
QPS=${QPS:-20}
POD_RATE=${POD_RATE:-20}
RUNS=${RUNS:-"kplane k8s"}
TIMEOUT=${TIMEOUT:-20m}
K8S_CLIENT_FLAGS=${K8S_CLIENT_FLAGS:-"--kube-api-qps 100 --kube-api-burst 100"}
K8S_VERSION=${K8S_VERSION:-v1.33.13}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench

# shellcheck source=scripts/lib/k8s-build.sh
source scripts/lib/k8s-build.sh

ETCD=${ETCD:-$(command -v etcd || true)}
case " $RUNS " in *" k8s "*)
	[[ -x "$ETCD" ]] || { echo "etcd not found: apt-get install -y etcd-server" >&2; exit 1; }
	command -v openssl >/dev/null || { echo "openssl not found: apt-get install -y openssl" >&2; exit 1; }
	K8S_BIN=$(k8s_build "$K8S_VERSION" kube-apiserver kube-scheduler kube-controller-manager)
	KWOK=$cache/kwok-$KWOK_VERSION/bin/kwok
	if [[ ! -x $KWOK ]]; then
		mkdir -p "$(dirname "$KWOK")"
		GOBIN=$(dirname "$KWOK") go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
	fi
	;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/kplane-scale.XXXXXX")
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

echo "== building kplane and the load generator"
if [[ -n "${KPLANE:-}" ]]; then cp "$KPLANE" "$work/kplane"; else go build -o "$work/kplane" ./cmd/kplane; fi
go build -o "$work/scalebench" ./internal/scalebench

port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		ss -ltn "sport = :$p" | grep -q LISTEN || { echo "$p"; return; }
	done
}

echo "== $(date -u +%FT%TZ), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== steps: $STEPS nodes × $PODS_PER_NODE pods, $QPS objects/s, churn $DURATION at $POD_RATE pods/s"
results=()

# bench LABEL NODES [SCALEBENCH FLAGS...]: runs the load; returns
# scalebench's status (0: every SLO held, 3: one missed, other: broke).
bench() {
	local label=$1 nodes=$2
	shift 2
	local rc=0
	local mode=()
	if [[ $MODE == overload ]]; then
		mode=(-overload "$DURATION" -flood-clients "${FLOOD_CLIENTS:-100}" -flood-objects "${FLOOD_OBJECTS:-3000}")
	fi
	"$work/scalebench" -label "$label" -nodes "$nodes" -pods-per-node "$PODS_PER_NODE" -qps "$QPS" -pod-rate "$POD_RATE" \
		-duration "$DURATION" -timeout "$TIMEOUT" -out "$work/$label.json" "${mode[@]}" "$@" 2> >(sed -u "s/^/   [$label] /" >&2) || rc=$?
	[[ -f $work/$label.json ]] && results+=("$work/$label.json")
	return "$rc"
}

# run_kplane NODES
run_kplane() {
	local nodes=$1 label=kplane-$1
	kplane_dir=$work/$label
	echo "== $label: kplane up, $nodes simulated nodes"
	"$work/kplane" up --data-dir "$kplane_dir" --nodes "$nodes" --base-port 0 --cluster-cidr 10.128.0.0/10 >"$work/$label-up.log" 2>&1 &
	local up=$!
	pids+=("$up")
	local until=$((SECONDS + 600))
	until [[ -f $kplane_dir/kubeconfig ]]; do
		if ! kill -0 "$up" 2>/dev/null || ((SECONDS > until)); then
			echo "   kplane up did not get healthy; its log:" >&2
			tail -n 30 "$work/$label-up.log" >&2
			KEEP=1
			return 1
		fi
		sleep 1
	done
	"$work/kplane" status --data-dir "$kplane_dir" -o json >"$work/$label-status.json"
	local stores
	stores=$(find "$kplane_dir" -maxdepth 1 -type d -name 'store*' | sort | paste -sd,)
	local rc=0
	bench "$label" "$nodes" -kubeconfig "$kplane_dir/kubeconfig" -kplane-status "$work/$label-status.json" -store-dirs "$stores" || rc=$?
	((rc == 0 || rc == 3)) || { echo "   $label broke; the API services' last errors:" >&2; grep -h '"level":"ERROR"\|level=ERROR' "$kplane_dir"/apiserver-*.log 2>/dev/null | tail -n 5 >&2 || true; KEEP=1; }
	# Any process kplane up had to restart during the step (a crash, an
	# out-of-memory kill, a lost Lease).
	"$work/kplane" status --data-dir "$kplane_dir" -o json 2>/dev/null | python3 -c '
import json, sys
st = json.load(sys.stdin)
for group, members in st.items():
    if isinstance(members, list):
        for m in members:
            if isinstance(m, dict) and (m.get("restarts") or m.get("running") is False):
                print("   %s restarted %d times, running: %s" % (m.get("name"), m.get("restarts", 0), m.get("running")))
' || true
	"$work/kplane" down --data-dir "$kplane_dir" --grace-period 20s >/dev/null 2>&1 || true
	wait "$up" 2>/dev/null || true
	[[ -n "${KEEP:-}" ]] || rm -rf "$kplane_dir/store"*
	return "$rc"
}

# kwok_stages: KWOK's own stage files (Ready nodes with lease heartbeats,
# Running pods), as scripts/bench-density.sh uses them.
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

# run_k8s NODES
run_k8s() {
	local nodes=$1 label=k8s-$1
	local d=$work/$label
	mkdir -p "$d"
	echo "== $label: etcd, kube-apiserver, kube-controller-manager, kube-scheduler $K8S_VERSION ($K8S_CLIENT_FLAGS), KWOK $KWOK_VERSION with $nodes nodes"
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
			echo "   kube-apiserver did not get ready; its log:" >&2
			tail -n 30 "$d/kube-apiserver.log" >&2
			KEEP=1
			return 1
		fi
		sleep 1
	done
	# shellcheck disable=SC2086 # K8S_CLIENT_FLAGS: flags, split on spaces
	"$K8S_BIN/kube-controller-manager" --kubeconfig "$d/kubeconfig" --leader-elect=false --bind-address 127.0.0.1 \
		--secure-port "$cp" --service-account-private-key-file "$d/sa.key" $K8S_CLIENT_FLAGS >"$d/kube-controller-manager.log" 2>&1 &
	pids+=($!)
	local kcm_pid=$!
	# shellcheck disable=SC2086
	"$K8S_BIN/kube-scheduler" --kubeconfig "$d/kubeconfig" --leader-elect=false --bind-address 127.0.0.1 \
		--secure-port "$sp" $K8S_CLIENT_FLAGS >"$d/kube-scheduler.log" 2>&1 &
	pids+=($!)
	local sched_pid=$!
	kwok_stages >"$d/kwok-stages.yaml"
	"$KWOK" --kubeconfig "$d/kubeconfig" --manage-all-nodes=false \
		--manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake --node-lease-duration-seconds 40 \
		--server-address "127.0.0.1:$kp" --node-ip 127.0.0.1 --config "$d/kwok-stages.yaml" >"$d/kwok.log" 2>&1 &
	pids+=($!)
	local kwok_pid=$!
	local rc=0
	bench "$label" "$nodes" -kubeconfig "$d/kubeconfig" -kwok-nodes "$nodes" -store-dirs "$d/etcd" \
		-procs "etcd=$etcd_pid,kube-apiserver=$api_pid,kube-controller-manager=$kcm_pid,kube-scheduler=$sched_pid,kwok=$kwok_pid" || rc=$?
	((rc == 0 || rc == 3)) || { echo "   $label broke; kube-apiserver's last errors:" >&2; grep -h '^E' "$d/kube-apiserver.log" | tail -n 5 >&2 || true; KEEP=1; }
	local p
	for p in "${pids[@]:first}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]:first}"; do wait "$p" 2>/dev/null || true; done
	[[ -n "${KEEP:-}" ]] || rm -rf "$d/etcd"
	return "$rc"
}

declare -A stopped=()
for n in $STEPS; do
	for r in $RUNS; do
		[[ -z "${stopped[$r]:-}" ]] || continue
		rc=0
		case $r in
		kplane) run_kplane "$n" || rc=$? ;;
		k8s) run_k8s "$n" || rc=$? ;;
		*) echo "unknown run $r (kplane, k8s)" >&2; exit 1 ;;
		esac
		broke=$((rc != 0 && rc != 3))
		if ((broke)) || [[ $rc == 3 && -z "${CONTINUE:-}" ]]; then
			stopped[$r]=$n
			echo "== $r: $( ((broke)) && echo "broke" || echo "missed an SLO") at $n nodes; not run at larger steps"
		fi
	done
done

if ((${#results[@]} > 0)); then
	echo "== summary (p99 seconds; peak RSS summed over the processes; CPU during the load)"
	"$work/scalebench" -compare "${results[@]}"
fi
