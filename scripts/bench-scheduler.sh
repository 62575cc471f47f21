#!/usr/bin/env bash
# Benchmarks the scheduler through the real API service and a store:
# NODES node objects (no agents) and PODS pending pods are created, then a
# scheduler (in the bench process, with a CPU profile) binds them all.
# Reports pods/s from the first to the last bind, attempt latency p50/p99,
# the CPU the API service and store used meanwhile, and the profile's top
# entries. Starts a single-member etcd (Debian's /usr/bin/etcd) or, with
# STORE=kplane, a single-member kplane store, and `kplane apiserver`.
#   scripts/bench-scheduler.sh                       5,000 nodes, 10,000 pods
#   NODES=1000 PODS=2000 scripts/bench-scheduler.sh  a smaller run
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-5000}
PODS=${PODS:-10000}
STORE=${STORE:-etcd}
BIND_PARALLELISM=${BIND_PARALLELISM:-256}

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== building"
go build -o "$tmp/kplane" ./cmd/kplane
go build -o "$tmp/bench" ./services/scheduler/internal/bench

client="http://127.0.0.1:$(port)"
peer="http://127.0.0.1:$(port)"
if [[ "$STORE" == "kplane" ]]; then
	"$tmp/kplane" store --name b --data-dir "$tmp/store" --listen-client-urls "$client" \
		--listen-peer-urls "$peer" --initial-cluster "b=$peer" --log-level error >"$tmp/store.log" 2>&1 &
else
	etcd --name b --data-dir "$tmp/store" --listen-client-urls "$client" --advertise-client-urls "$client" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "b=$peer" \
		--quota-backend-bytes 8589934592 --log-level error --logger zap >"$tmp/store.log" 2>&1 &
fi
storepid=$!
pids+=($storepid)

echo "admintoken,admin,1,system:masters" >"$tmp/tokens.csv"
addr="127.0.0.1:$(port)"
sleep 2
"$tmp/kplane" apiserver --insecure-plaintext --store-endpoints "$client" --listen "$addr" \
	--token-auth-file "$tmp/tokens.csv" --log-level warn >"$tmp/apiserver.log" 2>&1 &
apipid=$!
pids+=($apipid)
for _ in $(seq 100); do
	if (exec 3<>"/dev/tcp/${addr%:*}/${addr#*:}") 2>/dev/null; then break; fi
	sleep 0.2
done
sleep 1

echo "== store: $STORE; $(nproc) cores; $NODES nodes, $PODS pods"
"$tmp/bench" -addr "$addr" -token admintoken -nodes "$NODES" -pods "$PODS" -bind-parallelism "$BIND_PARALLELISM" \
	-cpuprofile "$tmp/cpu.pprof" -server-pids "$apipid,$storepid"
echo "== scheduler process CPU profile (top 25)"
go tool pprof -top -nodecount=25 "$tmp/bench" "$tmp/cpu.pprof" 2>/dev/null | sed -n '1,35p'
