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
#   AFFINITY=anti scripts/bench-scheduler.sh         pods with required
#                                                    anti-affinity (or spread:
#                                                    a zone spread constraint)
#   COMPARE=main ROUNDS=3 scripts/bench-scheduler.sh A/B: the scheduler built
#       from git ref COMPARE (A) and from this tree (B), run alternately
#       A B A B ... ROUNDS times each, each run on a fresh store and API
#       service (this tree's), so that a noisy machine weighs on both
#       alike; a summary of every run's figures ends the output. AFFINITY
#       applies to B only (A is run with its own defaults).
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-5000}
PODS=${PODS:-10000}
STORE=${STORE:-etcd}
BIND_PARALLELISM=${BIND_PARALLELISM:-256}
AFFINITY=${AFFINITY:-none}
COMPARE=${COMPARE:-}
ROUNDS=${ROUNDS:-3}

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ -d "$tmp/a-src" ]]; then git worktree remove --force "$tmp/a-src" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== building"
go build -o "$tmp/kplane" ./cmd/kplane
go build -o "$tmp/bench" ./services/scheduler/internal/bench
if [[ -n "$COMPARE" ]]; then
	git worktree add --detach "$tmp/a-src" "$COMPARE" >/dev/null 2>&1
	(cd "$tmp/a-src" && go build -o "$tmp/bench-a" ./services/scheduler/internal/bench)
	echo "A: $COMPARE ($(git rev-parse --short "$COMPARE")); B: this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', with changes'))"
fi

# start_servers starts a fresh store and API service; sets storepid,
# apipid and addr.
start_servers() {
	local client peer
	client="http://127.0.0.1:$(port)"
	peer="http://127.0.0.1:$(port)"
	rm -rf "$tmp/store"
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
}

stop_servers() {
	kill "$apipid" "$storepid" 2>/dev/null || true
	wait "$apipid" "$storepid" 2>/dev/null || true
	pids=()
}

# run_bench BIN [FLAGS...]: one run against fresh servers.
run_bench() {
	local bin=$1
	shift
	start_servers
	"$bin" -addr "$addr" -token admintoken -nodes "$NODES" -pods "$PODS" -bind-parallelism "$BIND_PARALLELISM" \
		-cpuprofile "$tmp/cpu.pprof" -server-pids "$apipid,$storepid" "$@"
	stop_servers
}

affinity_flags=()
if [[ "$AFFINITY" != "none" ]]; then affinity_flags=(-affinity "$AFFINITY"); fi

if [[ -z "$COMPARE" ]]; then
	echo "== store: $STORE; $(nproc) cores; $NODES nodes, $PODS pods; affinity: $AFFINITY"
	run_bench "$tmp/bench" "${affinity_flags[@]}"
	echo "== scheduler process CPU profile (top 25)"
	go tool pprof -top -nodecount=25 "$tmp/bench" "$tmp/cpu.pprof" 2>/dev/null | sed -n '1,35p'
	exit 0
fi

echo "== A/B, interleaved: store: $STORE; $(nproc) cores; $NODES nodes, $PODS pods; $ROUNDS rounds; B's affinity: $AFFINITY"
: >"$tmp/summary"
for r in $(seq "$ROUNDS"); do
	for side in A B; do
		echo "== round $r, $side"
		if [[ "$side" == A ]]; then
			run_bench "$tmp/bench-a" | tee "$tmp/out"
		else
			run_bench "$tmp/bench" "${affinity_flags[@]}" | tee "$tmp/out"
		fi
		printf '%s round %s: %s; %s\n' "$side" "$r" \
			"$(grep -o 'throughput: [0-9]* pods/s' "$tmp/out")" \
			"$(grep -o 'attempt latency: p50 [^ ]*  p99 [^ ]*' "$tmp/out")" >>"$tmp/summary"
	done
done
echo "== summary (A: $COMPARE, B: this tree)"
sort -s -k1,1 "$tmp/summary"
