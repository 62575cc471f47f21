# shellcheck shell=bash
# This file holds the Kubernetes build shared by the scripts that run
# Kubernetes' own binaries beside kplane (bench-density.sh, conformance.sh).
# Source it; it defines functions only and changes no shell options.
#
# Everything is built from the Go module proxy, outside the repository, in
# a wrapper module under $KPLANE_BENCH_CACHE (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench): a module that requires
# k8s.io/kubernetes and replaces each of its staging modules (Kubernetes'
# go.mod points them at ./staging/src/k8s.io/X, which a module download does
# not have) with the published v0.x release of the same patch level, with
# Kubernetes' own go.sum copied in. Every binary lands in the wrapper's bin/.

# k8s_cache_dir prints the cache directory of the benchmark builds.
k8s_cache_dir() {
	echo "${KPLANE_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench}"
}

# k8s_staging_version VERSION prints the staging modules' version for a
# Kubernetes version: v1.33.13 -> v0.33.13.
k8s_staging_version() {
	echo "v0${1#v1}"
}

# k8s_module_version MODULE WANT prints WANT when the proxy serves
# MODULE@WANT, else the newest release of the same minor that it serves.
# (k8s.io/sample-apiserver is not published for every patch release; only
# e2e.test needs it, for the aggregator test's API types.)
k8s_module_version() {
	local mod=$1 want=$2
	if GOFLAGS=-mod=mod go mod download "$mod@$want" >/dev/null 2>&1; then
		echo "$want"
		return
	fi
	local minor=${want%.*}
	go list -m -versions "$mod" | tr ' ' '\n' | grep "^${minor//./\\.}\.[0-9]*$" | sort -V | tail -n 1
}

# k8s_write_wrapper DIR VERSION writes the wrapper module's go.mod and go.sum
# into DIR (run from DIR).
k8s_write_wrapper() {
	local wrap=$1 version=$2 staging dir sample
	staging=$(k8s_staging_version "$version")
	dir=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -d $dir ]] || { echo "could not download k8s.io/kubernetes@$version" >&2; return 1; }
	sample=$(k8s_module_version k8s.io/sample-apiserver "$staging")
	[[ -n $sample ]] || { echo "no k8s.io/sample-apiserver release for $staging" >&2; return 1; }
	{
		echo "module kplane-bench/kubernetes"
		echo
		echo "go 1.24.0"
		echo
		echo "require k8s.io/kubernetes $version"
		echo
		echo "replace ("
		# sample-apiserver is a staging module too, but gets its own line
		# below (two replacements of one module are refused).
		sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\1#p' "$dir/go.mod" |
			grep -vx k8s.io/sample-apiserver | sort -u | while read -r m; do echo "	$m => $m $staging"; done
		echo "	k8s.io/sample-apiserver => k8s.io/sample-apiserver $sample"
		echo ")"
	} >"$wrap/go.mod"
	cp "$dir/go.sum" "$wrap/go.sum"
	chmod u+w "$wrap/go.sum"
}

# k8s_binary_package NAME prints the Go package a binary of bin/ is built
# from: e2e.test is Kubernetes' e2e suite compiled as a test binary, ginkgo
# is the CLI at the version Kubernetes' go.mod requires, anything else is
# k8s.io/kubernetes/cmd/NAME.
k8s_binary_package() {
	case $1 in
	e2e.test) echo k8s.io/kubernetes/test/e2e ;;
	ginkgo) echo github.com/onsi/ginkgo/v2/ginkgo ;;
	*) echo "k8s.io/kubernetes/cmd/$1" ;;
	esac
}

# k8s_wait_for_other_build WRAP waits (at most K8S_BUILD_WAIT seconds,
# default 1800) while another process is building in WRAP: it holds the
# wrapper's lock, and bin/kube-apiserver, the first binary every build
# makes, does not exist yet. A wrapper whose lock nobody holds is an
# abandoned build (the machine or the script was stopped), which the next
# build simply goes on with. Returns 1 if the binary never appeared.
k8s_wait_for_other_build() {
	local wrap=$1 until=$((SECONDS + ${K8S_BUILD_WAIT:-1800}))
	[[ -f $wrap/go.mod && ! -x $wrap/bin/kube-apiserver ]] || return 0
	if [[ ! -e $wrap.lock ]] || flock -n "$wrap.lock" true; then
		return 0
	fi
	echo "== waiting for the build already under way in $wrap" >&2
	until [[ -x $wrap/bin/kube-apiserver ]]; do
		((SECONDS < until)) || return 1
		sleep 10
	done
}

# k8s_built VERSION NAME... reports whether every binary NAME of Kubernetes
# VERSION is already in the cache (no build, no network).
k8s_built() {
	local version=$1 b dir
	shift
	for dir in "$(k8s_cache_dir)/kubernetes-$version" "$(k8s_cache_dir)/kubernetes-$version-2"; do
		for b in "$@"; do [[ -x $dir/bin/$b ]] || continue 2; done
		return 0
	done
	return 1
}

# k8s_build VERSION NAME... builds each missing binary NAME (kube-apiserver,
# kube-scheduler, kube-controller-manager, e2e.test, ginkgo) of Kubernetes
# VERSION into the wrapper module's bin/ and prints that bin directory last.
# The wrapper is $cache/kubernetes-VERSION; when another process is building
# there and does not finish in time, a sibling kubernetes-VERSION-2 is used.
# A lock file beside the wrapper keeps two of these functions from writing
# the same wrapper at once.
k8s_build() {
	local version=$1
	shift
	local cache wrap dir b
	cache=$(k8s_cache_dir)
	# Binaries already built in either wrapper are used as they are.
	for dir in "$cache/kubernetes-$version" "$cache/kubernetes-$version-2"; do
		for b in "$@"; do [[ -x $dir/bin/$b ]] || continue 2; done
		echo "$dir/bin"
		return 0
	done
	wrap=$cache/kubernetes-$version
	mkdir -p "$cache"
	if ! k8s_wait_for_other_build "$wrap"; then
		wrap=$cache/kubernetes-$version-2
		echo "== the build in $cache/kubernetes-$version did not finish; using $wrap" >&2
	fi
	mkdir -p "$wrap/bin"
	(
		flock 9
		k8s_build_locked "$wrap" "$version" "$@"
	) 9>"$wrap.lock" >&2 || return 1
	echo "$wrap/bin"
}

# k8s_build_locked WRAP VERSION NAME... is k8s_build's work, under the lock.
k8s_build_locked() {
	local wrap=$1 version=$2
	shift 2
	local missing=() b
	for b in "$@"; do [[ -x $wrap/bin/$b ]] || missing+=("$b"); done
	((${#missing[@]})) || return 0
	echo "== building ${missing[*]} of Kubernetes $version in $wrap (cold: ~10 min for the servers, ~20 more for e2e.test, on 2 cores)"
	cd "$wrap" || return 1
	[[ -f go.mod ]] || k8s_write_wrapper "$wrap" "$version" || return 1
	# A replace naming an unpublished sample-apiserver (written by an older
	# version of this file) breaks go mod tidy once e2e.test is wanted.
	local staging sample
	staging=$(k8s_staging_version "$version")
	if grep -q "k8s.io/sample-apiserver $staging\$" go.mod; then
		sample=$(k8s_module_version k8s.io/sample-apiserver "$staging")
		go mod edit -replace "k8s.io/sample-apiserver=k8s.io/sample-apiserver@$sample" || return 1
	fi
	k8s_write_tools "$@" "$(cd bin && ls)" >tools.go
	GOFLAGS=-mod=mod go mod tidy || return 1
	for b in "${missing[@]}"; do
		echo "   building $b"
		if [[ $b == e2e.test ]]; then
			GOFLAGS=-mod=mod go test -c -trimpath -o "bin/$b" "$(k8s_binary_package "$b")" || return 1
		else
			go build -trimpath -o "bin/$b" "$(k8s_binary_package "$b")" || return 1
		fi
	done
}

# k8s_write_tools NAME... prints a tools.go importing the package of every
# binary named, so that go mod tidy keeps all their dependencies.
k8s_write_tools() {
	local pkgs=() b
	for b in $*; do pkgs+=("$(k8s_binary_package "$b")"); done
	echo "//go:build tools"
	echo
	echo "package tools"
	echo
	echo "import ("
	printf '%s\n' "${pkgs[@]}" | sort -u | sed 's/.*/	_ "&"/'
	echo ")"
}

# k8s_admin_files DIR PORT writes what a kube-apiserver started by these
# scripts runs with into DIR: a service-account key pair (sa.key, sa.pub),
# a token file whose admintoken is in system:masters (tokens.csv), and a
# kubeconfig for https://127.0.0.1:PORT with that token (kubeconfig).
k8s_admin_files() {
	local d=$1 port=$2
	openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
	openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
	echo "admintoken,admin,admin,system:masters" >"$d/tokens.csv"
	cat >"$d/kubeconfig" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: k
  cluster: {server: "https://127.0.0.1:$port", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: admintoken}
contexts:
- name: k
  context: {cluster: k, user: admin}
current-context: k
EOK
}
