#!/usr/bin/env bash
# The conformance scoreboard (issue 21): Kubernetes' own [Conformance] e2e
# tests run against `kplane up`, written to CONFORMANCE.md.
#
#   scripts/conformance.sh                      all [Conformance] tests, CONFORMANCE.md
#   scripts/conformance.sh --focus '\[sig-api-machinery\].*\[Conformance\]'
#   scripts/conformance.sh --ci                 only conformance/expected-passes.txt;
#                                               fails if any of them does not pass
#   scripts/conformance.sh --build-only         only build e2e.test and ginkgo
#   scripts/conformance.sh --ci --if-built      as --ci, but when CI is not set and
#                                               e2e.test is not built yet, say so
#                                               and exit 0 (scripts/test.sh)
#   --skip REGEX      Ginkgo --skip on top of the focus
#   --procs N         tests run at a time (default 2); [Serial] ones run afterwards, alone
#   --timeout D       per-test timeout (default 5m)
#   --max-time D      per run, start no test after D (e.g. 40m); the rest show
#                     as "not run" (default: no limit)
#   --out FILE        the page to write (default CONFORMANCE.md; --ci writes none)
#   RUNS="as-is assisted" the runs, one column each: as-is is kplane up as it
#                     starts; assisted creates default/kubernetes (the
#                     Service e2e.test's setup reads) if it is missing (kplane
#                     keeps it itself since issue 24; kplane binaries from
#                     before lack it) and tells e2e.test not to wait for each
#                     namespace's "default" ServiceAccount (kplane's
#                     controllers create it since the ServiceAccount
#                     controller; older binaries lack it) (--ci: as-is only);
#                     k8s runs the same tests against etcd, kube-apiserver,
#                     kube-controller-manager and kube-scheduler K8S_VERSION
#                     with KWOK's NODES nodes (RUNS="as-is assisted k8s")
#   KPLANE=/path/to/kplane    a kplane binary built elsewhere; KEEP=1 keeps the work dir
#
# e2e.test (k8s.io/kubernetes/test/e2e compiled with go test -c) and ginkgo
# (the CLI at the version Kubernetes' go.mod requires) of K8S_VERSION are
# built from the Go module proxy by scripts/lib/k8s-build.sh, outside the
# repository, in ${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench (3.5 min on
# 2 cores when Go's build cache already holds the Kubernetes servers' build;
# longer from nothing).
#
# Ginkgo 2 has no per-spec timeout, so every test is its own Ginkgo run of
# e2e.test focused on exactly that test, under timeout(1), PROCS at a time;
# a test stuck waiting cannot hold up the others. Tests in
# conformance/listed-apart.txt are not run and appear apart, with the reason.
# kplane up (built-in runtime, free loopback ports, its own data dir in a
# temporary directory) is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSION=${K8S_VERSION:-v1.33.13}
FOCUS='\[Conformance\]'
SKIP=""
PROCS=${PROCS:-2}
TEST_TIMEOUT=${TEST_TIMEOUT:-5m}
RUNS=${RUNS:-"as-is assisted"}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
MAX_TIME=""
NODES=${NODES:-3}
OUT=CONFORMANCE.md
LISTED_APART=conformance/listed-apart.txt
EXPECTED=conformance/expected-passes.txt
ci=0
build_only=0
if_built=0
while (($#)); do
	case $1 in
	--ci) ci=1 RUNS=as-is ;;
	--build-only) build_only=1 ;;
	--if-built) if_built=1 ;;
	--focus) FOCUS=$2; shift ;;
	--skip) SKIP=$2; shift ;;
	--procs) PROCS=$2; shift ;;
	--timeout) TEST_TIMEOUT=$2; shift ;;
	--out) OUT=$2; shift ;;
	--max-time) MAX_TIME=$2; shift ;;
	*) echo "unknown argument $1 (see the top of $0)" >&2; exit 2 ;;
	esac
	shift
done

# shellcheck source=scripts/lib/k8s-build.sh
source scripts/lib/k8s-build.sh
if ((if_built)) && [[ -z "${CI:-}" ]] && ! k8s_built "$K8S_VERSION" e2e.test ginkgo; then
	echo "skipped: e2e.test $K8S_VERSION is not built (scripts/conformance.sh --build-only builds it," \
		"several minutes to far longer cold); under CI=true it is built and run"
	exit 0
fi
K8S_BIN=$(k8s_build "$K8S_VERSION" e2e.test ginkgo)
K8S_SERVERS=""
KWOK=""
case " $RUNS " in *" k8s "*)
	ETCD=${ETCD:-$(command -v etcd || true)}
	[[ -x "$ETCD" ]] || { echo "etcd not found: apt-get install -y etcd-server" >&2; exit 1; }
	K8S_SERVERS=$(k8s_build "$K8S_VERSION" kube-apiserver kube-controller-manager kube-scheduler)
	KWOK=$(k8s_cache_dir)/kwok-$KWOK_VERSION/bin/kwok
	if [[ ! -x $KWOK ]]; then
		mkdir -p "${KWOK%/kwok}"
		GOBIN=${KWOK%/kwok} go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
	fi
	;;
esac
((build_only)) && exit 0
E2E=$K8S_BIN/e2e.test
GINKGO=$K8S_BIN/ginkgo

work=$(mktemp -d "${TMPDIR:-/tmp}/kplane-conformance.XXXXXX")
data=$work/data
up_pid=""
k8s_pids=()
cleanup() {
	local p
	for p in "${k8s_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	if [[ -f $data/up.json ]]; then
		"$work/kplane" down --data-dir "$data" --grace-period 10s >/dev/null 2>&1 || true
	fi
	if [[ -n $up_pid ]]; then
		kill "$up_pid" 2>/dev/null || true
		wait "$up_pid" 2>/dev/null || true
	fi
	if [[ -n "${KEEP:-}" ]]; then echo "work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== building kplane and the scoreboard helper"
if [[ -n "${KPLANE:-}" ]]; then cp "$KPLANE" "$work/kplane"; else go build -o "$work/kplane" ./cmd/kplane; fi
go build -o "$work/conformance" ./internal/conformance

started=$(date -u '+%Y-%m-%d %H:%M UTC')
start_s=$SECONDS
echo "== kplane up: built-in runtime, $NODES nodes, free loopback ports, data in $data"
"$work/kplane" up --data-dir "$data" --base-port 0 --nodes "$NODES" >"$work/up.log" 2>&1 &
up_pid=$!
until=$((SECONDS + 600))
until [[ -f $data/kubeconfig ]]; do
	if ! kill -0 "$up_pid" 2>/dev/null || ((SECONDS > until)); then
		echo "kplane up did not get healthy; its log:" >&2
		tail -n 30 "$work/up.log" >&2
		KEEP=1
		exit 1
	fi
	sleep 1
done
KUBECONFIG_UP=$data/kubeconfig

# The tests to run, one "serial<TAB>focus<TAB>name" line each: in --ci mode
# the expected passes, else those a Ginkgo dry run of FOCUS/SKIP selects.
"$GINKGO" --dry-run --no-color --focus "$FOCUS" ${SKIP:+--skip "$SKIP"} --junit-report "$work/dry-run.xml" \
	"$E2E" -- --provider skeleton --kubeconfig "$KUBECONFIG_UP" >"$work/dry-run.log" 2>&1 ||
	{ tail -n 20 "$work/dry-run.log" >&2; exit 1; }
if ((ci)); then
	"$work/conformance" list -names "$EXPECTED" >"$work/tests.tsv"
else
	"$work/conformance" list -dry-run "$work/dry-run.xml" -listed-apart "$LISTED_APART" >"$work/tests.tsv"
fi
echo "== $(wc -l <"$work/tests.tsv") tests, $PROCS at a time, $TEST_TIMEOUT each"
mkdir -p "$work/e2e-output"

# run_test DIR N FOCUS NAME [E2E FLAGS...]: one Ginkgo run of e2e.test focused on one test,
# leaving DIR/N.name, N.xml (JUnit), N.log and N.exit (124, or 137 after the
# SIGKILL a minute later, when the timeout stopped it).
run_test() {
	local base=$1/$2 focus=$3 name=$4 rc=0
	shift 4
	printf '%s\n' "$name" >"$base.name"
	timeout -k 60s "$TEST_TIMEOUT" "$GINKGO" --no-color --silence-skips --focus "$focus" --junit-report "$base.xml" \
		"$E2E" -- --provider skeleton --kubeconfig "$KUBECONFIG_RUN" --e2e-output-dir "$work/e2e-output" \
		--kubectl-path "$(command -v kubectl || echo kubectl)" "$@" >"$base.log" 2>&1 || rc=$?
	echo "$rc" >"$base.exit"
	local result=passed
	((rc == 0)) || result="exit $rc"
	echo "   ${base##*/} $result  $name"
}

# run_all DIR [E2E FLAGS...]: every test of tests.tsv, PROCS at a time,
# then the [Serial] ones one by one.
run_all() {
	local dir=$1 n=0 is_serial focus name j s stop_at
	shift
	local jobs=() serial=() alive
	stop_at=$((SECONDS + $(seconds "${MAX_TIME:-100000d}")))
	mkdir -p "$dir"
	while IFS=$'\t' read -r is_serial focus name; do
		n=$((n + 1))
		((SECONDS < stop_at)) || break
		if ((is_serial)); then
			serial+=("$n"$'\t'"$focus"$'\t'"$name")
			continue
		fi
		while ((${#jobs[@]} >= PROCS)); do
			wait -n "${jobs[@]}" || true
			alive=()
			for j in "${jobs[@]}"; do kill -0 "$j" 2>/dev/null && alive+=("$j"); done
			jobs=("${alive[@]}")
		done
		run_test "$dir" "$(printf %04d "$n")" "$focus" "$name" "$@" &
		jobs+=($!)
	done <"$work/tests.tsv"
	for j in "${jobs[@]}"; do wait "$j" || true; done
	for s in "${serial[@]}"; do
		((SECONDS < stop_at)) || break
		IFS=$'\t' read -r n focus name <<<"$s"
		run_test "$dir" "$(printf %04d "$n")" "$focus" "$name" "$@"
	done
}

# start_kubernetes DIR: etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler K8S_VERSION on loopback, with KWOK simulating NODES nodes
# (Ready, untainted, running their pods), as scripts/bench-density.sh starts
# them; writes DIR/kubeconfig (a token in system:masters) and adds every
# process to k8s_pids.
start_kubernetes() {
	local d=$1 ec ep ap
	mkdir -p "$d"
	ec=$(free_port); ep=$(free_port); ap=$(free_port)
	"$ETCD" --name k --data-dir "$d/etcd" --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
		--listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" \
		--initial-cluster "k=http://127.0.0.1:$ep" --log-level error >"$d/etcd.log" 2>&1 &
	k8s_pids+=($!)
	k8s_admin_files "$d" "$ap"
	"$K8S_SERVERS/kube-apiserver" --etcd-servers "http://127.0.0.1:$ec" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
		--secure-port "$ap" --cert-dir "$d/certs" --token-auth-file "$d/tokens.csv" --authorization-mode Node,RBAC \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$d/sa.pub" \
		--service-account-signing-key-file "$d/sa.key" --service-cluster-ip-range 10.96.0.0/16 >"$d/kube-apiserver.log" 2>&1 &
	k8s_pids+=($!)
	local until=$((SECONDS + 300))
	until kubectl --kubeconfig "$d/kubeconfig" get --raw /readyz >/dev/null 2>&1; do
		((SECONDS < until)) || { echo "kube-apiserver did not get ready:" >&2; tail -n 20 "$d/kube-apiserver.log" >&2; return 1; }
		sleep 1
	done
	"$K8S_SERVERS/kube-controller-manager" --kubeconfig "$d/kubeconfig" --leader-elect=false --bind-address 127.0.0.1 \
		--secure-port "$(free_port)" --service-account-private-key-file "$d/sa.key" --root-ca-file "$d/certs/apiserver.crt" \
		--use-service-account-credentials >"$d/kube-controller-manager.log" 2>&1 &
	k8s_pids+=($!)
	"$K8S_SERVERS/kube-scheduler" --kubeconfig "$d/kubeconfig" --leader-elect=false --bind-address 127.0.0.1 \
		--secure-port "$(free_port)" >"$d/kube-scheduler.log" 2>&1 &
	k8s_pids+=($!)
	kwok_stages >"$d/kwok-stages.yaml"
	"$KWOK" --kubeconfig "$d/kubeconfig" --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
		--node-lease-duration-seconds 40 --server-address "127.0.0.1:$(free_port)" --node-ip 127.0.0.1 \
		--config "$d/kwok-stages.yaml" >"$d/kwok.log" 2>&1 &
	k8s_pids+=($!)
	local i
	for ((i = 1; i <= NODES; i++)); do
		cat <<EON
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {type: kwok, kubernetes.io/hostname: kwok-node-$i, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
---
EON
	done | kubectl --kubeconfig "$d/kubeconfig" apply -f - >/dev/null
	until=$((SECONDS + 120))
	until [[ $(kubectl --kubeconfig "$d/kubeconfig" get nodes --no-headers 2>/dev/null | grep -c ' Ready ') -ge $NODES ]]; do
		((SECONDS < until)) || { echo "KWOK's nodes did not get Ready:" >&2; tail -n 20 "$d/kwok.log" >&2; return 1; }
		sleep 1
	done
}

# kwok_stages prints KWOK's own stage files from its module: Ready nodes
# with lease heartbeats, pods that run, complete and get deleted.
kwok_stages() {
	local dir
	dir=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage
	[[ -d $dir ]] || GOFLAGS=-mod=mod go mod download "sigs.k8s.io/kwok@$KWOK_VERSION"
	local f
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
		cat "$dir/$f"
		echo "---"
	done
}

free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		ss -ltn "sport = :$p" | grep -q LISTEN || { echo "$p"; return; }
	done
}

stop_kubernetes() {
	local p
	for p in "${k8s_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${k8s_pids[@]}"; do wait "$p" 2>/dev/null || true; done
	k8s_pids=()
}

# seed_kubernetes_service creates default/kubernetes, the Service
# kube-apiserver itself keeps for the API (port 443, no selector), when it is
# missing. e2e.test's suite setup reads its ClusterIP before any test, so
# without it every test fails in SynchronizedBeforeSuite; the "assisted" run
# shows what lies behind that first failure until kplane creates the Service.
seed_kubernetes_service() {
	kubectl --kubeconfig "$KUBECONFIG_UP" -n default get service kubernetes >/dev/null 2>&1 && return 0
	kubectl --kubeconfig "$KUBECONFIG_UP" create -f - >/dev/null <<'EOY'
apiVersion: v1
kind: Service
metadata:
  name: kubernetes
  namespace: default
  labels: {component: apiserver, provider: kubernetes}
spec:
  type: ClusterIP
  ports:
  - {name: https, port: 443, protocol: TCP, targetPort: 443}
EOY
}

# seconds D prints a duration such as 90s, 40m or 2h in seconds.
seconds() {
	case $1 in
	*d) echo $((${1%d} * 86400)) ;;
	*h) echo $((${1%h} * 3600)) ;;
	*m) echo $((${1%m} * 60)) ;;
	*s) echo "${1%s}" ;;
	*) echo "$1" ;;
	esac
}

# duration SECONDS prints 1h02m03s.
duration() {
	printf '%dh%02dm%02ds\n' $(($1 / 3600)) $(($1 % 3600 / 60)) $(($1 % 60))
}

report_args=()
for r in $RUNS; do
	KUBECONFIG_RUN=$KUBECONFIG_UP
	case $r in
	as-is) label="kplane up" ;;
	assisted) label="kplane up, setup assisted"; seed_kubernetes_service ;;
	k8s)
		label="Kubernetes $K8S_VERSION + KWOK"
		start_kubernetes "$work/k8s"
		KUBECONFIG_RUN=$work/k8s/kubeconfig
		;;
	*) echo "unknown run $r (as-is, assisted, k8s)" >&2; exit 2 ;;
	esac
	echo "== run $r: $label"
	run_start=$SECONDS
	flags=()
	# The framework waits up to 2 minutes for each test namespace's "default"
	# ServiceAccount; kplane binaries from before the ServiceAccount
	# controller never create it, and the assisted run tells e2e.test not
	# to wait.
	[[ $r != assisted ]] || flags=(--e2e-verify-service-account=false)
	run_all "$work/results-$r" "${flags[@]}"
	stop_kubernetes
	duration $((SECONDS - run_start)) >"$work/results-$r/wall"
	report_args+=(-results "$label=$work/results-$r")
done
wall_text=$(duration $((SECONDS - start_s)))

if ((ci)); then
	echo "== expected passes ($EXPECTED), $wall_text"
	"$work/conformance" check -results "$work/results-${RUNS##* }" -expected "$EXPECTED"
	exit
fi

machine="$(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr)"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit (modified)"
"$work/conformance" report -dry-run "$work/dry-run.xml" "${report_args[@]}" -listed-apart "$LISTED_APART" \
	-out "$OUT" -nodes "$NODES" -date "$started" -machine "$machine" \
	-commit "$commit" -focus "$FOCUS" -skip "$SKIP" -procs "$PROCS" -timeout "$TEST_TIMEOUT" \
	-version "$K8S_VERSION"
echo "== wrote $OUT; kplane up and all runs took $wall_text"
