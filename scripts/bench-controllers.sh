#!/usr/bin/env bash
# Benchmarks the controllers end to end: a Deployment scaled from 0 to
# REPLICAS pods on NODES simulated nodes (one `kplane nodeagent --nodes N`
# process with the built-in runtime), with `kplane scheduler` and
# `kplane controllers`, on a single-member etcd (Debian's /usr/bin/etcd) and
# `kplane apiserver`. Reports, from the scale-up, the time until all pods
# exist, are bound, and are Running, as pods/s per stage.
#   scripts/bench-controllers.sh                         100 nodes, 3,000 pods
#   NODES=20 REPLICAS=500 scripts/bench-controllers.sh   a smaller run
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-100}
REPLICAS=${REPLICAS:-3000}

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ -n "${KEEP:-}" ]]; then echo "logs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== building"
go build -o "$tmp/kplane" ./cmd/kplane
go build -o "$tmp/bench" ./services/controllers/internal/bench

client="http://127.0.0.1:$(port)"
peer="http://127.0.0.1:$(port)"
etcd --name b --data-dir "$tmp/store" --listen-client-urls "$client" --advertise-client-urls "$client" \
	--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "b=$peer" \
	--quota-backend-bytes 8589934592 --log-level error --logger zap >"$tmp/store.log" 2>&1 &
pids+=($!)

{
	echo "admintoken,admin,1,system:masters"
	for i in $(seq "$NODES"); do echo "node-$i-token,system:node:node-$i,n$i,system:nodes"; done
} >"$tmp/tokens.csv"
addr="127.0.0.1:$(port)"
sleep 2
"$tmp/kplane" apiserver --insecure-plaintext --store-endpoints "$client" --listen "$addr" \
	--token-auth-file "$tmp/tokens.csv" --log-level warn >"$tmp/apiserver.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	if (exec 3<>"/dev/tcp/${addr%:*}/${addr#*:}") 2>/dev/null; then break; fi
	sleep 0.2
done
sleep 1
"$tmp/bench" -addr "$addr" -token admintoken -setup

"$tmp/kplane" nodeagent --server "$addr" --insecure-plaintext --token-file "$tmp/tokens.csv" --nodes "$NODES" \
	--data-dir "$tmp/nodes" --log-listen "" --pods 110 --status-interval 10s >"$tmp/nodeagent.log" 2>&1 &
pids+=($!)
"$tmp/kplane" scheduler --server "$addr" --insecure-plaintext --token admintoken --leader-elect=false \
	--log-level warn >"$tmp/scheduler.log" 2>&1 &
pids+=($!)
"$tmp/kplane" controllers --server "$addr" --insecure-plaintext --token admintoken --leader-elect=false \
	--concurrent-replicaset-syncs 5 --log-level warn >"$tmp/controllers.log" 2>&1 &
pids+=($!)

echo "== $(nproc) cores; $NODES simulated nodes; Deployment 0 -> $REPLICAS replicas"
"$tmp/bench" -addr "$addr" -token admintoken -nodes "$NODES" -replicas "$REPLICAS"
