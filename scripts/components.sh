#!/usr/bin/env bash
# Kubernetes' own components run unchanged against kplane (issue 21), one
# pass/fail row each, written to COMPONENTS.md (CONFORMANCE.md links it):
#
#   kube-scheduler           v1.33.13 against `kplane up --schedulers 0`
#                            (simulated nodes), as system:kube-scheduler (the
#                            certificate kplane up issues its own scheduler,
#                            so under that user's RBAC role): a Deployment of REPLICAS pods
#                            is bound by it (its Lease, its Scheduled events)
#                            and Running.
#   kwok                     KWOK v0.8.0 against `kplane up --nodes 0`: it
#                            manages NODES fake nodes (Ready, with Lease
#                            heartbeats) and runs the pods kplane's scheduler
#                            binds to them.
#   kube-controller-manager  v1.33.13 against `kplane up --controller-managers 0`,
#                            as admin (see the page's notes):
#                            Deployment -> ReplicaSet -> Pods, a Job that
#                            completes, a namespace's default ServiceAccount
#                            and its deletion, garbage collection of an
#                            orphaned ReplicaSet's pods.
#   helm                     `helm install` and `helm upgrade --install
#                            --atomic` of scripts/testdata/components-chart
#                            (ServiceAccount, Role/RoleBinding, ConfigMap,
#                            Deployment, Service, a CRD and its object, a
#                            post-install/upgrade Job hook) against `kplane up`.
#   kube-apiserver           v1.33.13 on kplane's store, beside `kplane up
#                            --nodes 1` (its store members' client URLs, the
#                            store client certificate of the data dir's pki/;
#                            --endpoint-reconciler-type=none, so it leaves
#                            default/kubernetes to kplane): /readyz ok; a
#                            ConfigMap and a Deployment created through kplane
#                            read through it with the same uid, resourceVersion
#                            and contents; a ConfigMap created through it read
#                            through kplane; its watch sees an update made
#                            through kplane; its list at a resourceVersion
#                            compacted away answers 410 Expired.
#
#   scripts/components.sh                         every row, COMPONENTS.md
#   COMPONENTS="kube-scheduler helm" scripts/components.sh
#   scripts/components.sh --build-only            only build what is missing
#   scripts/components.sh --out FILE              the page to write (- for none)
#   KPLANE=/path/to/kplane    a kplane binary built elsewhere
#
# kube-scheduler, kube-controller-manager and kube-apiserver (each only
# when its row runs) are built by scripts/lib/k8s-build.sh, KWOK with `go install`, both from the Go module
# proxy into ${XDG_CACHE_HOME:-$HOME/.cache}/kplane-bench; helm is the one
# on PATH (scripts/install-deps.sh installs it). Every `kplane up` takes
# free loopback ports and its own data directory; each component's log,
# and kplane's, stay in the results directory printed at the end (under
# the cache), whatever the outcome. Not run by CI: it needs the Kubernetes
# build.
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSION=${K8S_VERSION:-v1.33.13}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
COMPONENTS=${COMPONENTS:-"kube-scheduler kwok kube-controller-manager helm kube-apiserver"}
REPLICAS=${REPLICAS:-6}
NODES=${NODES:-3}
WAIT=${WAIT:-180s}
OUT=COMPONENTS.md
CHART=scripts/testdata/components-chart
build_only=0
while (($#)); do
	case $1 in
	--build-only) build_only=1 ;;
	--out) OUT=$2; shift ;;
	*) echo "unknown argument $1 (see the top of $0)" >&2; exit 2 ;;
	esac
	shift
done

# shellcheck source=scripts/lib/k8s-build.sh
source scripts/lib/k8s-build.sh
cache=$(k8s_cache_dir)
k8s_bins=()
for c in $COMPONENTS; do
	case $c in kube-scheduler | kube-controller-manager | kube-apiserver) k8s_bins+=("$c") ;; esac
done
K8S_BIN=$cache/kubernetes-$K8S_VERSION/bin
((${#k8s_bins[@]} == 0)) || K8S_BIN=$(k8s_build "$K8S_VERSION" "${k8s_bins[@]}" | tail -n 1)
KWOK=$cache/kwok-$KWOK_VERSION/bin/kwok
if [[ ! -x $KWOK ]]; then
	echo "== building KWOK $KWOK_VERSION"
	mkdir -p "${KWOK%/kwok}"
	GOBIN=${KWOK%/kwok} go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
fi
((build_only)) && exit 0
command -v helm >/dev/null || { echo "helm not found: scripts/install-deps.sh installs it" >&2; exit 1; }
KUBECTL=${KUBECTL:-$(command -v kubectl.1.33 || command -v kubectl)}

results=$cache/components-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$results"
if [[ -n "${KPLANE:-}" ]]; then cp "$KPLANE" "$results/kplane"; else go build -o "$results/kplane" ./cmd/kplane; fi

data="" up_pid="" pids=()
# stop_all stops the component and kplane up of one row; the store data
# goes, the logs stay.
stop_all() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
	if [[ -n $data && -f $data/up.json ]]; then
		"$results/kplane" down --data-dir "$data" --grace-period 10s >/dev/null 2>&1 || true
	fi
	if [[ -n $up_pid ]]; then
		kill "$up_pid" 2>/dev/null || true
		wait "$up_pid" 2>/dev/null || true
	fi
	[[ -z $data ]] || rm -rf "$data"/store* "$data/nodeagent"
	up_pid=""
}
trap 'stop_all; rm -f "$results/kplane"' EXIT
trap 'exit 130' INT TERM

port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		ss -ltn "sport = :$p" | grep -q LISTEN || { echo "$p"; return; }
	done
}

# up DIR [FLAGS...]: kplane up on free loopback ports; sets data and K.
up() {
	data=$1
	shift
	"$results/kplane" up --data-dir "$data" --base-port 0 "$@" >"$data.up.log" 2>&1 &
	up_pid=$!
	local until=$((SECONDS + 600))
	until [[ -f $data/kubeconfig ]]; do
		if ! kill -0 "$up_pid" 2>/dev/null || ((SECONDS > until)); then
			echo "kplane up did not get healthy; $data.up.log:" >&2
			tail -n 20 "$data.up.log" >&2
			return 1
		fi
		sleep 1
	done
	K=("$KUBECTL" --kubeconfig "$data/kubeconfig")
}

# check WHAT COMMAND...: runs a check, noting it in the row's log.
check() {
	local what=$1
	shift
	if "$@" >>"$log" 2>&1; then
		echo "ok    $what" >>"$log"
	else
		echo "FAIL  $what" >>"$log"
		failed+=("$what")
	fi
}

# all_running NS SELECTOR N: N pods, every one bound and Running.
all_running() {
	local ns=$1 sel=$2 n=$3 i out
	for ((i = 0; i < 90; i++)); do
		out=$("${K[@]}" -n "$ns" get pods -l "$sel" -o jsonpath='{range .items[*]}{.spec.nodeName}/{.status.phase}{"\n"}{end}')
		if [[ $(grep -c . <<<"$out") -eq $n ]] && ! grep -qv '^[^/]\+/Running$' <<<"$out"; then
			echo "$out"
			return 0
		fi
		sleep 2
	done
	echo "$out"
	return 1
}

# eventually DESCRIPTION COMMAND...: retries for up to 3 minutes.
eventually() {
	local i
	for ((i = 0; i < 90; i++)); do
		"$@" && return 0
		sleep 2
	done
	return 1
}

# lease_held_by_other LEASE PREFIX: kube-system/LEASE is held by someone
# other than kplane's own replicas (named PREFIX<i>).
lease_held_by_other() {
	local h
	h=$("${K[@]}" -n kube-system get lease "$1" -o jsonpath='{.spec.holderIdentity}') || return 1
	echo "holder: $h"
	[[ -n $h && $h != "$2"* ]]
}

# scheduled_events N: N Scheduled events reported by default-scheduler.
scheduled_events() {
	local n
	n=$("${K[@]}" get events --field-selector reason=Scheduled \
		-o jsonpath='{range .items[*]}{.source.component}{.reportingComponent}{"\n"}{end}' | grep -c default-scheduler)
	echo "$n Scheduled events from default-scheduler"
	((n == $1))
}

# nodes_ready SELECTOR N: N nodes matching SELECTOR, all Ready.
nodes_ready() {
	local n
	n=$("${K[@]}" get nodes -l "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -cx True)
	echo "$n Ready"
	((n == $2))
}

# none_left NS KINDS SELECTOR: nothing of KINDS matches in NS.
none_left() {
	local out
	out=$("${K[@]}" -n "$1" get "$2" -l "$3" -o name) || return 1
	echo "$out"
	[[ -z $out ]]
}

# jsonpath_is OBJECT PATH WANT
jsonpath_is() {
	local got
	got=$("${K[@]}" get "$1" -o jsonpath="$2") || return 1
	echo "$1 $2: $got"
	[[ $got == "$3" ]]
}

# release_deployed HELM...: release demo is at revision 2, deployed.
release_deployed() {
	local st
	st=$("$@" status demo) || return 1
	echo "$st"
	grep -q 'STATUS: deployed' <<<"$st" && grep -q 'REVISION: 2' <<<"$st"
}

# identity_kubeconfig NAME: a kubeconfig for the identity kplane up issued
# as pki/NAME.crt (kplane's scheduler's is system:kube-scheduler), so
# Kubernetes' component runs under the RBAC role its own user has.
identity_kubeconfig() {
	local kc=$data.$1.kubeconfig user
	cp "$data/kubeconfig" "$kc"
	user=$("$KUBECTL" --kubeconfig "$kc" config view -o jsonpath='{.contexts[0].context.user}')
	"$KUBECTL" --kubeconfig "$kc" config set-credentials "$user" --embed-certs \
		--client-certificate "$data/pki/$1.crt" --client-key "$data/pki/$1.key" >/dev/null
	echo "$kc"
}

run_kube_scheduler() {
	up "$1" --schedulers 0 --nodes "$NODES"
	local kc
	kc=$(identity_kubeconfig scheduler)
	"$K8S_BIN/kube-scheduler" --kubeconfig "$kc" --authentication-kubeconfig "$kc" \
		--authorization-kubeconfig "$kc" --bind-address 127.0.0.1 --secure-port "$(port)" -v 2 >"$comp_log" 2>&1 &
	pids+=($!)
	check "its Lease kube-system/kube-scheduler held" eventually lease_held_by_other kube-scheduler scheduler-
	check "Deployment of $REPLICAS created" "${K[@]}" create deployment web --image nginx --replicas "$REPLICAS"
	check "$REPLICAS pods bound and Running" all_running default app=web "$REPLICAS"
	check "$REPLICAS Scheduled events from default-scheduler" scheduled_events "$REPLICAS"
}

run_kwok() {
	up "$1" --nodes 0
	local stages
	stages=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage
	[[ -d $stages ]] || GOFLAGS=-mod=mod go mod download "sigs.k8s.io/kwok@$KWOK_VERSION"
	local f
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
		cat "$stages/$f"
		echo "---"
	done >"$data.kwok-stages.yaml"
	"$KWOK" --kubeconfig "$data/kubeconfig" --manage-all-nodes=false \
		--manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake --node-lease-duration-seconds 40 \
		--server-address "127.0.0.1:$(port)" --node-ip 127.0.0.1 --config "$data.kwok-stages.yaml" >"$comp_log" 2>&1 &
	pids+=($!)
	local i
	for ((i = 1; i <= NODES; i++)); do
		check "node kwok-$i created" "${K[@]}" apply -f - <<-YAML
			apiVersion: v1
			kind: Node
			metadata:
			  name: kwok-$i
			  annotations: {kwok.x-k8s.io/node: fake}
			  labels: {type: kwok, kubernetes.io/hostname: kwok-$i}
			status:
			  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
			  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
		YAML
	done
	check "$NODES nodes Ready (KWOK's stages)" eventually nodes_ready type=kwok "$NODES"
	check "node Lease renewed by KWOK" eventually "${K[@]}" -n kube-node-lease get lease kwok-1
	check "Deployment of $REPLICAS created" "${K[@]}" create deployment web --image nginx --replicas "$REPLICAS"
	check "$REPLICAS pods Running on KWOK's nodes" all_running default app=web "$REPLICAS"
}

run_kube_controller_manager() {
	up "$1" --controller-managers 0 --nodes "$NODES"
	"$K8S_BIN/kube-controller-manager" --kubeconfig "$data/kubeconfig" --authentication-kubeconfig "$data/kubeconfig" \
		--authorization-kubeconfig "$data/kubeconfig" --bind-address 127.0.0.1 --secure-port "$(port)" \
		--service-account-private-key-file "$data/sa.key" --root-ca-file "$data/pki/ca.crt" \
		--use-service-account-credentials=false -v 2 >"$comp_log" 2>&1 &
	pids+=($!)
	check "its Lease kube-system/kube-controller-manager held" eventually lease_held_by_other kube-controller-manager controllers-
	check "namespace demo created" "${K[@]}" create namespace demo
	check "its default ServiceAccount created" eventually "${K[@]}" -n demo get serviceaccount default
	check "Deployment of $REPLICAS created" "${K[@]}" -n demo create deployment web --image nginx --replicas "$REPLICAS"
	check "its ReplicaSet and $REPLICAS pods Running" all_running demo app=web "$REPLICAS"
	check "Deployment available" "${K[@]}" -n demo rollout status deployment/web --timeout "$WAIT"
	check "Job created" "${K[@]}" -n demo create job once --image busybox -- sh -c 'echo done'
	check "Job complete" "${K[@]}" -n demo wait --for condition=Complete job/once --timeout "$WAIT"
	check "Deployment deleted in the background" "${K[@]}" -n demo delete deployment web --cascade=background
	check "garbage collector deletes its ReplicaSet and pods" eventually none_left demo replicasets,pods app=web
	check "namespace deleted with what it held" "${K[@]}" delete namespace demo --timeout "$WAIT"
}

run_helm() {
	up "$1" --nodes "$NODES"
	local h=(helm --kubeconfig "$data/kubeconfig")
	{
		echo "== helm install"
		"${h[@]}" install demo "$CHART" --wait --timeout "$WAIT" 2>&1 || echo "helm install: exit $?"
		echo "== helm upgrade --install --atomic"
		"${h[@]}" upgrade --install demo "$CHART" --atomic --wait --timeout "$WAIT" --set replicas=3,message=upgraded 2>&1 ||
			echo "helm upgrade: exit $?"
		"${h[@]}" history demo 2>&1
	} >"$comp_log"
	check "release deployed at revision 2" release_deployed "${h[@]}"
	check "ServiceAccount, Role, RoleBinding, Service, ConfigMap" "${K[@]}" get serviceaccount/demo-app role/demo-reader rolebinding/demo-reader service/demo-web configmap/demo-config
	check "ConfigMap upgraded" jsonpath_is configmap/demo-config '{.data.message}' upgraded
	check "CRD installed and its Widget created" "${K[@]}" get widgets.demo.kplane.io demo-widget
	check "Deployment scaled to 3, all Running" all_running default app=demo-web 3
	check "hook Job of revision 2 complete" "${K[@]}" wait --for condition=Complete job/demo-migrate-2 --timeout "$WAIT"
}

# same_on NAME JSONPATH: the object NAME reads the same through kplane
# (K) and through kube-apiserver (KA), uid and resourceVersion included.
same_on() {
	local a b
	a=$("${K[@]}" get "$1" -o jsonpath="$2") || return 1
	b=$("${KA[@]}" get "$1" -o jsonpath="$2") || return 1
	echo "kplane:         $a"
	echo "kube-apiserver: $b"
	[[ -n $a && $a == "$b" ]]
}

# same_json NAME JQ: JQ (a filter of the object's JSON) gives the same
# through kplane (K) and through kube-apiserver (KA), nulls aside:
# kube-apiserver v1.33 writes an embedded ObjectMeta's zero creationTimestamp
# as null (a template's "creationTimestamp": null), kplane leaves it out;
# Kubernetes' decoders read both as unset.
same_json() {
	local a b f="$2 | del(.. | nulls)"
	a=$("${K[@]}" get "$1" -o json | jq -cS "$f") || return 1
	b=$("${KA[@]}" get "$1" -o json | jq -cS "$f") || return 1
	echo "kplane:         $a"
	echo "kube-apiserver: $b"
	[[ -n $a && $a == "$b" ]]
}

# grep_file PATTERN FILE: FILE has a line matching PATTERN.
grep_file() {
	grep -q "$1" "$2" || { echo "not yet in $2:"; cat "$2"; return 1; }
}

# list_expired RV: kube-apiserver answers a list of ConfigMaps at RV
# (exact) with 410 Expired.
list_expired() {
	local out
	out=$("${KA[@]}" get --raw "/api/v1/namespaces/default/configmaps?resourceVersion=$1&resourceVersionMatch=Exact" 2>&1) && {
		echo "listed at $1: ${out:0:200}"
		return 1
	}
	echo "$out"
	grep -q "Expired\|410\|too old" <<<"$out"
}

run_kube_apiserver() {
	up "$1" --nodes 1
	local ka=$data.kube-apiserver ap urls
	mkdir -p "$ka"
	ap=$(port)
	k8s_admin_files "$ka" "$ap"
	urls=$(jq -r '[.processes[] | select(.component == "store") | .clientURL] | join(",")' "$data/up.json")
	"$K8S_BIN/kube-apiserver" --etcd-servers "$urls" --etcd-cafile "$(jq -r .storeCAFile "$data/up.json")" \
		--etcd-certfile "$(jq -r .storeCertFile "$data/up.json")" --etcd-keyfile "$(jq -r .storeKeyFile "$data/up.json")" \
		--etcd-compaction-interval 10s --endpoint-reconciler-type none \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$ap" --cert-dir "$ka/certs" \
		--token-auth-file "$ka/tokens.csv" --authorization-mode RBAC \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$ka/sa.pub" \
		--service-account-signing-key-file "$ka/sa.key" --service-cluster-ip-range 10.96.0.0/12 -v 2 >"$comp_log" 2>&1 &
	pids+=($!)
	KA=("$KUBECTL" --kubeconfig "$ka/kubeconfig")
	check "kube-apiserver /readyz ok" eventually "${KA[@]}" get --raw /readyz
	check "ConfigMap created through kplane" "${K[@]}" create configmap from-kplane --from-literal k=v --from-literal n=1
	check "... read through kube-apiserver, the same" same_on configmap/from-kplane '{.metadata.uid} {.metadata.resourceVersion} {.data}'
	check "Deployment created through kplane" "${K[@]}" create deployment web --image nginx:1.27 --replicas 2
	check "... read through kube-apiserver, the same" same_json deployment/web '{uid: .metadata.uid, rv: .metadata.resourceVersion, labels: .metadata.labels, spec: .spec}'
	check "ConfigMap created through kube-apiserver" "${KA[@]}" create configmap from-kube --from-literal k=v2
	check "... read through kplane, the same" same_on configmap/from-kube '{.metadata.uid} {.metadata.resourceVersion} {.data}'
	local rv watch_out=$data.watch.out
	rv=$("${K[@]}" get configmap from-kplane -o jsonpath='{.metadata.resourceVersion}')
	"${KA[@]}" get configmap from-kplane -w --request-timeout 120s -o jsonpath='{.data.n}{"\n"}' >"$watch_out" 2>&1 &
	pids+=($!)
	check "kube-apiserver's watch started" eventually grep_file '^1$' "$watch_out"
	check "ConfigMap updated through kplane" "${K[@]}" patch configmap from-kplane -p '{"data":{"n":"2"}}'
	check "... the update seen by kube-apiserver's watch" eventually grep_file '^2$' "$watch_out"
	local i
	for ((i = 3; i < 8; i++)); do "${K[@]}" patch configmap from-kplane -p "{\"data\":{\"n\":\"$i\"}}" >/dev/null; done
	check "a list at resourceVersion $rv once compacted: 410 Expired" eventually list_expired "$rv"
}

rows=()
for c in $COMPONENTS; do
	dir=$results/$c
	log=$results/$c.checks.log
	comp_log=$results/$c.log
	failed=()
	: >"$log"
	echo "== $c"
	start=$SECONDS
	case $c in
	kube-scheduler) run_kube_scheduler "$dir" || failed+=("kplane up") ;;
	kwok) run_kwok "$dir" || failed+=("kplane up") ;;
	kube-controller-manager) run_kube_controller_manager "$dir" || failed+=("kplane up") ;;
	helm) run_helm "$dir" || failed+=("kplane up") ;;
	kube-apiserver) run_kube_apiserver "$dir" || failed+=("kplane up") ;;
	*) echo "unknown component $c" >&2; exit 2 ;;
	esac
	stop_all
	data=""
	result=pass
	((${#failed[@]} == 0)) || result="FAIL: $(IFS=';'; echo "${failed[*]}")"
	grep -E "^(ok |FAIL) " "$log" || true
	printf '%-24s %-6s %4ss  log %s (checks %s)\n' "$c" "${result%%:*}" "$((SECONDS - start))" "$comp_log" "$log"
	# What the component asked for and kplane does not serve (its
	# informers for those kinds never sync, so what needs them idles).
	missing=$(grep -o 'failed to list \*[^:]*: the server could not find the requested resource' "$comp_log" |
		sed 's/failed to list \*\([^:]*\):.*/\1/' | sort -u | paste -sd, - | sed 's/,/, /g' || true)
	rows+=("| $c | ${result} | $((SECONDS - start)) s | ${missing:-none} | \`$comp_log\` |")
done

echo
echo "== results in $results"
[[ $OUT == - ]] && exit 0
version="Helm $(helm version --short 2>/dev/null)"
{
	echo "# Kubernetes' components against kplane"
	echo
	echo "Kubernetes' own components run unchanged against \`kplane up\` (issue 21), each with the kplane component it replaces turned off. Written by \`scripts/components.sh\`; do not edit by hand, run it again. What each row checks is at the top of the script; the checks' log lists every one."
	echo
	echo "Run $(date -u '+%Y-%m-%d %H:%M UTC'), kplane $(git rev-parse --short HEAD), $(nproc) cores; kube-scheduler, kube-controller-manager and kube-apiserver $K8S_VERSION, KWOK $KWOK_VERSION, $version; $NODES nodes, $REPLICAS replicas."
	echo
	echo "| component | result | time (with kplane up) | kinds it lists that kplane does not serve | log (on the machine that ran it) |"
	echo "|---|---|---:|---|---|"
	printf '%s\n' "${rows[@]}"
	echo
	echo "What differs from Kubernetes, as the components' logs show it:"
	echo
	echo "- \`events.k8s.io/v1\` is served, so kube-scheduler and kube-controller-manager, which look it up in discovery, record their Events through it, as on Kubernetes."
	echo "- kplane does not publish \`kube-system/extension-apiserver-authentication\` (kube-apiserver writes its client CA there for delegated authentication; kplane has Kubernetes' Role that lets the scheduler and the controller manager read it), so a component given \`--authentication-kubeconfig\` logs that it is missing and its own HTTPS port (metrics, health) trusts no client certificate."
	echo "- kube-controller-manager runs as admin: Kubernetes runs each of its controllers under a ServiceAccount of its own (\`--use-service-account-credentials\`, roles \`system:controller:*\`), which kplane does not bootstrap; kplane's \`system:kube-controller-manager\` role covers kplane's own controllers."
	echo "- kube-apiserver runs on kplane's store, beside kplane's API services, because kplane stores objects in kube-apiserver's format and under its keys (the \`k8s\\x00\` protobuf envelope; CustomResourceDefinitions as JSON): each reads what the other wrote. It runs with \`--endpoint-reconciler-type=none\`, leaving \`default/kubernetes\` to kplane; Service cluster IPs and node ports are allocated by each in its own way, so only one of them should create Services."
	echo "- A kind in the column above is one the component's informers list and kplane does not serve: the controllers that need it (kube-controller-manager's ServiceCIDR/IPAddress controllers: kplane allocates cluster IPs from its --service-cluster-ip-range, without MultiCIDRServiceAllocator's objects) wait and do nothing, the others run."
	echo "- kube-apiserver v1.33 writes an embedded ObjectMeta's zero creationTimestamp as null (a pod template's \"creationTimestamp\": null); kplane leaves it out. Both decode to the same object; the kube-apiserver row compares objects with nulls removed."
} >"$OUT"
echo "wrote $OUT"
