#!/usr/bin/env bash
# The race against etcd: starts a 3-member kplane store, a 3-member Debian etcd
# 3.4 and a 3-member etcd v3.6.8 on loopback (data directories side by side on
# one disk), and runs etcd's own `benchmark` tool against each, alternating
# the order every round: put, range (linearizable and serializable), txn-put,
# watch-latency. Prints one row per store and test (median over the rounds)
# and the ratios kplane/etcd for throughput and p99 latency.
#
#   scripts/bench-store.sh                  3 rounds, 20,000 requests per test
#   ROUNDS=1 TOTAL=5000 scripts/bench-store.sh       a quick look
#   TESTS="put range-l" scripts/bench-store.sh       only some tests
#   STORES="kplane etcd34" scripts/bench-store.sh    only some stores
#   KPLANE_B=/path/to/other/kplane scripts/bench-store.sh
#       adds a fourth cluster, "kplaneB", run from another kplane build (e.g.
#       the one before a change), so that two builds are pitted against each
#       other in the same run; its ratio column is kplane/kplaneB.
#   KPLANE_ARGS="--snapshot-count=100000" KPLANE_B=$PWD/kplane KPLANE_B_ARGS= ...
#       extra `kplane store` flags for each of the two (and KPLANE_ENV /
#       KPLANE_B_ENV, e.g. "GOGC=200", extra environment), to measure a flag.
#   PROFILE=1 KEEP=1 TESTS=put STORES=kplane scripts/bench-store.sh
#       records `perf record -g` of each kplane member during each test,
#       left in the work directory for `perf report -i` (needs perf).
#
# Every row also says how much CPU the three members used per 1,000
# requests (user+system time from /proc/PID/stat, summed over the members,
# and the busiest member's share): on a shared 2-core machine, CPU per
# request is what decides throughput, and it is far less noisy than req/s.
#
# Needs: Go, Debian's etcd-server and etcd-client (etcd and etcdctl 3.4).
# etcd v3.6.8 and the benchmark tool are built from etcd's Go modules in a
# wrapper module under ${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench (~2 min
# the first time); nothing is written into the repository.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
TOTAL=${TOTAL:-20000}
CONNS=${CONNS:-10}
CLIENTS=${CLIENTS:-100}
TESTS=${TESTS:-"put range-l range-s txn-put watch-latency"}
ETCD_VERSION=v3.6.8
cache=${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench
ETCD34=${ETCD34:-$(command -v etcd || true)}
ETCDCTL=${ETCDCTL:-$(command -v etcdctl || true)}

[[ -x "$ETCD34" ]] || { echo "etcd (3.4) not found: apt-get install -y etcd-server" >&2; exit 1; }
[[ -x "$ETCDCTL" ]] || { echo "etcdctl not found: apt-get install -y etcd-client" >&2; exit 1; }

# --- build etcd v3.6.8 and benchmark outside the repository -----------------
wrap=$cache/etcd-$ETCD_VERSION
if [[ ! -x $wrap/bin/etcd || ! -x $wrap/bin/benchmark ]]; then
	echo "== building etcd $ETCD_VERSION and benchmark in $wrap (first time only)"
	mkdir -p "$wrap"
	cat >"$wrap/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "go.etcd.io/etcd/v3/tools/benchmark/cmd"
)
EOF
	(
		cd "$wrap"
		[[ -f go.mod ]] || go mod init kplane-bench >/dev/null
		GOFLAGS=-mod=mod go get "go.etcd.io/etcd/v3@$ETCD_VERSION" "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
		go mod tidy
		go build -o bin/benchmark go.etcd.io/etcd/v3/tools/benchmark
		go build -o bin/etcd go.etcd.io/etcd/server/v3
	)
fi
BENCH=$wrap/bin/benchmark
ETCD36=$wrap/bin/etcd

work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/kplane-bench.XXXXXX")
echo "== building kplane"
go build -o "$work/kplane" ./cmd/kplane

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[[ -n "${KEEP:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT INT TERM

next_port=$((20000 + RANDOM % 20000))
# take_port VAR: sets VAR to a free loopback port (no subshell, so that
# next_port advances).
take_port() {
	while ss -ltn "sport = :$next_port" | grep -q LISTEN; do next_port=$((next_port + 1)); done
	printf -v "$1" '%s' "$next_port"
	next_port=$((next_port + 1))
}

declare -A endpoints members
# start_cluster NAME BINARY [ARGS...]: three members, etcd's cluster flags.
start_cluster() {
	local name=$1 bin=$2
	shift 2
	local cps=() pps=() initial="" eps="" mpids=""
	for i in 0 1 2; do
		take_port "cps[$i]"
		take_port "pps[$i]"
		initial+="${initial:+,}$name-$i=http://127.0.0.1:${pps[i]}"
		eps+="${eps:+,}127.0.0.1:${cps[i]}"
	done
	for i in 0 1 2; do
		"$bin" "$@" --name="$name-$i" --data-dir="$work/$name-$i.data" \
			--listen-client-urls="http://127.0.0.1:${cps[i]}" --advertise-client-urls="http://127.0.0.1:${cps[i]}" \
			--listen-peer-urls="http://127.0.0.1:${pps[i]}" --initial-advertise-peer-urls="http://127.0.0.1:${pps[i]}" \
			--initial-cluster="$initial" --initial-cluster-state=new >"$work/$name-$i.log" 2>&1 &
		pids+=($!)
		mpids+="${mpids:+ }$!"
	done
	endpoints[$name]=$eps
	members[$name]=$mpids
	# Ready when a write goes through (a leader exists); at most 60 s.
	local until=$((SECONDS + 60))
	while ((SECONDS < until)); do
		if ETCDCTL_API=3 "$ETCDCTL" --endpoints="$eps" --command-timeout=2s put /bench/foo bar >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.5
	done
	echo "$name did not become ready; logs in $work" >&2
	tail -n 20 "$work/$name"-*.log >&2
	KEEP=1
	exit 1
}

echo "== starting clusters in $work"
read -r -a stores <<<"${STORES:-kplane etcd34 etcd36}"
if [[ -n "${KPLANE_B:-}" ]]; then
	cp "$KPLANE_B" "$work/kplaneB"
	stores+=(kplaneB)
fi
for store in "${stores[@]}"; do
	case $store in
	# shellcheck disable=SC2086 # the *_ARGS and *_ENV are lists
	kplane) start_cluster kplane env ${KPLANE_ENV:-} "$work/kplane" store --log-level=warn ${KPLANE_ARGS:-} ;;
	# shellcheck disable=SC2086
	kplaneB) start_cluster kplaneB env ${KPLANE_B_ENV:-} "$work/kplaneB" store --log-level=warn ${KPLANE_B_ARGS:-} ;;
	etcd34) start_cluster etcd34 "$ETCD34" --logger=zap --log-level=warn ;;
	etcd36) start_cluster etcd36 "$ETCD36" --logger=zap --log-level=warn ;;
	*) echo "unknown store $store (kplane, etcd34, etcd36)" >&2; exit 1 ;;
	esac
done

# cpu_ticks PIDS...: user+system clock ticks of each process, space-separated.
cpu_ticks() {
	local pid out=""
	for pid in "$@"; do
		out+="${out:+ }$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)"
	done
	echo "$out"
}

# run_test TEST STORE ROUND: prints "RPS P99 CPU MAXSHARE" (p99 in seconds;
# CPU in member-milliseconds per 1,000 requests; MAXSHARE the busiest
# member's share of it).
run_test() {
	local test=$1 store=$2 round=$3 out=$work/out.txt
	local common=(--endpoints="${endpoints[$store]}" --conns="$CONNS" --clients="$CLIENTS")
	local mp
	read -r -a mp <<<"${members[$store]}"
	local perfpids=()
	if [[ -n "${PROFILE:-}" && $store == kplane* ]]; then
		local i
		for i in 0 1 2; do
			perf record -q -F 499 -g -p "${mp[i]}" -o "$work/perf-$round-$test-$store-$i.data" >/dev/null 2>&1 &
			perfpids+=($!)
		done
	fi
	local before
	before=$(cpu_ticks "${mp[@]}")
	case $test in
	put) "$BENCH" "${common[@]}" put --total="$TOTAL" --key-size=8 --val-size=256 --key-space-size=100000 >"$out" 2>&1 ;;
	range-l) "$BENCH" "${common[@]}" range /bench/foo --total="$TOTAL" --consistency=l >"$out" 2>&1 ;;
	range-s) "$BENCH" "${common[@]}" range /bench/foo --total="$TOTAL" --consistency=s >"$out" 2>&1 ;;
	txn-put) "$BENCH" "${common[@]}" txn-put --total="$((TOTAL / 2))" --key-size=8 --val-size=256 --key-space-size=100000 >"$out" 2>&1 ;;
	watch-latency) "$BENCH" --endpoints="${endpoints[$store]}" --conns="$CONNS" --clients="$CLIENTS" \
		watch-latency --put-total=2000 --put-rate=500 --streams=10 --watchers-per-stream=10 >"$out" 2>&1 ;;
	*) echo "unknown test $test" >&2; exit 1 ;;
	esac
	local after
	after=$(cpu_ticks "${mp[@]}")
	local pid
	for pid in "${perfpids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
	for pid in "${perfpids[@]}"; do wait "$pid" 2>/dev/null || true; done
	local n=$TOTAL
	case $test in
	txn-put) n=$((TOTAL / 2)) ;;
	watch-latency) n=2000 ;;
	esac
	local cpu
	cpu=$(awk -v b="$before" -v a="$after" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN {
		split(b, bb, " "); split(a, aa, " "); t = 0; m = 0
		for (i in aa) { d = aa[i] - bb[i]; t += d; if (d > m) m = d }
		printf "%.0f %.2f", t * 1000 / hz * 1000 / n, (t > 0 ? m / t : 0) }')
	if [[ $test == watch-latency ]]; then
		# Throughput is set by --put-rate; what counts is the watch events'
		# latency (their section comes last).
		awk -v cpu="$cpu" '/Watch events summary/{w=1} w&&/Requests\/sec/{rps=$2} w&&/ 99% in/{p=$3} END{print rps, p, cpu}' "$out"
	else
		awk -v cpu="$cpu" '/Requests\/sec/{rps=$2} / 99% in/{p=$3} END{print rps, p, cpu}' "$out"
	fi
}

results=$work/results.tsv
: >"$results"
for round in $(seq 1 "$ROUNDS"); do
	# Rotate the order every round so no store always goes first.
	rot=$(((round - 1) % ${#stores[@]}))
	order=("${stores[@]:rot}" "${stores[@]:0:rot}")
	for test in $TESTS; do
		for store in "${order[@]}"; do
			read -r rps p99 cpu share < <(run_test "$test" "$store" "$round")
			printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$test" "$store" "${rps:-0}" "${p99:-0}" "${cpu:-0}" >>"$results"
			printf 'round %s  %-14s %-7s %10s req/s  p99 %s s  cpu %s ms/1k req (busiest member %s), load %s\n' \
				"$round" "$test" "$store" "${rps:-?}" "${p99:-?}" "${cpu:-?}" "${share:-?}" "$(cut -d' ' -f1 /proc/loadavg)"
		done
	done
done

echo
echo "== $(date -u +%FT%TZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $ROUNDS rounds, median per cell"
echo "   benchmark --conns=$CONNS --clients=$CLIENTS; put/txn-put --key-size=8 --val-size=256 --key-space-size=100000; total $TOTAL (txn-put $((TOTAL / 2)))"
awk -F'\t' '
	function median(list,   n, a, i, j, t) {
		n = split(list, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	{ rps[$2 "," $3] = rps[$2 "," $3] " " $4; p99[$2 "," $3] = p99[$2 "," $3] " " $5; cpu[$2 "," $3] = cpu[$2 "," $3] " " $6; if (!($2 in seen)) { seen[$2] = 1; tests[++nt] = $2 } }
	END {
		printf "%-14s %-7s %12s %10s %12s   %s\n", "test", "store", "req/s", "p99 ms", "cpu ms/1k", "kplane/this: req/s, p99"
		for (i = 1; i <= nt; i++) {
			t = tests[i]
			kr = median(rps[t ",kplane"]); kp = median(p99[t ",kplane"])
			n = split(stores, ss, " ")
			for (j = 1; j <= n; j++) {
				s = ss[j]; r = median(rps[t "," s]); p = median(p99[t "," s]); c = median(cpu[t "," s])
				ratio = ""
				if (s != "kplane" && kr > 0 && r > 0 && p > 0) ratio = sprintf("%.2fx, %.2fx", kr / r, kp / p)
				printf "%-14s %-7s %12.0f %10.1f %12.0f   %s\n", t, s, r, p * 1000, c, ratio
			}
		}
	}' stores="${stores[*]}" "$results"
