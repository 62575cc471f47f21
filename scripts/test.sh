#!/usr/bin/env bash
# The whole test suite. `.ci/run` calls exactly this; so can you.
#   scripts/test.sh            everything (installs what the tests need when run as root)
#   SKIP_INSTALL=1 scripts/test.sh   do not try to install anything
# The quick tier, for a change in progress, is not this script but
#   go test -short ./...
# which skips every test that builds the kplane binary or starts a whole
# cluster of its processes (`kplane up`, `kplane store`, the chaos and
# packaging tests): they call testutil.SkipShort, and testutil.RunWithKplane
# builds nothing under -short. This script runs the full tier.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${SKIP_INSTALL:-}" ]]; then
	scripts/install-deps.sh
fi

echo "== generated code is up to date"
if [[ -f buf.gen.yaml ]]; then
	scripts/gen.sh --check
fi

echo "== gofmt, go vet"
unformatted=$(gofmt -l $(git ls-files '*.go') 2>/dev/null || true)
if [[ -n "$unformatted" ]]; then
	echo "not gofmt-formatted:"; echo "$unformatted"; exit 1
fi
go vet ./...

echo "== go test"
go test -count=1 -timeout 25m ./...

echo "== the API service's suite again, on the kplane store instead of etcd"
KPLANE_TEST_STORE=kplane go test -count=1 -timeout 10m ./services/apiserver/

echo "== Kubernetes' conformance tests that pass today still pass (conformance/expected-passes.txt)"
scripts/conformance.sh --ci --if-built

echo "== fuzz (brief)"
scripts/fuzz.sh
