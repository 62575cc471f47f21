#!/usr/bin/env bash
# Watch memory: `kplane up` on loopback, a namespace holding one ConfigMap
# of SIZE bytes, then internal/watchbench for each count in WATCHERS: that
# many watches of the namespace through the gateway, each receiving the
# object; the RSS of the API services and the gateway before, with the
# watchers open, and AFTER their leaving.
#   scripts/bench-watchers.sh                       2,000 then 10,000 watchers of 1 MiB
#   WATCHERS="500" SIZE=65536 scripts/bench-watchers.sh
#   KPLANE=/path/to/kplane ...                      another build (A/B)
set -euo pipefail
cd "$(dirname "$0")/.."

WATCHERS=${WATCHERS:-2000 10000}
SIZE=${SIZE:-1048576}
AFTER=${AFTER:-70s}
work=$(mktemp -d "${TMPDIR:-/tmp}/kplane-watchers.XXXXXX")
cleanup() {
	"$work/kplane" down --data-dir "$work/up" >/dev/null 2>&1 || true
	[[ -n "${KEEP:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT
ulimit -n 65536 2>/dev/null || true

if [[ -n "${KPLANE:-}" ]]; then cp "$KPLANE" "$work/kplane"; else go build -o "$work/kplane" ./cmd/kplane; fi
go build -o "$work/watchbench" ./internal/watchbench

"$work/kplane" up --base-port=0 --nodes 1 --data-dir "$work/up" >"$work/up.log" 2>&1 &
for _ in $(seq 180); do
	grep -q "kubectl --kubeconfig" "$work/up.log" && break
	sleep 1
done
grep -q "kubectl --kubeconfig" "$work/up.log" || { echo "kplane up did not start:" >&2; tail -20 "$work/up.log" >&2; exit 1; }

pids=$("$work/kplane" status --data-dir "$work/up" -o json | python3 -c '
import json, sys
st = json.load(sys.stdin)
print(" ".join("-pid %s=%d" % (p["name"], p["pid"]) for p in st["apiserver"] + st["gateway"]))')

echo "== $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $WATCHERS; do
	# shellcheck disable=SC2086
	"$work/watchbench" -kubeconfig "$work/up/kubeconfig" -namespace "watch-$n" -watchers "$n" -size "$SIZE" -after "$AFTER" $pids
done
