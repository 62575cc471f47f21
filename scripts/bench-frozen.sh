#!/usr/bin/env bash
# Benchmarks the API while one store follower is frozen (SIGSTOP), and
# while the store's leader is killed: for each cluster in RUNS,
# internal/frozenbench for DURATION with nothing frozen, again with one
# store follower stopped, and again with the store's leader SIGKILLed 5 s
# in, printing a row each: requests, errors, latency p50/p99/max, the write
# gap (longest time without a create succeeding) and Lease holder changes
# of the scheduler and the controller manager.
#   kplane  `kplane up` on loopback (3 store members, 2 API services,
#           leader-elected schedulers and controller managers)
#   k8s     kube-apiserver, kube-scheduler and kube-controller-manager
#           v1.33.13 (built by scripts/lib/k8s-build.sh, cached; both
#           leader-elected) on a 3-member etcd (Debian's), the follower
#           frozen being an etcd member
#   scripts/bench-frozen.sh
#   RUNS=k8s DURATION=30s CLIENTS=8 scripts/bench-frozen.sh
#   KPLANE=/path/to/kplane ...     run that binary instead of building one
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-60s}
CLIENTS=${CLIENTS:-8}
RUNS=${RUNS:-"kplane k8s"}
K8S_VERSION=${K8S_VERSION:-v1.33.13}
work=$(mktemp -d "${TMPDIR:-/tmp}/kplane-frozen.XXXXXX")
pids=()
cleanup() {
	[[ -x "$work/kplane" ]] && "$work/kplane" down --data-dir "$work/up" >/dev/null 2>&1 || true
	local p
	for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
	[[ -n "${KEEP:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/frozenbench" ./internal/frozenbench
echo "== $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $CLIENTS clients for $DURATION"

run_kplane() {
	if [[ -n "${KPLANE:-}" ]]; then cp "$KPLANE" "$work/kplane"; else go build -o "$work/kplane" ./cmd/kplane; fi
	"$work/kplane" up --base-port=0 --data-dir "$work/up" >"$work/up.log" 2>&1 &
	for _ in $(seq 180); do
		grep -q "kubectl --kubeconfig" "$work/up.log" && break
		sleep 1
	done
	grep -q "kubectl --kubeconfig" "$work/up.log" || { echo "kplane up did not start:" >&2; tail -20 "$work/up.log" >&2; exit 1; }
	# A follower's PID from `kplane status -o json`.
	local follower
	follower=$("$work/kplane" status --data-dir "$work/up" -o json |
		python3 -c 'import json,sys; print(next(m["pid"] for m in json.load(sys.stdin)["store"] if m["running"] and not m["leader"]))')
	echo "-- kplane: 3 store members, 2 API services, the gateway"
	"$work/frozenbench" -kubeconfig "$work/up/kubeconfig" -label kplane-healthy -clients "$CLIENTS" -duration "$DURATION"
	"$work/frozenbench" -kubeconfig "$work/up/kubeconfig" -label kplane-frozen -clients "$CLIENTS" -duration "$DURATION" -freeze-pid "$follower"
	sleep 10
	local leader
	leader=$("$work/kplane" status --data-dir "$work/up" -o json |
		python3 -c 'import json,sys; print(next(m["pid"] for m in json.load(sys.stdin)["store"] if m["running"] and m["leader"]))')
	"$work/frozenbench" -kubeconfig "$work/up/kubeconfig" -label kplane-killed -clients "$CLIENTS" -duration "$DURATION" -kill-pid "$leader"
	"$work/kplane" down --data-dir "$work/up" >/dev/null 2>&1 || true
}

port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

run_k8s() {
	# shellcheck source=scripts/lib/k8s-build.sh
	source scripts/lib/k8s-build.sh
	local bin etcd d=$work/k8s
	bin=$(k8s_build "$K8S_VERSION" kube-apiserver kube-scheduler kube-controller-manager)
	etcd=$(command -v etcd) || { echo "etcd not found: apt-get install -y etcd-server" >&2; exit 1; }
	mkdir -p "$d"
	local c=() p=() cluster="" i
	for i in 0 1 2; do c+=("$(port)"); p+=("$(port)"); cluster+="${cluster:+,}e$i=http://127.0.0.1:${p[i]}"; done
	local etcd_pids=() endpoints=""
	for i in 0 1 2; do
		"$etcd" --name "e$i" --data-dir "$d/e$i" --listen-client-urls "http://127.0.0.1:${c[i]}" --advertise-client-urls "http://127.0.0.1:${c[i]}" \
			--listen-peer-urls "http://127.0.0.1:${p[i]}" --initial-advertise-peer-urls "http://127.0.0.1:${p[i]}" \
			--initial-cluster "$cluster" --initial-cluster-state new --logger zap --log-level error >"$d/e$i.log" 2>&1 &
		pids+=($!)
		etcd_pids+=($!)
		endpoints+="${endpoints:+,}http://127.0.0.1:${c[i]}"
	done
	local ap
	ap=$(port)
	k8s_admin_files "$d" "$ap"
	"$bin/kube-apiserver" --etcd-servers "$endpoints" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
		--secure-port "$ap" --cert-dir "$d/certs" --token-auth-file "$d/tokens.csv" --authorization-mode Node,RBAC \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$d/sa.pub" \
		--service-account-signing-key-file "$d/sa.key" --service-cluster-ip-range 10.96.0.0/16 >"$d/kube-apiserver.log" 2>&1 &
	pids+=($!)
	local until=$((SECONDS + 300))
	until curl -skf -H "Authorization: Bearer admintoken" "https://127.0.0.1:$ap/readyz" >/dev/null 2>&1; do
		((SECONDS < until)) || { echo "kube-apiserver did not get ready:" >&2; tail -n 30 "$d/kube-apiserver.log" >&2; exit 1; }
		sleep 1
	done
	for i in 1 2; do
		"$bin/kube-scheduler" --kubeconfig "$d/kubeconfig" --bind-address 127.0.0.1 --secure-port "$(port)" >"$d/kube-scheduler-$i.log" 2>&1 &
		pids+=($!)
		"$bin/kube-controller-manager" --kubeconfig "$d/kubeconfig" --bind-address 127.0.0.1 --secure-port "$(port)" \
			--service-account-private-key-file "$d/sa.key" >"$d/kube-controller-manager-$i.log" 2>&1 &
		pids+=($!)
	done
	sleep 20 # the Leases are taken
	# etcd_member leader|follower prints the PID of a member that is (not)
	# the leader.
	etcd_member() {
		local want=$1 st i
		for i in 0 1 2; do
			st=$(ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:${c[i]}" endpoint status -w json 2>/dev/null || true)
			[[ -n $st ]] || continue
			if python3 -c 'import json,sys; s=json.loads(sys.argv[1])[0]["Status"]; lead=s["leader"]==s["header"]["member_id"]; sys.exit(0 if lead==(sys.argv[2]=="leader") else 1)' "$st" "$want"; then
				echo "${etcd_pids[i]}"
				return
			fi
		done
	}
	local follower
	follower=$(etcd_member follower)
	[[ -n $follower ]] || { echo "no etcd follower found" >&2; exit 1; }
	echo "-- Kubernetes $K8S_VERSION: 3 etcd members (Debian's $("$etcd" --version | head -1)), one kube-apiserver"
	"$work/frozenbench" -kubeconfig "$d/kubeconfig" -label k8s-healthy -clients "$CLIENTS" -duration "$DURATION"
	"$work/frozenbench" -kubeconfig "$d/kubeconfig" -label k8s-frozen -clients "$CLIENTS" -duration "$DURATION" -freeze-pid "$follower"
	sleep 10
	local leader
	leader=$(etcd_member leader)
	[[ -n $leader ]] || { echo "no etcd leader found" >&2; exit 1; }
	"$work/frozenbench" -kubeconfig "$d/kubeconfig" -label k8s-killed -clients "$CLIENTS" -duration "$DURATION" -kill-pid "$leader"
}

for r in $RUNS; do
	case $r in
	kplane) run_kplane ;;
	k8s) run_k8s ;;
	*) echo "unknown run $r (kplane, k8s)" >&2; exit 1 ;;
	esac
done
