#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine, from Debian's
# packages or with `go install`. Idempotent: anything already present is kept.
# Tests that need a tool skip with a message on a person's machine when it is
# missing, but under CI (CI=true) they fail, so CI must run this first.
#
# What and why:
#   etcd-server, etcd-client   the API service's suite runs against a real etcd
#                              too; the store's interop tests drive etcdctl
#   containerd, runc,          the node agent's real-runtime tests start their
#   containernetworking-plugins own containerd under a temp dir (no daemon is
#                              started here); their pods join the node's CNI
#                              network (bridge, host-local, portmap, loopback)
#   iptables, iproute2         the node agent's masquerade rule for pods; the
#                              pod network tests check and clean the host
#   nftables                   nft, which kplane proxy programs the host's
#                              Service rules through (knftables); the proxy's
#                              kernel test and its containerd test need it
#   busybox-static             the static shell, cat and tar of the image the
#                              exec, cp and run -i tests run on containerd
#   helm (go install, pinned)  internal/packaging lints and renders charts/kplane
#   Jaeger v1.76.0 (v2)         the tracing tests export to a real Jaeger; built
#                              from its Go module by install-jaeger.sh into the
#                              cache dir (~6 min cold, reused afterwards)
set -euo pipefail

# helm builds from the Go module proxy (no Debian package): as root into
# /usr/local/bin, otherwise into $(go env GOPATH)/bin (the tests look there too).
HELM_VERSION=v3.22.0
if ! command -v helm >/dev/null 2>&1 && [[ ! -x "$(go env GOPATH)/bin/helm" ]]; then
	echo "install-deps: go install helm.sh/helm/v3/cmd/helm@${HELM_VERSION} (a few minutes cold)"
	if [[ $(id -u) -eq 0 ]]; then
		GOBIN=/usr/local/bin go install "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
	else
		go install "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
	fi
fi

"$(dirname "$0")/install-jaeger.sh" >/dev/null

need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
for p in bridge host-local portmap loopback; do
	[[ -x /usr/lib/cni/$p ]] || { need+=(containernetworking-plugins); break; }
done
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
[[ -x /bin/busybox ]] || need+=(busybox-static)

if ((${#need[@]} == 0)); then
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "install-deps: not root; please install these Debian packages: ${need[*]}" >&2
	[[ "${CI:-}" == "true" ]] && exit 1
	exit 0
fi
echo "install-deps: apt-get install ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian's packages may start services where systemd runs; kplane's tests
# start their own etcd and containerd on loopback and temp dirs, so make sure
# none of the system ones is left running.
pkill -x etcd 2>/dev/null || true
