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
# cores, so its ingest is paid for as well. Each traced mode's Jaeger is
# `kplane jaeger` with its default memory store of 10,000 traces, which the
# first traced round fills: later rounds measure its steady state (a ring
# that recycles), which costs about half what a still-growing store does
# (BENCHMARKS.md, Tracing).
#
#   scripts/bench-tracing.sh                     8 rounds of 10 s each way
#   ROUNDS=12 DURATION=20s scripts/bench-tracing.sh
#   STORE=etcd scripts/bench-tracing.sh          etcd as the store (no store spans)
#
# To compare ways of tracing (A/B in one run), name the modes: "off" is
# tracing off, any other name is traced, to its own Jaeger. Per mode M,
# KPLANE_M is the kplane binary (its `kplane jaeger` too; default: built
# from this tree) and ENV_M extra environment for the API service and the
# store (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf exports to Jaeger's
# OTLP/HTTP port), JENV_M extra environment for its Jaeger (e.g. GOGC=200).
# Rounds rotate the order; ratios are against the first mode.
#
#   MODES="off traced http" ENV_http=OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf scripts/bench-tracing.sh
#   MODES="off a b" KPLANE_a=/tmp/kplane-old KPLANE_b=/tmp/kplane-new scripts/bench-tracing.sh
#
# Needs Jaeger (scripts/install-jaeger.sh builds it) and what
# bench-apiserver.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-8}
DURATION=${DURATION:-10s}
# Each row restarts the store and the API service; the first seconds of a
# fresh pair (empty caches, a growing heap, the previous row's processes
# and Jaeger's ingest of its last spans winding down) are left out.
export WARMUP=${WARMUP:-3s}
MODES=${MODES:-off traced}
export STORE=${STORE:-kplane}
read -r -a modes <<<"$MODES"

tmp=$(mktemp -d)
jpids=()
cleanup() {
	for p in "${jpids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
var() { local v="${1}_$2"; echo "${!v:-}"; }

echo "== building"
go build -o "$tmp/kplane" ./cmd/kplane
go build -o "$tmp/bench" ./services/apiserver/internal/bench
jaeger=$(scripts/install-jaeger.sh)

declare -A bin qurl grpcurl httpurl jpid
for m in "${modes[@]}"; do
	[[ $m =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || { echo "mode $m: not a shell name"; exit 1; }
	bin[$m]=$(var KPLANE "$m")
	bin[$m]=${bin[$m]:-$tmp/kplane}
	[[ $m == off ]] && continue
	# kplane jaeger picks one more free port itself: a clash with the
	# ones chosen here fails its start, so try again.
	for attempt in 1 2 3; do
		qport=$(port) oport=$(port) hport=$(port)
		read -r -a jenv <<<"$(var JENV "$m")"
		env "${jenv[@]}" "${bin[$m]}" jaeger --binary "$jaeger" --dir "$tmp/jaeger-$m" --query-port "$qport" --otlp-port "$oport" --otlp-http-port "$hport" >"$tmp/jaeger-$m.log" 2>&1 &
		p=$!
		for _ in $(seq 100); do
			if curl -fs "http://127.0.0.1:$qport/api/services" >/dev/null 2>&1 || ! kill -0 "$p" 2>/dev/null; then break; fi
			sleep 0.2
		done
		curl -fs "http://127.0.0.1:$qport/api/services" >/dev/null 2>&1 && break
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
		((attempt < 3)) || { echo "jaeger ($m) did not start:"; cat "$tmp/jaeger-$m.log"; exit 1; }
	done
	jpids+=("$p")
	qurl[$m]=http://127.0.0.1:$qport grpcurl[$m]=http://127.0.0.1:$oport httpurl[$m]=http://127.0.0.1:$hport
	jpid[$m]=$(pgrep -P "$p" | head -1)
done

# run MODE: one closed-loop create row; prints "throughput p99-in-ms
# cpu-µs-per-create jaeger-cpu-µs-per-create" (the API service's and the
# store's CPU; Jaeger's, when traced).
run() {
	local m=$1 out jcpu=0
	local -a env
	read -r -a env <<<"$(var ENV "$m")"
	if [[ $m == off ]]; then
		out=$(env -u OTEL_EXPORTER_OTLP_ENDPOINT -u OTEL_TRACES_SAMPLER "${env[@]}" \
			KPLANE="${bin[$m]}" BENCH="$tmp/bench" ONLY=create RATES=" " DURATION="$DURATION" scripts/bench-apiserver.sh)
	else
		local ep=${grpcurl[$m]}
		if [[ " ${env[*]} " == *" OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf "* ]]; then ep=${httpurl[$m]}; fi
		out=$(env OTEL_EXPORTER_OTLP_ENDPOINT="$ep" OTEL_TRACES_SAMPLER=always_on "${env[@]}" \
			KPLANE="${bin[$m]}" BENCH="$tmp/bench" CPU_PID="jaeger=${jpid[$m]}" ONLY=create RATES=" " DURATION="$DURATION" scripts/bench-apiserver.sh)
		jcpu=$(echo "$out" | grep '^cpu-ms' | grep -o 'jaeger=[0-9.]*' | cut -d= -f2)
	fi
	echo "$m (load $(cut -d' ' -f1 /proc/loadavg)): $(echo "$out" | grep '^create') $(echo "$out" | grep '^cpu-ms' | sed 's/ *jaeger=[0-9.]*//') jaeger=$jcpu" >&2
	echo "$out" | python3 -c '
import re, sys
lines = sys.stdin.read().splitlines()
line = [l for l in lines if l.startswith("create")][0]
tp = float(re.search(r"throughput=([0-9.]+)/s", line).group(1))
ok = int(re.search(r"ok=([0-9]+)", line).group(1))
m = re.search(r"p99=([0-9.]+)(µs|ms|s)\b", line)
p99 = float(m.group(1)) * {"µs": 0.001, "ms": 1, "s": 1000}[m.group(2)]
c = [l for l in lines if l.startswith("cpu-ms")][0]
ms = sum(float(v) for v in re.findall(r"(?:apiserver|store)=([0-9.]+)", c))
jms = float(sys.argv[1])
print(tp, p99, 1000 * ms / max(ok, 1), 1000 * jms / max(ok, 1))' "$jcpu"
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "== store: $STORE; $(nproc) cores; $ROUNDS rounds of $DURATION (after $WARMUP of warm-up) per mode (${modes[*]}), order rotating; load $load0"
for m in "${modes[@]}"; do echo "   $m: ${bin[$m]} $(var ENV "$m") $(var JENV "$m" | sed 's/./jaeger: &/')"; done
n=${#modes[@]}
for ((i = 0; i < ROUNDS; i++)); do
	# Two modes: A B, B A, ...; more: each round starts one further on,
	# and every other round runs backwards.
	order=()
	for ((k = 0; k < n; k++)); do order+=("${modes[(i / 2 + k) % n]}"); done
	if ((i % 2 == 1)); then
		rev=()
		for ((k = n - 1; k >= 0; k--)); do rev+=("${order[k]}"); done
		order=("${rev[@]}")
	fi
	for m in "${order[@]}"; do run "$m" >>"$tmp/rows.$m"; done
done
for m in "${modes[@]}"; do
	[[ $m == off ]] || echo "== Jaeger ($m) services after the traced rounds: $(curl -fs "${qurl[$m]}/api/services")"
done
echo "== load: $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
python3 - "$tmp" "${modes[@]}" <<'PY'
import statistics, sys
d, modes = sys.argv[1], sys.argv[2:]
rows = {m: [tuple(map(float, l.split())) for l in open(f"{d}/rows.{m}") if l.strip()] for m in modes}
med = lambda m, f: statistics.median(f(r) for r in rows[m])
tp = lambda m: med(m, lambda r: r[0])
p99 = lambda m: med(m, lambda r: r[1])
cpu = lambda m: med(m, lambda r: r[2])
jcpu = lambda m: med(m, lambda r: r[2] + r[3])
name = lambda m: "tracing off" if m == "off" else (m + ": 100% to Jaeger" if len(modes) > 2 else "100% to Jaeger")
print(f"{'':24} {'creates/s':>10} {'p99 ms':>8} {'CPU µs/create':>14} {'+ Jaeger':>9}   (medians of {len(rows[modes[0]])} rounds each)")
for m in modes:
    print(f"{name(m):24} {tp(m):10.0f} {p99(m):8.1f} {cpu(m):14.0f} {jcpu(m):9.0f}")
a = modes[0]
for b in modes[1:]:
    print(f"{b}/{a}: CPU per create, API service + store {cpu(b)/cpu(a):.2f}x; with Jaeger's {jcpu(b)/jcpu(a):.2f}x; "
          f"throughput {tp(b)/tp(a):.2f}x, p99 {p99(b)/p99(a):.2f}x" +
          (f" (cost {100*(1-tp(b)/tp(a)):.1f}% of throughput; goal: at most 10%)" if a == "off" else ""))
    # Each round's run against the first mode's run of the same round.
    pairs = sorted(y[0] / x[0] for x, y in zip(rows[a], rows[b]))
    cpairs = sorted((y[2] + y[3]) / (x[2] + x[3]) for x, y in zip(rows[a], rows[b]))
    print(f"  per-round throughput ratios: " + " ".join(f"{x:.2f}" for x in pairs) + f" (median {statistics.median(pairs):.2f}x)")
    print(f"  per-round CPU ratios (with Jaeger's): " + " ".join(f"{x:.2f}" for x in cpairs) + f" (median {statistics.median(cpairs):.2f}x)")
PY
