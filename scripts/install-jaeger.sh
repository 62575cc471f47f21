#!/usr/bin/env bash
# Builds Jaeger v2 (the OpenTelemetry-collector-based back end) from its Go
# module and prints the binary's path. Tracing tests and `kplane up --jaeger`
# use it; nothing is committed. `go install` refuses Jaeger's module (its
# go.mod has replace directives), so the build goes through a small wrapper
# module in the cache directory:
#   require jaeger, pin sarama as Jaeger's own go.mod does, reuse Jaeger's
#   go.sum, go mod tidy, go build.
# About 6 minutes cold on 2 cores; afterwards the cached binary is reused.
#
#   KPLANE_CACHE_DIR   where the wrapper module and binary live
#                      (default ${XDG_CACHE_HOME:-$HOME/.cache}/kplane)
#   JAEGER_VERSION     default v1.76.0
set -euo pipefail

version=${JAEGER_VERSION:-v1.76.0}
cache=${KPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kplane}
dir=$cache/jaeger-$version
bin=$dir/bin/jaeger

if [[ -x $bin ]]; then
	echo "$bin"
	exit 0
fi
command -v go >/dev/null || { echo "install-jaeger: go is not on the PATH" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local

if [[ ! -f go.mod ]]; then
	cat >go.mod <<MOD
module kplane.local/jaegerbuild

go 1.26.0

replace github.com/Shopify/sarama => github.com/Shopify/sarama v1.33.0
MOD
	cat >tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
GO
fi
echo "install-jaeger: building Jaeger $version in $dir (about 6 minutes cold)" >&2
go mod download -json "github.com/jaegertracing/jaeger@$version" >/dev/null
src=$(go env GOMODCACHE)/github.com/jaegertracing/jaeger@$version
go mod edit -require="github.com/jaegertracing/jaeger@$version"
cat "$src/go.sum" >>go.sum
sort -u -o go.sum go.sum
go mod tidy >&2
go get github.com/spf13/cobra/doc@v1.10.1 >&2
mkdir -p bin
go build -trimpath -o bin/jaeger.tmp github.com/jaegertracing/jaeger/cmd/jaeger >&2
mv bin/jaeger.tmp "$bin"
echo "$bin"
