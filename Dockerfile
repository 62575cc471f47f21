# syntax=docker/dockerfile:1
#
# One image for every kplane component: the command picks it, e.g.
#   docker run --rm kplane:dev store --help
#   docker run --rm kplane:dev apiserver --store-endpoints ...
# docker-compose.yml and charts/kplane use it. Build from the repository root:
#   docker build -t kplane:dev .

# --- build: a static binary (no cgo), trimmed paths, version from git ---
FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so source edits keep the download layer cached.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" -o /out/kplane ./cmd/kplane \
 && mkdir -p /out/var/lib/kplane/pki /out/var/lib/kplane/store /out/var/lib/kplane/nodeagent

# --- run: distroless static, as the unprivileged "nonroot" user (65532) ---
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kplane /kplane
# The one writable directory: store data, node agent state, generated PKI.
COPY --from=build --chown=65532:65532 /out/var/lib/kplane /var/lib/kplane
USER 65532:65532
WORKDIR /var/lib/kplane
# store client and peer, API service, gateway, node agent logs
EXPOSE 2379 2380 6443 6444 10250
ENTRYPOINT ["/kplane"]
CMD ["--help"]
