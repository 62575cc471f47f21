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
	"fmt"
	"go/format"
	"log"
	"os"
	"path/filepath"
	"strings"
	"text/template"
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
	// View: the resource is another group's stored resource seen in this
	// group's version (events.k8s.io/v1 Event is core/v1 Event): it has no
	// table entry of its own and no generated adaptor; the API service's
	// hand-written <goalias><Kind>View converts at the edge.
	View bool
}

func groups() []group {
	return []group{
		{Dir: "core", Name: "", GoAlias: "corev1", Resource: []resource{
			{Kind: "Namespace", Plural: "Namespaces", Resource: "namespaces", Status: true, Finalize: true},
			{Kind: "Pod", Plural: "Pods", Resource: "pods", Namespaced: true, Status: true, Binding: true, Graceful: true, Log: true, Stream: true, Eviction: true},
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

var protoTmpl = template.Must(template.New("proto").Funcs(template.FuncMap{}).Parse(`// Code generated by proto/internal/gen. DO NOT EDIT.

syntax = "proto3";

package {{.G.ProtoPkg}};

import "google/api/annotations.proto";
{{- if .NeedsHTTPBody}}
import "google/api/httpbody.proto";
{{- end}}
{{- if .NeedsAutoscaling}}
import "kplane/autoscaling/v1/types.proto";
{{- end}}
{{- if .NeedsPolicy}}
import "kplane/policy/v1/types.proto";
{{- end}}
import "kplane/{{.G.Dir}}/{{.G.V}}/types.proto";
import "kplane/meta/v1/meta.proto";

option go_package = "{{.G.GoImport}};{{.G.GoAlias}}";
{{$g := .G}}
{{- range .G.Resource}}{{$r := .}}
// {{.Kind}}Service serves {{.Resource}} ({{$g.APIVersion}}, {{if .Namespaced}}namespaced{{else}}cluster-scoped{{end}}).
service {{.Kind}}Service {
  // Get{{.Kind}} reads one {{.Kind}}.
  rpc Get{{.Kind}}(Get{{.Kind}}Request) returns (Get{{.Kind}}Response) {
    option (google.api.http) = {
      get: "{{.Item $g}}"
      response_body: "{{.Field}}"
    };
  }
  // List{{.Plural}} lists {{.Resource}}, filtered by selectors, paginated.
  rpc List{{.Plural}}(List{{.Plural}}Request) returns (List{{.Plural}}Response) {
    option (google.api.http) = {
      get: "{{.Collection $g}}"
      response_body: "list"
{{- if .Namespaced}}
      additional_bindings {
        get: "{{.AllCollection $g}}"
        response_body: "list"
      }
{{- end}}
    };
  }
  // Watch{{.Plural}} streams changes to {{.Resource}}.
  rpc Watch{{.Plural}}(Watch{{.Plural}}Request) returns (stream Watch{{.Plural}}Response) {
    option (google.api.http) = {
      get: "{{.WatchCollection $g}}"
{{- if .Namespaced}}
      additional_bindings {get: "{{.AllWatch $g}}"}
{{- end}}
    };
  }
  // Create{{.Kind}} creates a {{.Kind}}; AlreadyExists if the name is taken.
  rpc Create{{.Kind}}(Create{{.Kind}}Request) returns (Create{{.Kind}}Response) {
    option (google.api.http) = {
      post: "{{.Collection $g}}"
      body: "{{.Field}}"
      response_body: "{{.Field}}"
    };
  }
  // Update{{.Kind}} replaces a {{.Kind}}; Conflict on a stale resourceVersion.
  rpc Update{{.Kind}}(Update{{.Kind}}Request) returns (Update{{.Kind}}Response) {
    option (google.api.http) = {
      put: "{{.Item $g}}"
      body: "{{.Field}}"
      response_body: "{{.Field}}"
    };
  }
  // Delete{{.Kind}} deletes a {{.Kind}} (or marks it for deletion).
  rpc Delete{{.Kind}}(Delete{{.Kind}}Request) returns (Delete{{.Kind}}Response) {
    option (google.api.http) = {
      delete: "{{.Item $g}}"
      body: "*"
      response_body: "{{.Field}}"
    };
  }
{{- if .Status}}
  // Update{{.Kind}}Status replaces the status of a {{.Kind}} (the status subresource).
  rpc Update{{.Kind}}Status(Update{{.Kind}}StatusRequest) returns (Update{{.Kind}}StatusResponse) {
    option (google.api.http) = {
      put: "{{.Item $g}}/status"
      body: "{{.Field}}"
      response_body: "{{.Field}}"
    };
  }
{{- end}}
{{- if .Approval}}
  // Update{{.Kind}}Approval writes the approval conditions of a {{.Kind}}
  // (the approval subresource).
  rpc Update{{.Kind}}Approval(Update{{.Kind}}ApprovalRequest) returns (Update{{.Kind}}ApprovalResponse) {
    option (google.api.http) = {
      put: "{{.Item $g}}/approval"
      body: "{{.Field}}"
      response_body: "{{.Field}}"
    };
  }
{{- end}}
{{- if .Scale}}
  // Get{{.Kind}}Scale reads the scale subresource.
  rpc Get{{.Kind}}Scale(Get{{.Kind}}ScaleRequest) returns (Get{{.Kind}}ScaleResponse) {
    option (google.api.http) = {
      get: "{{.Item $g}}/scale"
      response_body: "scale"
    };
  }
  // Update{{.Kind}}Scale sets spec.replicas through the scale subresource.
  rpc Update{{.Kind}}Scale(Update{{.Kind}}ScaleRequest) returns (Update{{.Kind}}ScaleResponse) {
    option (google.api.http) = {
      put: "{{.Item $g}}/scale"
      body: "scale"
      response_body: "scale"
    };
  }
{{- end}}
{{- if .Binding}}
  // Bind{{.Kind}} binds a pod to a node: the only way to set spec.nodeName.
  rpc Bind{{.Kind}}(Bind{{.Kind}}Request) returns (Bind{{.Kind}}Response) {
    option (google.api.http) = {
      post: "{{.Item $g}}/binding"
      body: "binding"
      response_body: "status"
    };
  }
{{- end}}
{{- if .Eviction}}
  // Evict{{.Kind}} evicts a pod (the eviction subresource): deleted as the
  // Eviction's deleteOptions say, unless a PodDisruptionBudget forbids it.
  rpc Evict{{.Kind}}(Evict{{.Kind}}Request) returns (Evict{{.Kind}}Response) {
    option (google.api.http) = {
      post: "{{.Item $g}}/eviction"
      body: "eviction"
      response_body: "status"
    };
  }
{{- end}}
{{- if .Log}}
  // Get{{.Kind}}Log streams a container's log (the log subresource) as raw
  // text chunks, as Kubernetes' pods/log: proxied to the node agent that
  // runs the pod. google.api.HttpBody is what grpc-gateway streams as a
  // raw body, hence the non-standard response name.
  // buf:lint:ignore RPC_RESPONSE_STANDARD_NAME
  // buf:lint:ignore RPC_REQUEST_RESPONSE_UNIQUE
  rpc Get{{.Kind}}Log(Get{{.Kind}}LogRequest) returns (stream google.api.HttpBody) {
    option (google.api.http) = {
      get: "{{.Item $g}}/log"
    };
  }
{{- end}}
{{- if .Stream}}
  // Stream{{.Kind}} carries a pods/exec, pods/attach or pods/portforward
  // request (an HTTP upgrade: SPDY or WebSocket) to the node agent that
  // runs the pod. The first request message holds the request (start);
  // once it is authorized and the pod resolved, both directions are the
  // raw bytes of the connection, the agent's HTTP response included, until
  // either side closes. Errors before the agent is reached are the RPC's
  // status.
  rpc Stream{{.Kind}}(stream Stream{{.Kind}}Request) returns (stream Stream{{.Kind}}Response);
{{- end}}
{{- if .Finalize}}
  // Finalize{{.Kind}} replaces spec.finalizers (the finalize subresource);
  // the object goes once it is being deleted and no finalizer is left.
  rpc Finalize{{.Kind}}(Finalize{{.Kind}}Request) returns (Finalize{{.Kind}}Response) {
    option (google.api.http) = {
      put: "{{.Item $g}}/finalize"
      body: "{{.Field}}"
      response_body: "{{.Field}}"
    };
  }
{{- end}}
}

// Get{{.Kind}}Request names one {{.Kind}}.
message Get{{.Kind}}Request {
{{- if .Namespaced}}
  string namespace = 1;
{{- end}}
  string name = 2;
  // resource_version "" reads the latest (quorum); "0" allows any cached.
  string resource_version = 3;
}

// Get{{.Kind}}Response carries the {{.Kind}}.
message Get{{.Kind}}Response {
  {{.Kind}} {{.Field}} = 1;
}

// List{{.Plural}}Request holds Kubernetes' list options.
message List{{.Plural}}Request {
{{- if .Namespaced}}
  // namespace "" lists every namespace.
  string namespace = 1;
{{- end}}
  string label_selector = 2;
  string field_selector = 3;
  string resource_version = 4;
  string resource_version_match = 5;
  int64 limit = 6;
  string continue = 7;
  optional int64 timeout_seconds = 8;
}

// List{{.Plural}}Response carries the list.
message List{{.Plural}}Response {
  {{.Kind}}List list = 1;
}

// Watch{{.Plural}}Request holds Kubernetes' watch options.
message Watch{{.Plural}}Request {
{{- if .Namespaced}}
  // namespace "" watches every namespace.
  string namespace = 1;
{{- end}}
  string label_selector = 2;
  string field_selector = 3;
  // resource_version: "" or "0" sends ADDED for every existing object first;
  // otherwise the watch resumes after that revision (Gone below the window).
  string resource_version = 4;
  string resource_version_match = 5;
  optional int64 timeout_seconds = 6;
  bool allow_watch_bookmarks = 7;
  optional bool send_initial_events = 8;
}

// Watch{{.Plural}}Response is one watch event, as Kubernetes writes it:
// type ADDED, MODIFIED, DELETED, BOOKMARK or ERROR, and the object.
message Watch{{.Plural}}Response {
  string type = 1;
  {{.Kind}} object = 2;
  // status is set on ERROR events.
  kplane.meta.v1.Status status = 3;
}

// Create{{.Kind}}Request carries the new {{.Kind}}.
message Create{{.Kind}}Request {
{{- if .Namespaced}}
  string namespace = 1;
{{- end}}
  {{.Kind}} {{.Field}} = 2;
  // dry_run ["All"] runs the whole write path without writing.
  repeated string dry_run = 3;
  string field_manager = 4;
}

// Create{{.Kind}}Response carries the created {{.Kind}}.
message Create{{.Kind}}Response {
  {{.Kind}} {{.Field}} = 1;
}

// Update{{.Kind}}Request carries the replacement {{.Kind}}.
message Update{{.Kind}}Request {
{{- if .Namespaced}}
  string namespace = 1;
{{- end}}
  string name = 2;
  {{.Kind}} {{.Field}} = 3;
  repeated string dry_run = 4;
  string field_manager = 5;
}

// Update{{.Kind}}Response carries the stored {{.Kind}}.
message Update{{.Kind}}Response {
  {{.Kind}} {{.Field}} = 1;
}

// Delete{{.Kind}}Request holds Kubernetes' delete options.
message Delete{{.Kind}}Request {
{{- if .Namespaced}}
  string namespace = 1;
{{- end}}
  string name = 2;
  optional int64 grace_period_seconds = 3;
  // propagation_policy is Orphan, Background or Foreground.
  string propagation_policy = 4;
  kplane.meta.v1.Preconditions preconditions = 5;
  repeated string dry_run = 6;
}

// Delete{{.Kind}}Response carries the deleted object, or the object marked
// for deletion when finalizers or a grace period hold it.
message Delete{{.Kind}}Response {
  {{.Kind}} {{.Field}} = 1;
}
{{- if .Status}}

// Update{{.Kind}}StatusRequest carries the object whose status is written;
// everything but status is ignored.
message Update{{.Kind}}StatusRequest {
{{- if .Namespaced}}
  string namespace = 1;
{{- end}}
  string name = 2;
  {{.Kind}} {{.Field}} = 3;
  repeated string dry_run = 4;
  string field_manager = 5;
}

// Update{{.Kind}}StatusResponse carries the stored {{.Kind}}.
message Update{{.Kind}}StatusResponse {
  {{.Kind}} {{.Field}} = 1;
}
{{- end}}
{{- if .Approval}}

// Update{{.Kind}}ApprovalRequest carries the object whose
// status.conditions are written; spec and the rest of status are ignored.
message Update{{.Kind}}ApprovalRequest {
{{- if .Namespaced}}
  string namespace = 1;
{{- end}}
  string name = 2;
  {{.Kind}} {{.Field}} = 3;
  repeated string dry_run = 4;
  string field_manager = 5;
}

// Update{{.Kind}}ApprovalResponse carries the stored {{.Kind}}.
message Update{{.Kind}}ApprovalResponse {
  {{.Kind}} {{.Field}} = 1;
}
{{- end}}
{{- if .Scale}}

// Get{{.Kind}}ScaleRequest names the object.
message Get{{.Kind}}ScaleRequest {
  string namespace = 1;
  string name = 2;
}

// Get{{.Kind}}ScaleResponse carries the Scale.
message Get{{.Kind}}ScaleResponse {
  kplane.autoscaling.v1.Scale scale = 1;
}

// Update{{.Kind}}ScaleRequest carries the new Scale.
message Update{{.Kind}}ScaleRequest {
  string namespace = 1;
  string name = 2;
  kplane.autoscaling.v1.Scale scale = 3;
  repeated string dry_run = 4;
  string field_manager = 5;
}

// Update{{.Kind}}ScaleResponse carries the stored Scale.
message Update{{.Kind}}ScaleResponse {
  kplane.autoscaling.v1.Scale scale = 1;
}
{{- end}}
{{- if .Binding}}

// Bind{{.Kind}}Request carries the Binding (target: the node).
message Bind{{.Kind}}Request {
  string namespace = 1;
  string name = 2;
  Binding binding = 3;
  repeated string dry_run = 4;
  string field_manager = 5;
}

// Bind{{.Kind}}Response is a Success status.
message Bind{{.Kind}}Response {
  kplane.meta.v1.Status status = 1;
}
{{- end}}
{{- if .Eviction}}

// Evict{{.Kind}}Request carries the Eviction (policy/v1, or policy/v1beta1
// of the same shape).
message Evict{{.Kind}}Request {
  string namespace = 1;
  string name = 2;
  kplane.policy.v1.Eviction eviction = 3;
  repeated string dry_run = 4;
  string field_manager = 5;
}

// Evict{{.Kind}}Response is a Success status.
message Evict{{.Kind}}Response {
  kplane.meta.v1.Status status = 1;
}
{{- end}}
{{- if .Log}}

// Get{{.Kind}}LogRequest holds Kubernetes' PodLogOptions.
message Get{{.Kind}}LogRequest {
  string namespace = 1;
  string name = 2;
  // container may be empty when the pod has one container.
  string container = 3;
  // follow streams until the container stops or the client goes away.
  bool follow = 4;
  // previous reads the last terminated instance of the container.
  bool previous = 5;
  // since_seconds: only lines newer than this many seconds (at least 1).
  optional int64 since_seconds = 6;
  // timestamps prefixes every line with its RFC 3339 time.
  bool timestamps = 7;
  // tail_lines: only the last N lines (N >= 0).
  optional int64 tail_lines = 8;
  // limit_bytes: stop after this many bytes (at least 1).
  optional int64 limit_bytes = 9;
}
{{- end}}
{{- if .Stream}}

// Stream{{.Kind}}Request is one message from the client of a streaming
// subresource: the first holds start, the later ones data.
message Stream{{.Kind}}Request {
  Stream{{.Kind}}Start start = 1;
  // data is the next bytes the client sent.
  bytes data = 2;
}

// Stream{{.Kind}}Start is the HTTP request of a streaming subresource.
message Stream{{.Kind}}Start {
  // subresource is exec, attach or portforward.
  string subresource = 1;
  string namespace = 2;
  string name = 3;
  // method is GET (WebSocket) or POST (SPDY).
  string method = 4;
  // query is the request's raw query (PodExecOptions, PodAttachOptions,
  // PodPortForwardOptions).
  string query = 5;
  // headers are the upgrade and protocol negotiation headers
  // (Connection, Upgrade, X-Stream-Protocol-Version, Sec-WebSocket-*).
  repeated Stream{{.Kind}}Header headers = 6;
}

// Stream{{.Kind}}Header is one HTTP header with its values.
message Stream{{.Kind}}Header {
  string name = 1;
  repeated string values = 2;
}

// Stream{{.Kind}}Response is the next bytes from the node agent.
message Stream{{.Kind}}Response {
  bytes data = 1;
}
{{- end}}
{{- if .Finalize}}

// Finalize{{.Kind}}Request carries the object whose spec.finalizers are
// written; everything else is ignored.
message Finalize{{.Kind}}Request {
  string name = 2;
  {{.Kind}} {{.Field}} = 3;
  repeated string dry_run = 4;
  string field_manager = 5;
}

// Finalize{{.Kind}}Response carries the stored {{.Kind}} (the last state if
// it went).
message Finalize{{.Kind}}Response {
  {{.Kind}} {{.Field}} = 1;
}
{{- end}}
{{end}}`))

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

var goTmpl = template.Must(template.New("go").Funcs(template.FuncMap{"lower": lowerFirst}).Parse(`// Code generated by proto/internal/gen. DO NOT EDIT.

package apiserver

import (
	"context"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

{{- range .Groups}}
	{{.GoAlias}} "{{.GoImport}}"
{{- end}}
)

// builtinResources is the table of every resource the service serves.
func builtinResources() []*resourceInfo {
	return []*resourceInfo{
{{- range $g := .Groups}}{{range .Resource}}{{if not .View}}
		{
			Group: "{{$g.Name}}", Version: "{{$g.V}}", Kind: "{{.Kind}}", Resource: "{{.Resource}}",
			Namespaced: {{.Namespaced}}, HasStatus: {{.Status}}, HasScale: {{.Scale}}, HasBinding: {{.Binding}},
			AllowUnconditionalUpdate: {{.AllowUnconditionalUpdate}}, Graceful: {{.Graceful}},
			New: func() proto.Message { return &{{$g.GoAlias}}.{{.Kind}}{} },
		},
{{- end}}{{end}}{{end}}
	}
}

// registerServices registers every resource's gRPC service on gs, each
// routed to s's generic handlers.
func registerServices(gs *grpc.Server, s *Server) {
{{- range $g := .Groups}}{{range .Resource}}
{{- if .View}}
	{{$g.GoAlias}}.Register{{.Kind}}ServiceServer(gs, &{{$g.GoAlias}}{{.Kind}}View{s: s, r: s.views["{{$g.Name}}/{{.Resource}}"]})
{{- else}}
	{{$g.GoAlias}}.Register{{.Kind}}ServiceServer(gs, &{{.Kind | lower}}Service{s: s, r: s.resources["{{.Resource}}"]})
{{- end}}
{{- end}}{{end}}
}
{{range $g := .Groups}}{{range .Resource}}{{if not .View}}{{$k := .Kind}}{{$t := printf "%s.%s" $g.GoAlias .Kind}}{{$p := $g.GoAlias}}
type {{.Kind | lower}}Service struct {
	{{$p}}.Unimplemented{{.Kind}}ServiceServer
	s *Server
	r *resourceInfo
}

func (x *{{.Kind | lower}}Service) Get{{.Kind}}(ctx context.Context, req *{{$p}}.Get{{.Kind}}Request) (*{{$p}}.Get{{.Kind}}Response, error) {
	obj, err := x.s.get(ctx, x.r, {{if .Namespaced}}req.GetNamespace(){{else}}""{{end}}, req.GetName(), req.GetResourceVersion())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &{{$p}}.Get{{.Kind}}Response{ {{- .Kind}}: obj.(*{{$t}})}, nil
}

func (x *{{.Kind | lower}}Service) List{{.Plural}}(ctx context.Context, req *{{$p}}.List{{.Plural}}Request) (*{{$p}}.List{{.Plural}}Response, error) {
	items, lm, err := x.s.list(ctx, x.r, {{if .Namespaced}}req.GetNamespace(){{else}}""{{end}}, listOptions{
		LabelSelector: req.GetLabelSelector(), FieldSelector: req.GetFieldSelector(),
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		Limit: req.GetLimit(), Continue: req.GetContinue(),
	})
	if err != nil {
		return nil, toGRPC(err)
	}
	list := &{{$p}}.{{.Kind}}List{ApiVersion: x.r.APIVersion(), Kind: "{{.Kind}}List", Metadata: lm, Items: make([]*{{$t}}, len(items))}
	for i, it := range items {
		list.Items[i] = it.(*{{$t}})
	}
	return &{{$p}}.List{{.Plural}}Response{List: list}, nil
}

func (x *{{.Kind | lower}}Service) Watch{{.Plural}}(req *{{$p}}.Watch{{.Plural}}Request, stream {{$p}}.{{.Kind}}Service_Watch{{.Plural}}Server) error {
	opts := listOptions{
		LabelSelector: req.GetLabelSelector(), FieldSelector: req.GetFieldSelector(),
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		AllowWatchBookmarks: req.GetAllowWatchBookmarks(), SendInitialEvents: req.SendInitialEvents,
	}
	if req.TimeoutSeconds != nil {
		opts.TimeoutSeconds = req.GetTimeoutSeconds()
	}
	err := x.s.watch(stream.Context(), x.r, {{if .Namespaced}}req.GetNamespace(){{else}}""{{end}}, opts, func(typ string, obj proto.Message) proto.Message {
		ev := &{{$p}}.Watch{{.Plural}}Response{Type: typ}
		if obj != nil {
			ev.Object = obj.(*{{$t}})
		}
		return ev
	}, stream.SendMsg)
	return toGRPC(err)
}

func (x *{{.Kind | lower}}Service) Create{{.Kind}}(ctx context.Context, req *{{$p}}.Create{{.Kind}}Request) (*{{$p}}.Create{{.Kind}}Response, error) {
	obj, err := x.s.create(ctx, x.r, {{if .Namespaced}}req.GetNamespace(){{else}}""{{end}}, nilIfEmpty(req.Get{{.Kind}}()), writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &{{$p}}.Create{{.Kind}}Response{ {{- .Kind}}: obj.(*{{$t}})}, nil
}

func (x *{{.Kind | lower}}Service) Update{{.Kind}}(ctx context.Context, req *{{$p}}.Update{{.Kind}}Request) (*{{$p}}.Update{{.Kind}}Response, error) {
	obj, err := x.s.update(ctx, x.r, {{if .Namespaced}}req.GetNamespace(){{else}}""{{end}}, req.GetName(), nilIfEmpty(req.Get{{.Kind}}()), writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &{{$p}}.Update{{.Kind}}Response{ {{- .Kind}}: obj.(*{{$t}})}, nil
}

func (x *{{.Kind | lower}}Service) Delete{{.Kind}}(ctx context.Context, req *{{$p}}.Delete{{.Kind}}Request) (*{{$p}}.Delete{{.Kind}}Response, error) {
	obj, err := x.s.delete(ctx, x.r, {{if .Namespaced}}req.GetNamespace(){{else}}""{{end}}, req.GetName(), deleteOptions{
		GracePeriodSeconds: req.GracePeriodSeconds, PropagationPolicy: req.GetPropagationPolicy(),
		Preconditions: req.GetPreconditions(), DryRun: req.GetDryRun(),
	})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &{{$p}}.Delete{{.Kind}}Response{ {{- .Kind}}: obj.(*{{$t}})}, nil
}
{{- if .Status}}

func (x *{{.Kind | lower}}Service) Update{{.Kind}}Status(ctx context.Context, req *{{$p}}.Update{{.Kind}}StatusRequest) (*{{$p}}.Update{{.Kind}}StatusResponse, error) {
	obj, err := x.s.updateStatus(ctx, x.r, {{if .Namespaced}}req.GetNamespace(){{else}}""{{end}}, req.GetName(), nilIfEmpty(req.Get{{.Kind}}()), writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &{{$p}}.Update{{.Kind}}StatusResponse{ {{- .Kind}}: obj.(*{{$t}})}, nil
}
{{- end}}
{{- if .Approval}}

func (x *{{.Kind | lower}}Service) Update{{.Kind}}Approval(ctx context.Context, req *{{$p}}.Update{{.Kind}}ApprovalRequest) (*{{$p}}.Update{{.Kind}}ApprovalResponse, error) {
	obj, err := x.s.updateApproval(ctx, x.r, {{if .Namespaced}}req.GetNamespace(){{else}}""{{end}}, req.GetName(), nilIfEmpty(req.Get{{.Kind}}()), writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &{{$p}}.Update{{.Kind}}ApprovalResponse{ {{- .Kind}}: obj.(*{{$t}})}, nil
}
{{- end}}
{{- if .Scale}}

func (x *{{.Kind | lower}}Service) Get{{.Kind}}Scale(ctx context.Context, req *{{$p}}.Get{{.Kind}}ScaleRequest) (*{{$p}}.Get{{.Kind}}ScaleResponse, error) {
	sc, err := x.s.getScale(ctx, x.r, req.GetNamespace(), req.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &{{$p}}.Get{{.Kind}}ScaleResponse{Scale: sc}, nil
}

func (x *{{.Kind | lower}}Service) Update{{.Kind}}Scale(ctx context.Context, req *{{$p}}.Update{{.Kind}}ScaleRequest) (*{{$p}}.Update{{.Kind}}ScaleResponse, error) {
	sc, err := x.s.updateScale(ctx, x.r, req.GetNamespace(), req.GetName(), req.GetScale(), writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &{{$p}}.Update{{.Kind}}ScaleResponse{Scale: sc}, nil
}
{{- end}}
{{- if .Binding}}

func (x *{{.Kind | lower}}Service) Bind{{.Kind}}(ctx context.Context, req *{{$p}}.Bind{{.Kind}}Request) (*{{$p}}.Bind{{.Kind}}Response, error) {
	st, err := x.s.bind(ctx, x.r, req.GetNamespace(), req.GetName(), req.GetBinding(), writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &{{$p}}.Bind{{.Kind}}Response{Status: st}, nil
}
{{- end}}
{{- if .Eviction}}

func (x *{{.Kind | lower}}Service) Evict{{.Kind}}(ctx context.Context, req *{{$p}}.Evict{{.Kind}}Request) (*{{$p}}.Evict{{.Kind}}Response, error) {
	st, err := x.s.evict(ctx, x.r, req.GetNamespace(), req.GetName(), req.GetEviction(), writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &{{$p}}.Evict{{.Kind}}Response{Status: st}, nil
}
{{- end}}
{{- if .Log}}

func (x *{{.Kind | lower}}Service) Get{{.Kind}}Log(req *{{$p}}.Get{{.Kind}}LogRequest, stream grpc.ServerStreamingServer[httpbody.HttpBody]) error {
	return toGRPC(x.s.{{.Kind | lower}}Log(stream.Context(), x.r, req, stream.Send))
}
{{- end}}
{{- if .Stream}}

func (x *{{.Kind | lower}}Service) Stream{{.Kind}}(stream grpc.BidiStreamingServer[{{$p}}.Stream{{.Kind}}Request, {{$p}}.Stream{{.Kind}}Response]) error {
	return toGRPC(x.s.{{.Kind | lower}}Stream(stream.Context(), x.r, stream))
}
{{- end}}
{{- if .Finalize}}

func (x *{{.Kind | lower}}Service) Finalize{{.Kind}}(ctx context.Context, req *{{$p}}.Finalize{{.Kind}}Request) (*{{$p}}.Finalize{{.Kind}}Response, error) {
	obj, err := x.s.finalize(ctx, x.r, req.GetName(), nilIfEmpty(req.Get{{.Kind}}()), writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &{{$p}}.Finalize{{.Kind}}Response{ {{- .Kind}}: obj.(*{{$t}})}, nil
}
{{- end}}
{{end}}{{end}}{{end}}`))

func writeGo(root string) error {
	gs := groups()
	var buf bytes.Buffer
	t := goTmpl.Funcs(template.FuncMap{})
	if err := t.Execute(&buf, map[string]any{"Groups": gs}); err != nil {
		return err
	}
	src, err := format.Source(buf.Bytes())
	if err != nil {
		return fmt.Errorf("formatting generated Go: %w\n%s", err, buf.Bytes())
	}
	return os.WriteFile(filepath.Join(root, "services", "apiserver", "zz_generated_services.go"), src, 0o644)
}

// lowerFirst turns ConfigMap into configMap.
func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToLower(r[0])
	return string(r)
}
