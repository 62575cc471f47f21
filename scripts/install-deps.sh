#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine, from Debian's
# packages or with `go install`. Idempotent: anything already present is kept.
# Tests that need a tool skip with a message on a person's machine when it is
# missing, but under CI (CI=true) they fail, so CI must run this first.
set -euo pipefail

need_apt=()
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need_apt+=(etcd-client)

if ((${#need_apt[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: not root; please install: ${need_apt[*]}" >&2
		[[ "${CI:-}" == "true" ]] && exit 1
		exit 0
	fi
	echo "install-deps: apt-get install ${need_apt[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
	# Debian's etcd-server package may try to start a service; kplane's tests
	# start their own members on loopback, so make sure none is left running.
	pkill -x etcd 2>/dev/null || true
fi

# --- containerd, for the node agent's real-runtime tests (nodeagent/cri,
# nodeagent/internal/containerdtest; owner: node agent). containerd 1.6 with
# its CRI plugin, runc and the CNI plugins, all from Debian. No daemon is
# started here: the tests start their own containerd under a temp dir.
need_ctrd=()
command -v containerd >/dev/null 2>&1 || need_ctrd+=(containerd)
command -v runc >/dev/null 2>&1 || need_ctrd+=(runc)
[[ -x /usr/lib/cni/host-local ]] || need_ctrd+=(containernetworking-plugins)
if ((${#need_ctrd[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: not root; for the containerd tests please install: ${need_ctrd[*]}" >&2
		[[ "${CI:-}" == "true" ]] && exit 1
	else
		echo "install-deps: apt-get install ${need_ctrd[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${need_ctrd[@]}" >/dev/null
	fi
fi
