#!/usr/bin/env bash
# The cost of tracing: pod creates through the API service (closed loop, 20
# clients, scripts/bench-apiserver.sh's create row) with tracing off and
# with every request traced (OTEL_TRACES_SAMPLER=always_on) and exported to
# a local Jaeger, in alternating rounds of one run (off/traced, then
# traced/off, ...), each printed with the load average at its start, then
# the ratios traced/off of the medians and the spread of the per-pair
# ratios, and the CPU time per create of the API service and the store
# (and, traced, Jaeger's), which the machine's other load disturbs far less
# than throughput. The store is a single-member kplane store by default, so its
# spans (and its otelgrpc server) are paid for too. Jaeger runs on the same
# cores, so its ingest is paid for as well.
#
#   scripts/bench-tracing.sh                     8 rounds of 10 s each way
#   ROUNDS=12 DURATION=20s scripts/bench-tracing.sh
#   STORE=etcd scripts/bench-tracing.sh          etcd as the store (no store spans)
#
# Needs Jaeger (scripts/install-jaeger.sh builds it) and what
# bench-apiserver.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-8}
DURATION=${DURATION:-10s}
export STORE=${STORE:-kplane}

tmp=$(mktemp -d)
jpid=
cleanup() {
	[[ -n "$jpid" ]] && kill "$jpid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== building"
go build -o "$tmp/kplane" ./cmd/kplane
jaeger=$(scripts/install-jaeger.sh)
qport=$(port)
oport=$(port)
"$tmp/kplane" jaeger --binary "$jaeger" --dir "$tmp/jaeger" --query-port "$qport" --otlp-port "$oport" --otlp-http-port "$(port)" >"$tmp/jaeger.log" 2>&1 &
jpid=$!
for _ in $(seq 100); do
	if curl -fs "http://127.0.0.1:$qport/api/services" >/dev/null 2>&1; then break; fi
	sleep 0.2
done
curl -fs "http://127.0.0.1:$qport/api/services" >/dev/null || { echo "jaeger did not start:"; cat "$tmp/jaeger.log"; exit 1; }

# cpu PID: the process's user+system CPU time so far, in ms.
cpu() { awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15) * 1000 / t}' "/proc/$1/stat"; }
jaegerpid=$(pgrep -P "$jpid" | head -1)

# run MODE: one closed-loop create row; prints "throughput p99-in-ms
# cpu-µs-per-create jaeger-cpu-µs-per-create" (the API service's and the
# store's CPU; Jaeger's, when traced).
run() {
	local out j0
	j0=$(cpu "$jaegerpid")
	if [[ $1 == traced ]]; then
		out=$(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$oport" OTEL_TRACES_SAMPLER=always_on \
			KPLANE="$tmp/kplane" ONLY=create RATES=" " DURATION="$DURATION" scripts/bench-apiserver.sh)
	else
		out=$(env -u OTEL_EXPORTER_OTLP_ENDPOINT -u OTEL_TRACES_SAMPLER \
			KPLANE="$tmp/kplane" ONLY=create RATES=" " DURATION="$DURATION" scripts/bench-apiserver.sh)
	fi
	local jcpu
	jcpu=$(awk "BEGIN{print $(cpu "$jaegerpid") - $j0}")
	echo "$1 (load $(cut -d' ' -f1 /proc/loadavg)): $(echo "$out" | grep '^create') $(echo "$out" | grep '^cpu-ms') jaeger=$jcpu" >&2
	echo "$out" | python3 -c '
import re, sys
lines = sys.stdin.read().splitlines()
line = [l for l in lines if l.startswith("create")][0]
tp = float(re.search(r"throughput=([0-9.]+)/s", line).group(1))
ok = int(re.search(r"ok=([0-9]+)", line).group(1))
m = re.search(r"p99=([0-9.]+)(µs|ms|s)\b", line)
p99 = float(m.group(1)) * {"µs": 0.001, "ms": 1, "s": 1000}[m.group(2)]
c = [l for l in lines if l.startswith("cpu-ms")][0]
ms = sum(float(v) for v in re.findall(r"=([0-9.]+)", c))
jms = float(sys.argv[2]) if sys.argv[1] == "traced" else 0
print(tp, p99, 1000 * ms / max(ok, 1), 1000 * jms / max(ok, 1))' "$1" "$jcpu"
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "== store: $STORE; $(nproc) cores; $ROUNDS rounds of $DURATION each way, order alternating; load $load0"
off=() on=()
for ((i = 0; i < ROUNDS; i++)); do
	if ((i % 2 == 0)); then
		off+=("$(run off)"); on+=("$(run traced)")
	else
		on+=("$(run traced)"); off+=("$(run off)")
	fi
done
spans=$(curl -fs "http://127.0.0.1:$qport/api/services")
echo "== Jaeger's services after the traced rounds: $spans"
printf '%s\n' "${off[@]}" >"$tmp/off"
printf '%s\n' "${on[@]}" >"$tmp/on"
echo "== load: $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
python3 - "$tmp/off" "$tmp/on" <<'PY'
import statistics, sys
def rows(p):
    return [tuple(map(float, l.split())) for l in open(p) if l.strip()]
offr, onr = rows(sys.argv[1]), rows(sys.argv[2])
med = lambda rs, i: statistics.median(r[i] for r in rs)
off, on = (med(offr, 0), med(offr, 1)), (med(onr, 0), med(onr, 1))
cpu = lambda rs: statistics.median(r[2] for r in rs)
jcpu = lambda rs: statistics.median(r[2] + r[3] for r in rs)
print(f"{'':18} {'creates/s':>10} {'p99 ms':>8} {'CPU µs/create':>14} {'+ Jaeger':>9}   (medians of {len(offr)} rounds each)")
print(f"{'tracing off':18} {off[0]:10.0f} {off[1]:8.1f} {cpu(offr):14.0f} {jcpu(offr):9.0f}")
print(f"{'100% to Jaeger':18} {on[0]:10.0f} {on[1]:8.1f} {cpu(onr):14.0f} {jcpu(onr):9.0f}")
print(f"CPU per create, API service + store: traced/off {cpu(onr)/cpu(offr):.2f}x; with Jaeger's: {jcpu(onr)/jcpu(offr):.2f}x")
print(f"ratio traced/off: throughput {on[0]/off[0]:.2f}x, p99 {on[1]/off[1]:.2f}x "
      f"(cost {100*(1-on[0]/off[0]):.1f}% of throughput; goal: at most 10%)")
# Each round's traced run against its own off run (adjacent in time):
pairs = sorted(b[0] / a[0] for a, b in zip(offr, onr))
print("per-round throughput ratios: " + " ".join(f"{x:.2f}" for x in pairs) +
      f" (median {statistics.median(pairs):.2f}x)")
PY
