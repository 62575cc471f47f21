#!/usr/bin/env bash
# Benchmarks the API while one store follower is frozen (SIGSTOP): `kplane
# up` on loopback, then internal/frozenbench for DURATION with nothing
# frozen and again with one store follower stopped, printing a row each:
# requests, errors, latency p50/p99/max and Lease holder changes of the
# scheduler and the controller manager.
#   scripts/bench-frozen.sh
#   DURATION=30s CLIENTS=8 scripts/bench-frozen.sh
#   KPLANE=/path/to/kplane ...     run that binary instead of building one
# Kubernetes beside it (kube-apiserver on a 3-member etcd) is not scripted
# yet; frozenbench takes any kubeconfig.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-60s}
CLIENTS=${CLIENTS:-8}
work=$(mktemp -d "${TMPDIR:-/tmp}/kplane-frozen.XXXXXX")
cleanup() {
	"$work/kplane" down --data-dir "$work/up" >/dev/null 2>&1 || true
	[[ -n "${KEEP:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT

if [[ -n "${KPLANE:-}" ]]; then cp "$KPLANE" "$work/kplane"; else go build -o "$work/kplane" ./cmd/kplane; fi
go build -o "$work/frozenbench" ./internal/frozenbench

"$work/kplane" up --base-port=0 --data-dir "$work/up" >"$work/up.log" 2>&1 &
for _ in $(seq 180); do
	grep -q "kubectl --kubeconfig" "$work/up.log" && break
	sleep 1
done
grep -q "kubectl --kubeconfig" "$work/up.log" || { echo "kplane up did not start:" >&2; tail -20 "$work/up.log" >&2; exit 1; }
kubeconfig="$work/up/kubeconfig"

# A follower's PID from `kplane status -o json`.
follower=$("$work/kplane" status --data-dir "$work/up" -o json |
	python3 -c 'import json,sys; print(next(m["pid"] for m in json.load(sys.stdin)["store"] if m["running"] and not m["leader"]))')

echo "== $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $CLIENTS clients for $DURATION"
"$work/frozenbench" -kubeconfig "$kubeconfig" -label healthy -clients "$CLIENTS" -duration "$DURATION"
"$work/frozenbench" -kubeconfig "$kubeconfig" -label frozen -clients "$CLIENTS" -duration "$DURATION" -freeze-pid "$follower"
