#!/usr/bin/env bash
# Custom-resource creates beside pod creates, kplane against kube-apiserver
# in the same run: both control planes are started, the Gateway API's
# HTTPRoute CustomResourceDefinition (327 KB, with CEL rules) is applied to
# each, and internal/crbench runs closed-loop creates of HTTPRoutes, then of
# pods, from CLIENTS clients for DURATION each, alternating the two targets
# ROUNDS times. It prints each run's creates/s and p50/p99, then the ratios.
#
#   scripts/bench-crd.sh
#   ROUNDS=3 DURATION=15s CLIENTS=20 scripts/bench-crd.sh
#   KPLANE=/path/to/kplane scripts/bench-crd.sh   run that binary (A/B of builds)
#
# kplane: `kplane up` with one store member, one API service, the gateway
# (clients go through it over HTTPS) and one controller manager (which
# establishes CRDs, and reacts to every pod created); no scheduler and no
# node, so pods stay Pending. Kubernetes: Debian's etcd (one member),
# kube-apiserver (writing its audit log under the Policy kplane up gives
# its API service) and kube-controller-manager v1.33.13, built from the
# Go module proxy into ${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench as
# scripts/bench-density.sh does. Needs Go, etcd-server and openssl. Every
# server listens on loopback; everything started is stopped on exit
# (KEEP=1 keeps the logs).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10s}
CLIENTS=${CLIENTS:-20}
K8S_VERSION=${K8S_VERSION:-v1.33.13}
CRD=${CRD:-services/controllers/kubectltest/testdata/httproutes-crd.yaml}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench

# shellcheck source=scripts/lib/k8s-build.sh
source scripts/lib/k8s-build.sh
ETCD=${ETCD:-$(command -v etcd || true)}
[[ -x "$ETCD" ]] || { echo "etcd not found: apt-get install -y etcd-server" >&2; exit 1; }
command -v openssl >/dev/null || { echo "openssl not found: apt-get install -y openssl" >&2; exit 1; }
K8S_BIN=$(k8s_build "$K8S_VERSION" kube-apiserver kube-controller-manager)

work=$(mktemp -d "${TMPDIR:-/tmp}/kplane-crd.XXXXXX")
pids=()
cleanup() {
	if [[ -f "$work/kplane-data/up.json" ]]; then
		"$work/kplane" down --data-dir "$work/kplane-data" --grace-period 10s >/dev/null 2>&1 || true
	fi
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	sleep 1
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ -n "${KEEP:-}" ]]; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT INT TERM

port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		ss -ltn "sport = :$p" | grep -q LISTEN || { echo "$p"; return; }
	done
}

echo "== building kplane and the measuring client"
if [[ -n "${KPLANE:-}" ]]; then cp "$KPLANE" "$work/kplane"; else go build -o "$work/kplane" ./cmd/kplane; fi
go build -o "$work/crbench" ./internal/crbench
echo "== $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); load $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== kplane up: one store member, one API service, the gateway, one controller manager"
"$work/kplane" up --data-dir "$work/kplane-data" --store-members 1 --apiservers 1 --controller-managers 1 --schedulers 0 \
	--nodes 0 --base-port 0 >"$work/kplane-up.log" 2>&1 &
up=$!
pids+=("$up")
until=$((SECONDS + 600))
until [[ -f $work/kplane-data/kubeconfig ]]; do
	if ! kill -0 "$up" 2>/dev/null || ((SECONDS > until)); then
		echo "kplane up did not get healthy; its log:" >&2
		tail -n 30 "$work/kplane-up.log" >&2
		KEEP=1
		exit 1
	fi
	sleep 1
done

echo "== etcd and kube-apiserver $K8S_VERSION"
d=$work/k8s
mkdir -p "$d"
ec=$(port); ep=$(port); ap=$(port)
"$ETCD" --name k --data-dir "$d/etcd" --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
	--listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" --initial-cluster "k=http://127.0.0.1:$ep" \
	--quota-backend-bytes 8589934592 --logger zap --log-level error >"$d/etcd.log" 2>&1 &
pids+=($!)
k8s_admin_files "$d" "$ap"
"$K8S_BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ec" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
	--secure-port "$ap" --cert-dir "$d/certs" --token-auth-file "$d/tokens.csv" --authorization-mode Node,RBAC \
	--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$d/sa.pub" \
	--service-account-signing-key-file "$d/sa.key" --service-cluster-ip-range 10.96.0.0/16 \
	--audit-policy-file "$work/kplane-data/audit-policy.yaml" --audit-log-path "$d/audit.log" >"$d/kube-apiserver.log" 2>&1 &
api=$!
pids+=("$api")
until=$((SECONDS + 300))
until curl -skf -H "Authorization: Bearer admintoken" "https://127.0.0.1:$ap/readyz" >/dev/null 2>&1; do
	if ((SECONDS > until)) || ! kill -0 "$api" 2>/dev/null; then
		echo "kube-apiserver did not get ready; its log:" >&2
		tail -n 30 "$d/kube-apiserver.log" >&2
		KEEP=1
		exit 1
	fi
	sleep 1
done
# A controller manager on each side: kplane's establishes CRDs and, as
# kube-controller-manager's controllers do, reacts to every pod created.
"$K8S_BIN/kube-controller-manager" --kubeconfig "$d/kubeconfig" --leader-elect=false --bind-address 127.0.0.1 \
	--secure-port "$(port)" --service-account-private-key-file "$d/sa.key" >"$d/kube-controller-manager.log" 2>&1 &
pids+=($!)

for round in $(seq 1 "$ROUNDS"); do
	for target in kplane kube-apiserver; do
		kc=$work/kplane-data/kubeconfig
		[[ $target == kplane ]] || kc=$d/kubeconfig
		echo "== round $round: $target"
		"$work/crbench" -kubeconfig "$kc" -label "$target" -crd "$CRD" -clients "$CLIENTS" -duration "$DURATION" \
			-out "$work/$target-$round.json"
	done
done
echo "== summary"
for round in $(seq 1 "$ROUNDS"); do
	"$work/crbench" -compare "$work/kplane-$round.json" "$work/kube-apiserver-$round.json"
done
