// This file holds the default RBAC policy the API service creates at
// start-up when absent: Kubernetes' default roles and bindings, cut down to
// what kplane serves, with its components' identities.

package authz

import (
	"encoding/json"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	kplanerbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// Bootstrap is the default RBAC policy the apiserver creates at start-up
// when absent (it never overwrites an existing object of the same name, so
// an operator's edits survive restarts).
type Bootstrap struct {
	ClusterRoles        []rbacv1.ClusterRole
	ClusterRoleBindings []rbacv1.ClusterRoleBinding
	// Roles and RoleBindings are namespaced (kube-system), created after
	// the namespaces.
	Roles        []rbacv1.Role
	RoleBindings []rbacv1.RoleBinding
}

// Names of kplane components' identities (certificate CNs), as Kubernetes names them.
const (
	SchedulerUser         = "system:kube-scheduler"
	ControllerManagerUser = "system:kube-controller-manager"
	// DNSUser is `kplane dns`'s identity, bound to DNSRole.
	DNSUser = "system:kplane-dns"
	// DNSRole is what a cluster DNS reads, named as kubeadm names
	// CoreDNS's ClusterRole; it is bound to DNSUser and to the
	// ServiceAccount kube-system/coredns, so CoreDNS could run unchanged.
	DNSRole = "system:coredns"
	// ProxyUser is `kplane proxy`'s identity, bound to ProxyRole.
	ProxyUser = "system:kplane-proxy"
	// ProxyRole is kube-proxy's ClusterRole, by Kubernetes' name; it is
	// bound to ProxyUser, to kube-proxy's own user system:kube-proxy and
	// to the ServiceAccount kube-system/kube-proxy (as kubeadm binds it),
	// so kube-proxy could run unchanged.
	ProxyRole = "system:node-proxier"
	// MonitoringGroup may read /metrics and the health checks, as in
	// Kubernetes (a Prometheus's certificate or token carries it).
	MonitoringGroup = "system:monitoring"
)

func rule(verbs []string, groups []string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources}
}

var (
	read      = []string{"get", "list", "watch"}
	readWrite = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	write     = []string{"create", "update", "patch", "delete", "deletecollection"}
	core      = []string{""}
	apps      = []string{"apps"}
)

func bootstrapMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"},
		Annotations: map[string]string{"rbac.authorization.kubernetes.io/autoupdate": "true"},
	}
}

func clusterRole(name string, rules ...rbacv1.PolicyRule) rbacv1.ClusterRole {
	return rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: bootstrapMeta(name),
		Rules:      rules,
	}
}

func binding(name, role string, subjects ...rbacv1.Subject) rbacv1.ClusterRoleBinding {
	return rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: bootstrapMeta(name),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
}

func user(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

func group(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

// BootstrapPolicy returns Kubernetes' default roles, cut down to the
// resources kplane serves: cluster-admin (bound to system:masters), the
// user-facing admin, edit and view, system:kube-scheduler and
// system:kube-controller-manager (bound to those users), system:node (the
// RBAC view of what node agents need; like Kubernetes, its binding has no
// subjects because the Node authorizer grants nodes their rights), and
// system:basic-user / system:discovery for every authenticated user,
// system:public-info-viewer (health and version) for everyone,
// system:monitoring (health and /metrics) for the group of that name,
// system:auth-delegator (token and access reviews; no binding) and
// system:service-account-issuer-discovery (the issuer's discovery
// documents) for every ServiceAccount; system:coredns (what a cluster DNS
// lists and watches, as kubeadm's CoreDNS add-on names it) for
// system:kplane-dns and ServiceAccount kube-system/coredns;
// system:node-proxier (kube-proxy's) for system:kplane-proxy,
// system:kube-proxy and ServiceAccount kube-system/kube-proxy; and in kube-system the
// extension-apiserver-authentication-reader Role, bound to the scheduler
// and the controller manager.
func BootstrapPolicy() Bootstrap {
	viewRules := []rbacv1.PolicyRule{
		rule(read, core, "pods", "pods/status", "pods/log", "services", "services/status", "endpoints", "configmaps",
			"events", "namespaces", "namespaces/status", "replicationcontrollers", "persistentvolumeclaims", "serviceaccounts",
			"replicationcontrollers/status", "replicationcontrollers/scale", "limitranges", "resourcequotas", "resourcequotas/status"),
		rule(read, apps, "deployments", "deployments/status", "deployments/scale", "replicasets", "replicasets/status",
			"replicasets/scale", "statefulsets", "daemonsets", "daemonsets/status", "controllerrevisions"),
		rule(read, []string{"discovery.k8s.io"}, "endpointslices"),
		rule(read, []string{"coordination.k8s.io"}, "leases"),
		rule(read, []string{"policy"}, "poddisruptionbudgets", "poddisruptionbudgets/status"),
		rule(read, []string{"batch"}, "cronjobs", "cronjobs/status", "jobs", "jobs/status"),
		rule(read, []string{"networking.k8s.io"}, "networkpolicies", "ingresses", "ingresses/status"),
		rule(read, core, "persistentvolumeclaims/status"),
		rule(read, apps, "statefulsets/status", "statefulsets/scale"),
		rule(read, []string{"autoscaling"}, "horizontalpodautoscalers", "horizontalpodautoscalers/status"),
		// What metrics-server's system:aggregated-metrics-reader adds to view.
		rule(read, []string{"metrics.k8s.io"}, "pods", "nodes"),
	}
	editRules := append([]rbacv1.PolicyRule{
		rule(readWrite, core, "pods", "pods/log", "services", "endpoints", "configmaps", "secrets", "events",
			"replicationcontrollers", "persistentvolumeclaims", "serviceaccounts", "replicationcontrollers/scale"),
		rule([]string{"create"}, core, "pods/exec", "pods/attach", "pods/portforward", "pods/eviction", "serviceaccounts/token"),
		rule([]string{"impersonate"}, core, "serviceaccounts"),
		rule(readWrite, apps, "deployments", "deployments/scale", "replicasets", "replicasets/scale", "statefulsets", "daemonsets"),
		rule(readWrite, []string{"coordination.k8s.io"}, "leases"),
		rule(readWrite, []string{"policy"}, "poddisruptionbudgets"),
		rule(readWrite, []string{"batch"}, "cronjobs", "jobs"),
		rule(readWrite, []string{"networking.k8s.io"}, "networkpolicies", "ingresses"),
		rule(readWrite, apps, "statefulsets/scale"),
		rule(readWrite, []string{"autoscaling"}, "horizontalpodautoscalers"),
	}, viewRules...)
	adminRules := append([]rbacv1.PolicyRule{
		rule([]string{"create"}, []string{"authorization.k8s.io"}, "localsubjectaccessreviews"),
		rule(readWrite, []string{"rbac.authorization.k8s.io"}, "roles", "rolebindings"),
	}, editRules...)

	return Bootstrap{
		ClusterRoles: []rbacv1.ClusterRole{
			clusterRole("cluster-admin",
				rule([]string{"*"}, []string{"*"}, "*"),
				rbacv1.PolicyRule{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}),
			clusterRole("admin", adminRules...),
			clusterRole("edit", editRules...),
			clusterRole("view", viewRules...),
			clusterRole("system:basic-user",
				rule([]string{"create"}, []string{"authorization.k8s.io"}, "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
				rule([]string{"create"}, []string{"authentication.k8s.io"}, "selfsubjectreviews")),
			clusterRole("system:auth-delegator",
				rule([]string{"create"}, []string{"authentication.k8s.io"}, "tokenreviews"),
				rule([]string{"create"}, []string{"authorization.k8s.io"}, "subjectaccessreviews")),
			clusterRole("system:service-account-issuer-discovery",
				rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks", "/openid/v1/jwks/"}}),
			clusterRole("system:discovery",
				rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"}}),
			clusterRole("system:public-info-viewer",
				rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/livez", "/readyz", "/version", "/version/"}}),
			clusterRole("system:monitoring",
				rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz", "/readyz/*"}}),
			clusterRole(SchedulerUser,
				rule([]string{"create", "patch", "update"}, []string{"", "events.k8s.io"}, "events"),
				rule([]string{"create"}, core, "bindings", "pods/binding"),
				rule([]string{"patch", "update"}, core, "pods/status"),
				rule([]string{"delete", "get", "list", "watch"}, core, "pods"),
				rule(read, core, "nodes", "namespaces", "services", "replicationcontrollers", "persistentvolumeclaims", "persistentvolumes"),
				rule(read, apps, "replicasets", "statefulsets"),
				// Kubernetes' system:volume-scheduler, bound to the scheduler.
				rule([]string{"get", "list", "watch", "patch", "update"}, core, "persistentvolumeclaims", "persistentvolumes"),
				rule(read, []string{"storage.k8s.io"}, "storageclasses"),
				// What kube-scheduler's volume, limits and PDB plugins watch.
				rule(read, []string{"policy"}, "poddisruptionbudgets"),
				rule(read, []string{"storage.k8s.io"}, "csinodes", "csidrivers", "csistoragecapacities"),
				rule([]string{"get", "list", "watch"}, []string{"storage.k8s.io"}, "volumeattachments"),
				rule([]string{"create"}, []string{"coordination.k8s.io"}, "leases"),
				rbacv1.PolicyRule{Verbs: []string{"get", "update"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
					ResourceNames: []string{"kube-scheduler"}},
			),
			clusterRole(ControllerManagerUser,
				rule(read, []string{"*"}, "*"),
				rule([]string{"create", "patch", "update"}, []string{"", "events.k8s.io"}, "events"),
				rule(write, core, "pods", "endpoints", "nodes", "services", "configmaps", "namespaces", "serviceaccounts", "replicationcontrollers",
					"resourcequotas", "limitranges"),
				rule([]string{"update", "patch"}, core, "pods/status", "nodes/status", "namespaces/finalize", "namespaces/status", "services/status",
					"replicationcontrollers/status", "replicationcontrollers/scale", "resourcequotas/status"),
				rule(write, apps, "deployments", "replicasets", "statefulsets", "daemonsets", "controllerrevisions"),
				rule([]string{"update", "patch"}, apps, "deployments/status", "replicasets/status", "deployments/scale", "replicasets/scale",
					"deployments/finalizers", "replicasets/finalizers"),
				rule([]string{"update", "patch"}, apps, "daemonsets/status", "daemonsets/finalizers"),
				rule(write, []string{"discovery.k8s.io"}, "endpointslices"),
				rule(write, []string{"coordination.k8s.io"}, "leases"),
				rule([]string{"update"}, []string{"policy"}, "poddisruptionbudgets/status"),
				rule(write, []string{"batch"}, "jobs", "cronjobs"),
				rule([]string{"update", "patch"}, []string{"batch"}, "jobs/status", "cronjobs/status", "jobs/finalizers", "cronjobs/finalizers"),
				// The CRD controller: conditions, the cleanup finalizer.
				rule([]string{"update", "patch"}, []string{"apiextensions.k8s.io"}, "customresourcedefinitions", "customresourcedefinitions/status"),
				rule(write, core, "persistentvolumeclaims", "persistentvolumes"),
				rule([]string{"update", "patch"}, core, "persistentvolumeclaims/status", "persistentvolumes/status"),
				rule([]string{"update", "patch"}, apps, "statefulsets/status", "statefulsets/scale", "statefulsets/finalizers"),
				rule(write, []string{"storage.k8s.io"}, "storageclasses"),
				// The garbage collector updates (owner references,
				// finalizers) and deletes objects of every kind, as
				// Kubernetes' generic-garbage-collector may.
				rule([]string{"update", "patch", "delete"}, []string{"*"}, "*"),
				// The HPA controller: its status, and any target's scale.
				rule([]string{"update", "patch"}, []string{"autoscaling"}, "horizontalpodautoscalers/status"),
				rule([]string{"get", "update", "patch"}, []string{"*"}, "*/scale"),
			),
			clusterRole(DNSRole,
				rule([]string{"list", "watch"}, core, "endpoints", "services", "pods", "namespaces"),
				rule([]string{"list", "watch"}, []string{"discovery.k8s.io"}, "endpointslices")),
			clusterRole(ProxyRole,
				rule([]string{"list", "watch"}, core, "endpoints", "services"),
				rule(read, core, "nodes"),
				rule([]string{"create", "patch", "update"}, []string{"", "events.k8s.io"}, "events"),
				rule([]string{"list", "watch"}, []string{"discovery.k8s.io"}, "endpointslices")),
			clusterRole("system:node",
				rule(read, core, "pods", "nodes", "services", "endpoints"),
				rule([]string{"get"}, core, "configmaps", "secrets", "persistentvolumeclaims", "persistentvolumes"),
				rule([]string{"create", "get", "update", "patch"}, core, "nodes"),
				rule([]string{"get", "update", "patch"}, core, "nodes/status"),
				rule([]string{"update", "patch"}, core, "pods/status"),
				rule([]string{"delete"}, core, "pods"),
				rule([]string{"create", "update", "patch"}, []string{"", "events.k8s.io"}, "events"),
				rule([]string{"get", "create", "update", "patch", "delete"}, []string{"coordination.k8s.io"}, "leases"),
				rule([]string{"get"}, []string{"storage.k8s.io"}, "volumeattachments"),
				rule(read, []string{"storage.k8s.io"}, "csidrivers"),
				rule([]string{"get", "create", "update", "patch", "delete"}, []string{"storage.k8s.io"}, "csinodes"),
				rule(read, []string{"node.k8s.io"}, "runtimeclasses"),
			),
		},
		ClusterRoleBindings: []rbacv1.ClusterRoleBinding{
			binding("cluster-admin", "cluster-admin", group(request.MastersGroup)),
			binding("system:basic-user", "system:basic-user", group(request.AuthenticatedGroup)),
			binding("system:discovery", "system:discovery", group(request.AuthenticatedGroup)),
			binding("system:public-info-viewer", "system:public-info-viewer", group(request.AuthenticatedGroup), group(request.UnauthenticatedGroup)),
			binding("system:service-account-issuer-discovery", "system:service-account-issuer-discovery", group("system:serviceaccounts")),
			binding("system:monitoring", "system:monitoring", group(MonitoringGroup)),
			binding(SchedulerUser, SchedulerUser, user(SchedulerUser)),
			binding(ControllerManagerUser, ControllerManagerUser, user(ControllerManagerUser)),
			binding("system:node", "system:node"),
			binding(DNSRole, DNSRole, user(DNSUser),
				rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "coredns"}),
			binding(ProxyRole, ProxyRole, user(ProxyUser), user("system:kube-proxy"),
				rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "kube-proxy"}),
		},
		// As Kubernetes: the scheduler and the controller manager may read
		// the ConfigMap kube-apiserver publishes for delegated
		// authentication (kplane does not publish it; they find it absent
		// rather than forbidden).
		Roles: []rbacv1.Role{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "extension-apiserver-authentication-reader"},
			Rules: []rbacv1.PolicyRule{{Verbs: read, APIGroups: core, Resources: []string{"configmaps"},
				ResourceNames: []string{"extension-apiserver-authentication"}}},
		}},
		RoleBindings: []rbacv1.RoleBinding{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "system::extension-apiserver-authentication-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
			Subjects:   []rbacv1.Subject{user(ControllerManagerUser), user(SchedulerUser)},
		}},
	}
}

// ToProto converts a Kubernetes object (such as the k8s.io/api/rbac/v1 types
// in Bootstrap) into kplane's proto message of the same shape, through their
// shared JSON names. Unknown fields are an error, so a schema gap shows.
func ToProto(k8sObj any, into proto.Message) error {
	b, err := json.Marshal(k8sObj)
	if err != nil {
		return fmt.Errorf("authz: encode %T: %w", k8sObj, err)
	}
	if err := protojson.Unmarshal(b, into); err != nil {
		return fmt.Errorf("authz: decode into %s: %w", into.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// BootstrapObjects is BootstrapPolicy as kplane's proto objects, ready for
// the apiserver to create at start-up (each only if absent).
func BootstrapObjects() ([]*kplanerbacv1.ClusterRole, []*kplanerbacv1.ClusterRoleBinding, error) {
	bp := BootstrapPolicy()
	roles := make([]*kplanerbacv1.ClusterRole, 0, len(bp.ClusterRoles))
	for i := range bp.ClusterRoles {
		p := &kplanerbacv1.ClusterRole{}
		if err := ToProto(&bp.ClusterRoles[i], p); err != nil {
			return nil, nil, err
		}
		roles = append(roles, p)
	}
	bindings := make([]*kplanerbacv1.ClusterRoleBinding, 0, len(bp.ClusterRoleBindings))
	for i := range bp.ClusterRoleBindings {
		p := &kplanerbacv1.ClusterRoleBinding{}
		if err := ToProto(&bp.ClusterRoleBindings[i], p); err != nil {
			return nil, nil, err
		}
		bindings = append(bindings, p)
	}
	return roles, bindings, nil
}

// BootstrapMessages is BootstrapObjects as one list, cluster roles first,
// then the namespaced roles and bindings, in the form the apiserver's
// Config.Bootstrap takes.
func BootstrapMessages() ([]proto.Message, error) {
	roles, bindings, err := BootstrapObjects()
	if err != nil {
		return nil, err
	}
	out := make([]proto.Message, 0, len(roles)+len(bindings))
	for _, r := range roles {
		out = append(out, r)
	}
	for _, b := range bindings {
		out = append(out, b)
	}
	bp := BootstrapPolicy()
	for i := range bp.Roles {
		p := &kplanerbacv1.Role{}
		if err := ToProto(&bp.Roles[i], p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	for i := range bp.RoleBindings {
		p := &kplanerbacv1.RoleBinding{}
		if err := ToProto(&bp.RoleBindings[i], p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
