#!/usr/bin/env bash
# Benchmarks the API service through gRPC: pod create/get/list/update at
# fixed offered rates and closed loop with 20 clients, and watch fan-out.
# Starts a single-member etcd 3.4 (Debian's /usr/bin/etcd) or, with
# STORE=kplane, a single-member kplane store, and `kplane apiserver` on
# loopback, then runs services/apiserver/internal/bench against it.
#   scripts/bench-apiserver.sh                 everything (a few minutes)
#   DURATION=10s WATCHERS=1000 scripts/bench-apiserver.sh
#   KPLANE=/path/to/kplane ...                 run that binary instead of
#                                              building one (to compare builds)
#   CLIENT=grpc ONLY=watch ...                 watchers on grpc-go clients (a
#                                              goroutine each) instead of the
#                                              lean HTTP/2 reader
#   BENCH=/path/to/bench ...                   run that driver instead of
#                                              building one
#   CPU_PID=jaeger=1234 ONLY=create ...       also report that process's CPU
#                                              over the create row
#   WARMUP=3s ONLY=create ...                  create pods (closed loop) for
#                                              that long before the measured
#                                              create row, so that it starts
#                                              on a warm service
#   PROFILE=/tmp/prof ONLY=watch scripts/bench-apiserver.sh
#                                              also writes the service's CPU
#                                              and block profiles (taken while
#                                              the writer runs) and the
#                                              driver's CPU profile there
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-20s}
WATCHERS=${WATCHERS:-10000}
STORE=${STORE:-etcd}
RATES=${RATES:-"300 600 900"}
ONLY=${ONLY:-all} # or one or more of (comma-separated): create, get, list, update, watch
PROFILE=${PROFILE:-}
CONNS=${CONNS:-20} # connections the watchers share
CLIENT=${CLIENT:-h2} # the watchers' client: h2 (one reader per connection) or grpc (grpc-go, a goroutine per watcher)

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
if [[ -n "${KPLANE:-}" ]]; then cp "$KPLANE" "$tmp/kplane"; else go build -o "$tmp/kplane" ./cmd/kplane; fi
if [[ -n "${BENCH:-}" ]]; then cp "$BENCH" "$tmp/bench"; else go build -o "$tmp/bench" ./services/apiserver/internal/bench; fi

client="http://127.0.0.1:$(port)"
peer="http://127.0.0.1:$(port)"
if [[ "$STORE" == "kplane" ]]; then
	"$tmp/kplane" store --name b --data-dir "$tmp/store" --listen-client-urls "$client" \
		--listen-peer-urls "$peer" --initial-cluster "b=$peer" --log-level error >"$tmp/store.log" 2>&1 &
else
	etcd --name b --data-dir "$tmp/store" --listen-client-urls "$client" --advertise-client-urls "$client" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "b=$peer" \
		--log-level error --logger zap >"$tmp/store.log" 2>&1 &
fi
storepid=$!
pids+=($storepid)

echo "admintoken,admin,1,system:masters" >"$tmp/tokens.csv"
addr="127.0.0.1:$(port)"
prof=()
if [[ -n "$PROFILE" ]]; then
	mkdir -p "$PROFILE"
	pprofaddr="127.0.0.1:$(port)"
	prof=(--profiling-listen "$pprofaddr" --block-profile-rate 10000)
fi
sleep 2
"$tmp/kplane" apiserver --insecure-plaintext --store-endpoints "$client" --listen "$addr" \
	--token-auth-file "$tmp/tokens.csv" --log-level warn "${prof[@]}" >"$tmp/apiserver.log" 2>&1 &
apipid=$!
pids+=($apipid)
for _ in $(seq 100); do
	if "$tmp/bench" -addr "$addr" -token admintoken -mode get -clients 1 -duration 1ms >/dev/null 2>&1; then break; fi
	sleep 0.2
done

echo "== store: $STORE; $(nproc) cores; duration $DURATION per row"
b() { "$tmp/bench" -addr "$addr" -token admintoken -duration "$DURATION" "$@"; }
want() { [[ "$ONLY" == all || ",$ONLY," == *",$1,"* ]]; }
# cpu PID: the process's user+system CPU time so far, in ms.
cpu() { awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15) * 1000 / t}' "/proc/$1/stat"; }
if want create; then
	if [[ -n "${WARMUP:-}" ]]; then b -mode create -clients 20 -rate 0 -duration "$WARMUP" >/dev/null; fi
	a0=$(cpu "$apipid"); s0=$(cpu "$storepid"); x0=$([[ -n "${CPU_PID:-}" ]] && cpu "${CPU_PID#*=}" || echo 0)
	b -mode create -clients 20 -rate 0
	# CPU per request depends far less on what else the machine runs than
	# throughput does.
	echo "cpu-ms apiserver=$(awk "BEGIN{print $(cpu "$apipid") - $a0}") store=$(awk "BEGIN{print $(cpu "$storepid") - $s0}")" \
		"$([[ -n "${CPU_PID:-}" ]] && echo "${CPU_PID%%=*}=$(awk "BEGIN{print $(cpu "${CPU_PID#*=}") - $x0}")")"
	for r in $RATES; do b -mode create -clients 20 -rate "$r"; done
fi
if want get; then b -mode get -clients 20 -rate 0; fi
if want list; then b -mode list -clients 20 -rate 0; fi
if want update; then b -mode update -clients 20 -rate 0; fi
if want watch; then
	if [[ -n "$PROFILE" ]]; then
		# The driver takes the service's profiles while its writer runs.
		b -mode watch -watchers "$WATCHERS" -conns "$CONNS" -client "$CLIENT" -rate 20 -server-pid "$apipid" -cpuprofile "$PROFILE/driver.cpu" \
			-server-pprof "$pprofaddr" -profile-dir "$PROFILE"
		cp "$tmp/kplane" "$PROFILE/kplane"; cp "$tmp/bench" "$PROFILE/bench"
		echo "profiles in $PROFILE: go tool pprof -top $PROFILE/kplane $PROFILE/apiserver.cpu"
	else
		b -mode watch -watchers "$WATCHERS" -conns "$CONNS" -client "$CLIENT" -rate 20 -server-pid "$apipid"
	fi
fi
