#!/usr/bin/env bash
# Regenerates every generated file: the resource messages from Kubernetes'
# Go types (proto/internal/kubegen), the service protos and Go adaptors
# (proto/internal/gen), then the Go, gRPC and grpc-gateway code (buf).
#   scripts/gen.sh           regenerate into the tree
#   scripts/gen.sh --check   regenerate, then fail if that changed anything
#                            (generated code was stale or not committed)
set -euo pipefail
cd "$(dirname "$0")/.."

generated=(proto services/apiserver/zz_generated_services.go)

go run ./proto/internal/kubegen -root .
go run ./proto/internal/gen -root .
go tool buf lint
go tool buf generate
gofmt -w services/apiserver/zz_generated_services.go 2>/dev/null || true

if [[ "${1:-}" == "--check" ]]; then
	existing=()
	for p in "${generated[@]}"; do [[ -e "$p" ]] && existing+=("$p"); done
	stale=$(git status --porcelain --untracked-files=all -- "${existing[@]}")
	if [[ -n "$stale" ]]; then
		echo "generated code is stale or uncommitted; run scripts/gen.sh and commit:" >&2
		echo "$stale" >&2
		exit 1
	fi
	echo "generated code is up to date"
fi
