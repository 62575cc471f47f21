// Command gen writes the repetitive parts of kplane's API from one table of
// resources: the gRPC service definitions with their Kubernetes REST paths
// (proto/kplane/<group>/v1/service.proto) and the thin Go adaptors that route
// every RPC to the API service's one generic registry
// (services/apiserver/zz_generated_services.go). scripts/gen.sh runs it from
// the repository root before buf generate.
package main

import (
	"bytes"
	"flag"
	"log"
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// group is one API group and version.
type group struct {
	Dir      string // proto directory under proto/kplane: core, apps, ...
	Name     string // API group: "" for core, "apps", "rbac.authorization.k8s.io"
	GoAlias  string // corev1
	Resource []resource
	// Version is the API version, "v1" when empty (autoscaling/v2's
	// HorizontalPodAutoscaler is in its own package, proto/kplane/autoscaling/v2).
	Version string
}

// V is the group's API version.
func (g group) V() string {
	if g.Version == "" {
		return "v1"
	}
	return g.Version
}

// resource is one kind of object the API serves.
type resource struct {
	Kind       string // Pod
	Plural     string // Pods (for RPC names)
	Resource   string // pods (URL and storage)
	Namespaced bool
	Status     bool // has a status subresource
	Scale      bool // has a scale subresource
	Binding    bool // has the binding subresource
	Finalize   bool // has the finalize subresource (namespaces)
	// AllowUnconditionalUpdate: an update without resourceVersion is
	// accepted (as in Kubernetes' strategies).
	AllowUnconditionalUpdate bool
	// Graceful: deletion is graceful (pods).
	Graceful bool
	// Log has the log subresource (pods): a server-streaming RPC of raw
	// text chunks (google.api.HttpBody).
	Log bool
	// Stream has the exec, attach and portforward subresources (pods): a
	// bidirectional RPC carrying an HTTP upgrade to the node agent.
	Stream bool
	// Eviction has the eviction subresource (pods): a POST of a policy/v1
	// Eviction, answered with a Status.
	Eviction bool
	// Approval has the approval subresource (CertificateSigningRequests):
	// a PUT of the object whose status.conditions are written.
	Approval bool
	// EphemeralContainers has the ephemeralcontainers subresource (pods):
	// a PUT of the pod whose spec.ephemeralContainers are written.
	EphemeralContainers bool
	// View: the resource is another group's stored resource seen in this
	// group's version (events.k8s.io/v1 Event is core/v1 Event,
	// autoscaling/v1 HorizontalPodAutoscaler is autoscaling/v2's): it has no
	// table entry of its own and no generated adaptor; the API service's
	// hand-written <goalias><Kind>View converts at the edge.
	View bool
}

func groups() []group {
	return []group{
		{Dir: "core", Name: "", GoAlias: "corev1", Resource: []resource{
			{Kind: "Namespace", Plural: "Namespaces", Resource: "namespaces", Status: true, Finalize: true},
			{Kind: "Pod", Plural: "Pods", Resource: "pods", Namespaced: true, Status: true, Binding: true, Graceful: true, Log: true, Stream: true, Eviction: true, EphemeralContainers: true},
			{Kind: "Node", Plural: "Nodes", Resource: "nodes", Status: true, AllowUnconditionalUpdate: true},
			{Kind: "Event", Plural: "Events", Resource: "events", Namespaced: true, AllowUnconditionalUpdate: true},
			{Kind: "Service", Plural: "Services", Resource: "services", Namespaced: true, Status: true, AllowUnconditionalUpdate: true},
			{Kind: "Endpoints", Plural: "Endpoints", Resource: "endpoints", Namespaced: true, AllowUnconditionalUpdate: true},
			{Kind: "ConfigMap", Plural: "ConfigMaps", Resource: "configmaps", Namespaced: true, AllowUnconditionalUpdate: true},
			{Kind: "Secret", Plural: "Secrets", Resource: "secrets", Namespaced: true, AllowUnconditionalUpdate: true},
			{Kind: "ServiceAccount", Plural: "ServiceAccounts", Resource: "serviceaccounts", Namespaced: true, AllowUnconditionalUpdate: true},
			{Kind: "ReplicationController", Plural: "ReplicationControllers", Resource: "replicationcontrollers", Namespaced: true, Status: true, Scale: true, AllowUnconditionalUpdate: true},
			{Kind: "PodTemplate", Plural: "PodTemplates", Resource: "podtemplates", Namespaced: true, AllowUnconditionalUpdate: true},
			{Kind: "ResourceQuota", Plural: "ResourceQuotas", Resource: "resourcequotas", Namespaced: true, Status: true, AllowUnconditionalUpdate: true},
			{Kind: "LimitRange", Plural: "LimitRanges", Resource: "limitranges", Namespaced: true, AllowUnconditionalUpdate: true},
			{Kind: "PersistentVolumeClaim", Plural: "PersistentVolumeClaims", Resource: "persistentvolumeclaims", Namespaced: true, Status: true, AllowUnconditionalUpdate: true},
			{Kind: "PersistentVolume", Plural: "PersistentVolumes", Resource: "persistentvolumes", Status: true, AllowUnconditionalUpdate: true},
		}},
		{Dir: "apps", Name: "apps", GoAlias: "appsv1", Resource: []resource{
			{Kind: "Deployment", Plural: "Deployments", Resource: "deployments", Namespaced: true, Status: true, Scale: true, AllowUnconditionalUpdate: true},
			{Kind: "ReplicaSet", Plural: "ReplicaSets", Resource: "replicasets", Namespaced: true, Status: true, Scale: true, AllowUnconditionalUpdate: true},
			{Kind: "DaemonSet", Plural: "DaemonSets", Resource: "daemonsets", Namespaced: true, Status: true, AllowUnconditionalUpdate: true},
			{Kind: "ControllerRevision", Plural: "ControllerRevisions", Resource: "controllerrevisions", Namespaced: true, AllowUnconditionalUpdate: true},
			{Kind: "StatefulSet", Plural: "StatefulSets", Resource: "statefulsets", Namespaced: true, Status: true, Scale: true, AllowUnconditionalUpdate: true},
		}},
		{Dir: "batch", Name: "batch", GoAlias: "batchv1", Resource: []resource{
			{Kind: "Job", Plural: "Jobs", Resource: "jobs", Namespaced: true, Status: true, AllowUnconditionalUpdate: true},
			{Kind: "CronJob", Plural: "CronJobs", Resource: "cronjobs", Namespaced: true, Status: true, AllowUnconditionalUpdate: true},
		}},
		{Dir: "discovery", Name: "discovery.k8s.io", GoAlias: "discoveryv1", Resource: []resource{
			{Kind: "EndpointSlice", Plural: "EndpointSlices", Resource: "endpointslices", Namespaced: true, AllowUnconditionalUpdate: true},
		}},
		{Dir: "certificates", Name: "certificates.k8s.io", GoAlias: "certificatesv1", Resource: []resource{
			{Kind: "CertificateSigningRequest", Plural: "CertificateSigningRequests", Resource: "certificatesigningrequests", Status: true, Approval: true, AllowUnconditionalUpdate: true},
		}},
		{Dir: "events", Name: "events.k8s.io", GoAlias: "eventsv1", Resource: []resource{
			{Kind: "Event", Plural: "Events", Resource: "events", Namespaced: true, AllowUnconditionalUpdate: true, View: true},
		}},
		{Dir: "networking", Name: "networking.k8s.io", GoAlias: "networkingv1", Resource: []resource{
			{Kind: "Ingress", Plural: "Ingresses", Resource: "ingresses", Namespaced: true, Status: true, AllowUnconditionalUpdate: true},
			{Kind: "IngressClass", Plural: "IngressClasses", Resource: "ingressclasses", AllowUnconditionalUpdate: true},
			{Kind: "NetworkPolicy", Plural: "NetworkPolicies", Resource: "networkpolicies", Namespaced: true, AllowUnconditionalUpdate: true},
		}},
		{Dir: "node", Name: "node.k8s.io", GoAlias: "nodev1", Resource: []resource{
			{Kind: "RuntimeClass", Plural: "RuntimeClasses", Resource: "runtimeclasses"},
		}},
		{Dir: "storage", Name: "storage.k8s.io", GoAlias: "storagev1", Resource: []resource{
			{Kind: "CSIDriver", Plural: "CSIDrivers", Resource: "csidrivers"},
			{Kind: "CSINode", Plural: "CSINodes", Resource: "csinodes"},
			{Kind: "StorageClass", Plural: "StorageClasses", Resource: "storageclasses", AllowUnconditionalUpdate: true},
			{Kind: "VolumeAttachment", Plural: "VolumeAttachments", Resource: "volumeattachments", Status: true},
			{Kind: "CSIStorageCapacity", Plural: "CSIStorageCapacities", Resource: "csistoragecapacities", Namespaced: true},
		}},
		{Dir: "scheduling", Name: "scheduling.k8s.io", GoAlias: "schedulingv1", Resource: []resource{
			{Kind: "PriorityClass", Plural: "PriorityClasses", Resource: "priorityclasses", AllowUnconditionalUpdate: true},
		}},
		{Dir: "coordination", Name: "coordination.k8s.io", GoAlias: "coordinationv1", Resource: []resource{
			{Kind: "Lease", Plural: "Leases", Resource: "leases", Namespaced: true, AllowUnconditionalUpdate: true},
		}},
		{Dir: "policy", Name: "policy", GoAlias: "policyv1", Resource: []resource{
			{Kind: "PodDisruptionBudget", Plural: "PodDisruptionBudgets", Resource: "poddisruptionbudgets", Namespaced: true, Status: true, AllowUnconditionalUpdate: true},
		}},
		{Dir: "rbac", Name: "rbac.authorization.k8s.io", GoAlias: "rbacv1", Resource: []resource{
			{Kind: "Role", Plural: "Roles", Resource: "roles", Namespaced: true, AllowUnconditionalUpdate: true},
			{Kind: "ClusterRole", Plural: "ClusterRoles", Resource: "clusterroles", AllowUnconditionalUpdate: true},
			{Kind: "RoleBinding", Plural: "RoleBindings", Resource: "rolebindings", Namespaced: true, AllowUnconditionalUpdate: true},
			{Kind: "ClusterRoleBinding", Plural: "ClusterRoleBindings", Resource: "clusterrolebindings", AllowUnconditionalUpdate: true},
		}},
		{Dir: "admissionregistration", Name: "admissionregistration.k8s.io", GoAlias: "admissionregistrationv1", Resource: []resource{
			{Kind: "MutatingWebhookConfiguration", Plural: "MutatingWebhookConfigurations", Resource: "mutatingwebhookconfigurations", AllowUnconditionalUpdate: true},
			{Kind: "ValidatingWebhookConfiguration", Plural: "ValidatingWebhookConfigurations", Resource: "validatingwebhookconfigurations", AllowUnconditionalUpdate: true},
			{Kind: "ValidatingAdmissionPolicy", Plural: "ValidatingAdmissionPolicies", Resource: "validatingadmissionpolicies", Status: true},
			{Kind: "ValidatingAdmissionPolicyBinding", Plural: "ValidatingAdmissionPolicyBindings", Resource: "validatingadmissionpolicybindings"},
		}},
		{Dir: "flowcontrol", Name: "flowcontrol.apiserver.k8s.io", GoAlias: "flowcontrolv1", Resource: []resource{
			{Kind: "FlowSchema", Plural: "FlowSchemas", Resource: "flowschemas", Status: true, AllowUnconditionalUpdate: true},
			{Kind: "PriorityLevelConfiguration", Plural: "PriorityLevelConfigurations", Resource: "prioritylevelconfigurations", Status: true, AllowUnconditionalUpdate: true},
		}},
		{Dir: "autoscaling", Name: "autoscaling", GoAlias: "autoscalingv1", Resource: []resource{
			{Kind: "HorizontalPodAutoscaler", Plural: "HorizontalPodAutoscalers", Resource: "horizontalpodautoscalers", Namespaced: true, Status: true, AllowUnconditionalUpdate: true, View: true},
		}},
		{Dir: "autoscaling", Name: "autoscaling", Version: "v2", GoAlias: "autoscalingv2", Resource: []resource{
			{Kind: "HorizontalPodAutoscaler", Plural: "HorizontalPodAutoscalers", Resource: "horizontalpodautoscalers", Namespaced: true, Status: true, AllowUnconditionalUpdate: true},
		}},
		{Dir: "apiextensions", Name: "apiextensions.k8s.io", GoAlias: "apiextensionsv1", Resource: []resource{
			{Kind: "CustomResourceDefinition", Plural: "CustomResourceDefinitions", Resource: "customresourcedefinitions", Status: true},
		}},
	}
}

// snake turns a Kind into a proto field name: ConfigMap → config_map.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// goField turns a Kind into the Go field protoc-gen-go generates for it.
func goField(s string) string { return s }

// prefix is the REST prefix of a group: /api/v1 or /apis/<group>/v1.
func prefix(g group) string {
	if g.Name == "" {
		return "/api/" + g.V()
	}
	return "/apis/" + g.Name + "/" + g.V()
}

func (g group) APIVersion() string {
	if g.Name == "" {
		return g.V()
	}
	return g.Name + "/" + g.V()
}

func (g group) Prefix() string   { return prefix(g) }
func (g group) ProtoPkg() string { return "kplane." + g.Dir + "." + g.V() }
func (g group) GoImport() string {
	return "github.com/kplane/kplane/proto/kplane/" + g.Dir + "/" + g.V()
}
func (r resource) Field() string   { return snake(r.Kind) }
func (r resource) GoField() string { return goField(r.Kind) }

// Collection is the REST path of the collection (namespaced form).
func (r resource) Collection(g group) string {
	if r.Namespaced {
		return prefix(g) + "/namespaces/{namespace}/" + r.Resource
	}
	return prefix(g) + "/" + r.Resource
}

// Item is the REST path of one object.
func (r resource) Item(g group) string { return r.Collection(g) + "/{name}" }

// AllCollection is the cross-namespace collection path.
func (r resource) AllCollection(g group) string { return prefix(g) + "/" + r.Resource }

// WatchCollection is the legacy watch path.
func (r resource) WatchCollection(g group) string {
	if r.Namespaced {
		return prefix(g) + "/watch/namespaces/{namespace}/" + r.Resource
	}
	return prefix(g) + "/watch/" + r.Resource
}

// AllWatch is the cross-namespace legacy watch path.
func (r resource) AllWatch(g group) string { return prefix(g) + "/watch/" + r.Resource }

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	for _, g := range groups() {
		needs, body, policy := false, false, false
		for _, r := range g.Resource {
			needs = needs || r.Scale
			body = body || r.Log
			policy = policy || r.Eviction
		}
		var buf bytes.Buffer
		if err := protoTmpl.Execute(&buf, map[string]any{"G": g, "NeedsAutoscaling": needs, "NeedsHTTPBody": body, "NeedsPolicy": policy}); err != nil {
			log.Fatal(err)
		}
		out := filepath.Join(*root, "proto", "kplane", g.Dir, g.V(), "service.proto")
		if err := os.WriteFile(out, tidy(buf.Bytes()), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if err := writeGo(*root); err != nil {
		log.Fatal(err)
	}
}

// tidy collapses runs of blank lines left by the templates.
func tidy(b []byte) []byte {
	for bytes.Contains(b, []byte("\n\n\n")) {
		b = bytes.ReplaceAll(b, []byte("\n\n\n"), []byte("\n\n"))
	}
	return b
}
