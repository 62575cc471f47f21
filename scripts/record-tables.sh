#!/usr/bin/env bash
# Records kube-apiserver's server-side Tables for the corpus of
# gateway/testdata/tables (issue 20): starts etcd and the cached
# kube-apiserver K8S_VERSION (built as scripts/lib/k8s-build.sh builds it),
# runs gateway/internal/recordtables against it, which writes
# gateway/testdata/tables/recorded.json (the rows gateway's table test
# compares kplane's with) and gateway/tablecolumns.json (the column
# definitions the gateway serves), then stops what it started.
#
#   scripts/record-tables.sh            record (builds kube-apiserver if not cached)
#   KEEP=1 scripts/record-tables.sh     keep the work directory and its logs
#   RECORDER=./gateway/internal/recordinvalid scripts/record-tables.sh
#                                       record how kube-apiserver refuses the
#                                       objects of gateway/testdata/invalid
#   RECORDER=./internal/apidiff/record scripts/record-tables.sh
#                                       record how kube-apiserver admits the
#                                       cases of gateway/testdata/admission
#                                       (LimitRange, quota, priority, Pod Security)
#
# Needs Go, Debian's etcd-server and openssl. Listens on loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/k8s-build.sh
source scripts/lib/k8s-build.sh

K8S_VERSION=${K8S_VERSION:-v1.33.13}
ETCD=${ETCD:-$(command -v etcd || true)}
[[ -x "$ETCD" ]] || { echo "etcd not found: apt-get install -y etcd-server" >&2; exit 1; }
K8S_BIN=$(k8s_build "$K8S_VERSION" kube-apiserver | tail -n 1)

work=$(mktemp -d)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [[ -n ${KEEP:-} ]]; then echo "== kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		ss -ltn "sport = :$p" | grep -q LISTEN || { echo "$p"; return; }
	done
}

ec=$(port); ep=$(port); ap=$(port)
"$ETCD" --name k --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
	--listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" --initial-cluster "k=http://127.0.0.1:$ep" \
	--logger zap --log-level error >"$work/etcd.log" 2>&1 &
pids+=($!)
k8s_admin_files "$work" "$ap"
"$K8S_BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ec" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
	--secure-port "$ap" --cert-dir "$work/certs" --token-auth-file "$work/tokens.csv" --authorization-mode Node,RBAC \
	--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$work/sa.pub" \
	--service-account-signing-key-file "$work/sa.key" --service-cluster-ip-range 10.96.0.0/16 >"$work/kube-apiserver.log" 2>&1 &
pids+=($!)
api_pid=$!
until=$((SECONDS + 300))
until curl -skf -H "Authorization: Bearer admintoken" "https://127.0.0.1:$ap/readyz" >/dev/null 2>&1; do
	if ((SECONDS > until)) || ! kill -0 "$api_pid" 2>/dev/null; then
		echo "kube-apiserver did not get ready; its log:" >&2
		tail -n 30 "$work/kube-apiserver.log" >&2
		exit 1
	fi
	sleep 1
done
echo "== kube-apiserver $K8S_VERSION on :$ap; recording"
go run "${RECORDER:-./gateway/internal/recordtables}" -kubeconfig "$work/kubeconfig" "$@"
echo "== recorded with ${RECORDER:-./gateway/internal/recordtables}"
