#!/usr/bin/env bash
# The soak benchmark: `kplane up` with NODES simulated nodes on loopback,
# a Deployment scaled between LOW and HIGH replicas every minute for
# DURATION, and every minute a row of what must stay bounded (the store's
# revision window, each store member's and API service's RSS, the Raft log
# file and the latest snapshot), then the growth after the first SETTLE.
#   scripts/bench-soak.sh                      60 minutes, 100 nodes
#   DURATION=15m SETTLE=5m scripts/bench-soak.sh
#   KPLANE=/path/to/kplane ...                 run that binary
# The API services compact every 5 minutes (kube-apiserver's default).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-60m}
SETTLE=${SETTLE:-10m}
NODES=${NODES:-100}
LOW=${LOW:-10}
HIGH=${HIGH:-100}
work=$(mktemp -d "${TMPDIR:-/tmp}/kplane-soak.XXXXXX")
cleanup() {
	"$work/kplane" down --data-dir "$work/up" >/dev/null 2>&1 || true
	[[ -n "${KEEP:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT

if [[ -n "${KPLANE:-}" ]]; then cp "$KPLANE" "$work/kplane"; else go build -o "$work/kplane" ./cmd/kplane; fi
go build -o "$work/soakbench" ./internal/soakbench

"$work/kplane" up --base-port=0 --nodes "$NODES" --data-dir "$work/up" >"$work/up.log" 2>&1 &
for _ in $(seq 300); do
	grep -q "kubectl --kubeconfig" "$work/up.log" && break
	sleep 1
done
grep -q "kubectl --kubeconfig" "$work/up.log" || { echo "kplane up did not start:" >&2; tail -20 "$work/up.log" >&2; exit 1; }

echo "== $(date -u +%FT%TZ), $(nproc) cores, $NODES nodes, $LOW↔$HIGH replicas every minute for $DURATION"
"$work/soakbench" -data-dir "$work/up" -duration "$DURATION" -settle "$SETTLE" -low "$LOW" -high "$HIGH"
