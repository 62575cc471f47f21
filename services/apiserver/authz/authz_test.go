// This file holds the tests of the authorizers: RBAC following the store,
// the Node authorizer and NodeRestriction, their union, the bootstrap
// policy, ClusterRole aggregation, non-resource URLs and Forbidden's
// wording.

package authz

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// meta is object metadata as the apiserver stores it (generation and
// creationTimestamp set: int64 and Timestamp must survive the conversion).
func meta(ns, name string) *metav1.ObjectMeta {
	return &metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1, ResourceVersion: "12", Uid: "u-1",
		CreationTimestamp: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
}

func pr(verbs, groups, resources []string, names ...string) *rbacv1.PolicyRule {
	return &rbacv1.PolicyRule{Verbs: verbs, ApiGroups: groups, Resources: resources, ResourceNames: names}
}

func ss(s ...string) []string { return s }

// fixture is an RBAC authorizer fed with kplane's proto objects, as the
// apiserver's watch feeds it.
func fixture(t *testing.T) *RBAC {
	t.Helper()
	r := NewRBAC(nil)
	objs := []any{
		&rbacv1.Role{Metadata: meta("default", "pod-reader"), Rules: []*rbacv1.PolicyRule{
			pr(ss("get", "list", "watch"), ss(""), ss("pods")),
		}},
		&rbacv1.RoleBinding{Metadata: meta("default", "bob-reads-pods"),
			Subjects: []*rbacv1.Subject{{Kind: "User", Name: "bob"}},
			RoleRef:  &rbacv1.RoleRef{Kind: "Role", Name: "pod-reader", ApiGroup: "rbac.authorization.k8s.io"}},
		&rbacv1.ClusterRole{Metadata: meta("", "status-writer"), Rules: []*rbacv1.PolicyRule{
			pr(ss("update", "patch"), ss(""), ss("pods/status")),
			pr(ss("get"), ss("apps"), ss("*/scale")),
		}},
		&rbacv1.RoleBinding{Metadata: meta("team", "devs-write-status"),
			Subjects: []*rbacv1.Subject{{Kind: "Group", Name: "devs"}},
			RoleRef:  &rbacv1.RoleRef{Kind: "ClusterRole", Name: "status-writer"}},
		&rbacv1.ClusterRole{Metadata: meta("", "one-configmap"), Rules: []*rbacv1.PolicyRule{
			pr(ss("get", "update"), ss(""), ss("configmaps"), "settings"),
		}},
		&rbacv1.ClusterRoleBinding{Metadata: meta("", "carol-one-configmap"),
			Subjects: []*rbacv1.Subject{{Kind: "User", Name: "carol"}},
			RoleRef:  &rbacv1.RoleRef{Kind: "ClusterRole", Name: "one-configmap"}},
		&rbacv1.ClusterRole{Metadata: meta("", "deploy-all"), Rules: []*rbacv1.PolicyRule{
			pr(ss("*"), ss("apps"), ss("*")),
		}},
		&rbacv1.RoleBinding{Metadata: meta("team", "robot-deploys"),
			Subjects: []*rbacv1.Subject{{Kind: "ServiceAccount", Name: "robot"}},
			RoleRef:  &rbacv1.RoleRef{Kind: "ClusterRole", Name: "deploy-all"}},
	}
	for _, o := range objs {
		if err := r.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func TestRBACAuthorize(t *testing.T) {
	r := fixture(t)
	bob := request.User{Name: "bob", Groups: ss(request.AuthenticatedGroup)}
	dave := request.User{Name: "dave", Groups: ss("devs", request.AuthenticatedGroup)}
	carol := request.User{Name: "carol"}
	robot := request.User{Name: "system:serviceaccount:team:robot"}
	root := request.User{Name: "root", Groups: ss(request.MastersGroup)}
	tests := []struct {
		name string
		a    request.Attributes
		want bool
	}{
		{name: "role grants list in its namespace", a: request.Attributes{User: bob, Verb: "list", Resource: "pods", Namespace: "default"}, want: true},
		{name: "role does not reach another namespace", a: request.Attributes{User: bob, Verb: "list", Resource: "pods", Namespace: "other"}},
		{name: "role does not reach the cluster scope", a: request.Attributes{User: bob, Verb: "list", Resource: "pods"}},
		{name: "verb not granted", a: request.Attributes{User: bob, Verb: "delete", Resource: "pods", Namespace: "default", Name: "web"}},
		{name: "pods does not cover pods/status", a: request.Attributes{User: bob, Verb: "get", Resource: "pods", Subresource: "status", Namespace: "default", Name: "web"}},
		{name: "wrong API group", a: request.Attributes{User: bob, Verb: "list", APIGroup: "apps", Resource: "pods", Namespace: "default"}},
		{name: "group subject via cluster role in a role binding", a: request.Attributes{User: dave, Verb: "update", Resource: "pods", Subresource: "status", Namespace: "team", Name: "web"}, want: true},
		{name: "pods/status does not cover pods", a: request.Attributes{User: dave, Verb: "update", Resource: "pods", Namespace: "team", Name: "web"}},
		{name: "*/scale covers deployments/scale", a: request.Attributes{User: dave, Verb: "get", APIGroup: "apps", Resource: "deployments", Subresource: "scale", Namespace: "team", Name: "web"}, want: true},
		{name: "cluster role in a role binding is namespaced", a: request.Attributes{User: dave, Verb: "update", Resource: "pods", Subresource: "status", Namespace: "default", Name: "web"}},
		{name: "resourceNames match", a: request.Attributes{User: carol, Verb: "get", Resource: "configmaps", Namespace: "any", Name: "settings"}, want: true},
		{name: "resourceNames mismatch", a: request.Attributes{User: carol, Verb: "get", Resource: "configmaps", Namespace: "any", Name: "other"}},
		{name: "resourceNames never cover list", a: request.Attributes{User: carol, Verb: "list", Resource: "configmaps", Namespace: "any"}},
		{name: "service account subject", a: request.Attributes{User: robot, Verb: "create", APIGroup: "apps", Resource: "deployments", Namespace: "team"}, want: true},
		{name: "service account of another namespace", a: request.Attributes{User: request.User{Name: "system:serviceaccount:default:robot"}, Verb: "create", APIGroup: "apps", Resource: "deployments", Namespace: "team"}},
		{name: "resource * covers subresources", a: request.Attributes{User: robot, Verb: "update", APIGroup: "apps", Resource: "deployments", Subresource: "scale", Namespace: "team", Name: "web"}, want: true},
		{name: "system:masters may do anything", a: request.Attributes{User: root, Verb: "delete", Resource: "nodes", Name: "n1"}, want: true},
		{name: "unknown user", a: request.Attributes{User: request.User{Name: "eve"}, Verb: "get", Resource: "pods", Namespace: "default", Name: "web"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := r.Authorize(context.Background(), tt.a)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tt.want {
				t.Errorf("got allowed=%v (%q), want %v", d.Allowed, d.Reason, tt.want)
			}
		})
	}
}

func TestRBACFollowsDeletesAndReplace(t *testing.T) {
	r := fixture(t)
	a := request.Attributes{User: request.User{Name: "bob"}, Verb: "list", Resource: "pods", Namespace: "default"}
	allowed := func() bool {
		d, err := r.Authorize(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	if !allowed() {
		t.Fatal("got denied before the delete, want allowed")
	}
	r.Delete(&rbacv1.Role{Metadata: meta("default", "pod-reader")})
	if allowed() {
		t.Error("got allowed after the role was deleted, want denied")
	}
	r.Upsert(&rbacv1.Role{Metadata: meta("default", "pod-reader"), Rules: []*rbacv1.PolicyRule{pr(ss("list"), ss(""), ss("pods"))}})
	if !allowed() {
		t.Error("got denied after the role came back, want allowed")
	}
	if err := r.Replace("RoleBinding", nil); err != nil {
		t.Fatal(err)
	}
	if allowed() {
		t.Error("got allowed after the bindings were replaced by none, want denied")
	}
	if err := r.Replace("Role", []any{&rbacv1.RoleBinding{}}); err == nil {
		t.Error("Replace accepted a RoleBinding as a Role")
	}
	if err := r.Put(&corev1.Pod{}); err == nil {
		t.Error("Put accepted a Pod")
	}
}

func TestForbiddenWording(t *testing.T) {
	bob := request.User{Name: "bob"}
	tests := []struct {
		name string
		a    request.Attributes
		d    request.Decision
		want string
	}{
		{name: "namespaced list", a: request.Attributes{User: bob, Verb: "list", Resource: "pods", Namespace: "default"},
			want: `pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "default"`},
		{name: "named get in a group", a: request.Attributes{User: bob, Verb: "get", APIGroup: "apps", Resource: "deployments", Namespace: "ns", Name: "web"},
			want: `deployments.apps "web" is forbidden: User "bob" cannot get resource "deployments" in API group "apps" in the namespace "ns"`},
		{name: "cluster scope", a: request.Attributes{User: bob, Verb: "delete", Resource: "nodes", Name: "n1"},
			want: `nodes "n1" is forbidden: User "bob" cannot delete resource "nodes" in API group "" at the cluster scope`},
		{name: "subresource and reason", a: request.Attributes{User: request.User{Name: "system:node:n1"}, Verb: "update", Resource: "pods", Subresource: "status", Namespace: "default", Name: "web"},
			d:    request.Decision{Reason: "no relationship found between node 'n1' and this object"},
			want: `pods "web" is forbidden: User "system:node:n1" cannot update resource "pods/status" in API group "" in the namespace "default": no relationship found between node 'n1' and this object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Forbidden(tt.a, tt.d)
			if got := err.Error(); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if !apierrors.IsForbidden(err) {
				t.Errorf("got reason %q, want Forbidden", err.Reason)
			}
		})
	}
}

func TestNodeAuthorizer(t *testing.T) {
	n1 := request.User{Name: "system:node:n1", Groups: ss(request.NodesGroup, request.AuthenticatedGroup)}
	notANode := request.User{Name: "system:node:n1", Groups: ss(request.AuthenticatedGroup)} // right name, no group
	tests := []struct {
		name string
		a    request.Attributes
		want bool
	}{
		{name: "watch pods", a: request.Attributes{User: n1, Verb: "watch", Resource: "pods"}, want: true},
		{name: "list nodes", a: request.Attributes{User: n1, Verb: "list", Resource: "nodes"}, want: true},
		{name: "get services", a: request.Attributes{User: n1, Verb: "get", Resource: "services", Namespace: "default", Name: "kubernetes"}, want: true},
		{name: "get a secret", a: request.Attributes{User: n1, Verb: "get", Resource: "secrets", Namespace: "default", Name: "s"}, want: true},
		{name: "list secrets", a: request.Attributes{User: n1, Verb: "list", Resource: "secrets", Namespace: "default"}},
		{name: "watch one secret (metadata.name selector)", a: request.Attributes{User: n1, Verb: "watch", Resource: "secrets", Namespace: "default", Name: "s"}, want: true},
		{name: "list one configmap (metadata.name selector)", a: request.Attributes{User: n1, Verb: "list", Resource: "configmaps", Namespace: "default", Name: "c"}, want: true},
		{name: "watch every configmap of a namespace", a: request.Attributes{User: n1, Verb: "watch", Resource: "configmaps", Namespace: "default"}},
		{name: "watch one configmap of every namespace", a: request.Attributes{User: n1, Verb: "watch", Resource: "configmaps", Name: "c"}},
		{name: "update a configmap", a: request.Attributes{User: n1, Verb: "update", Resource: "configmaps", Namespace: "default", Name: "c"}},
		{name: "watch one claim", a: request.Attributes{User: n1, Verb: "watch", Resource: "persistentvolumeclaims", Namespace: "default", Name: "c"}},
		{name: "create own node", a: request.Attributes{User: n1, Verb: "create", Resource: "nodes", Name: "n1"}, want: true},
		{name: "create a node, name in the object", a: request.Attributes{User: n1, Verb: "create", Resource: "nodes"}, want: true},
		{name: "create a lease, name in the object", a: request.Attributes{User: n1, Verb: "create", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease"}, want: true},
		{name: "update own node status", a: request.Attributes{User: n1, Verb: "update", Resource: "nodes", Subresource: "status", Name: "n1"}, want: true},
		{name: "update another node", a: request.Attributes{User: n1, Verb: "update", Resource: "nodes", Name: "n2"}},
		{name: "patch another node's status", a: request.Attributes{User: n1, Verb: "patch", Resource: "nodes", Subresource: "status", Name: "n2"}},
		{name: "delete own node", a: request.Attributes{User: n1, Verb: "delete", Resource: "nodes", Name: "n1"}},
		{name: "update own lease", a: request.Attributes{User: n1, Verb: "update", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: "n1"}, want: true},
		{name: "update another node's lease", a: request.Attributes{User: n1, Verb: "update", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: "n2"}},
		{name: "lease elsewhere", a: request.Attributes{User: n1, Verb: "update", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "n1"}},
		{name: "create events", a: request.Attributes{User: n1, Verb: "create", Resource: "events", Namespace: "default"}, want: true},
		{name: "update pod status", a: request.Attributes{User: n1, Verb: "update", Resource: "pods", Subresource: "status", Namespace: "default", Name: "web"}, want: true},
		{name: "delete a pod (graceful deletion confirmation)", a: request.Attributes{User: n1, Verb: "delete", Resource: "pods", Namespace: "default", Name: "web"}, want: true},
		{name: "bind a pod", a: request.Attributes{User: n1, Verb: "create", Resource: "pods", Subresource: "binding", Namespace: "default", Name: "web"}},
		{name: "create a deployment", a: request.Attributes{User: n1, Verb: "create", APIGroup: "apps", Resource: "deployments", Namespace: "default"}},
		{name: "node name without the nodes group", a: request.Attributes{User: notANode, Verb: "watch", Resource: "pods"}},
	}
	az := NewNode(NodeConfig{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := az.Authorize(context.Background(), tt.a)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tt.want {
				t.Errorf("got allowed=%v (%q), want %v", d.Allowed, d.Reason, tt.want)
			}
		})
	}
}

func TestNodeAuthorizerRelatedSecrets(t *testing.T) {
	az := NewNode(NodeConfig{RelatedToNode: func(_ context.Context, node, resource, ns, name string) (bool, error) {
		return node == "n1" && resource == "secrets" && ns == "default" && name == "mine", nil
	}})
	n1 := request.User{Name: "system:node:n1", Groups: ss(request.NodesGroup)}
	for _, tc := range []struct {
		name   string
		verb   string
		secret string
		want   bool
	}{
		{name: "related", verb: "get", secret: "mine", want: true},
		{name: "unrelated", verb: "get", secret: "theirs"},
		{name: "watch related", verb: "watch", secret: "mine", want: true},
		{name: "list related", verb: "list", secret: "mine", want: true},
		{name: "watch unrelated", verb: "watch", secret: "theirs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := az.Authorize(context.Background(), request.Attributes{User: n1, Verb: tc.verb, Resource: "secrets", Namespace: "default", Name: tc.secret})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tc.want {
				t.Errorf("got allowed=%v (%q), want %v", d.Allowed, d.Reason, tc.want)
			}
		})
	}
}

func TestUnionNodeThenRBAC(t *testing.T) {
	r := fixture(t)
	u := NewDefault(r, nil)
	n1 := request.User{Name: "system:node:n1", Groups: ss(request.NodesGroup)}
	tests := []struct {
		name string
		a    request.Attributes
		want bool
	}{
		{name: "node authorizer allows", a: request.Attributes{User: n1, Verb: "update", Resource: "nodes", Name: "n1"}, want: true},
		{name: "rbac allows", a: request.Attributes{User: request.User{Name: "bob"}, Verb: "list", Resource: "pods", Namespace: "default"}, want: true},
		{name: "neither allows", a: request.Attributes{User: n1, Verb: "update", Resource: "nodes", Name: "n2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := u.Authorize(context.Background(), tt.a)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tt.want {
				t.Errorf("got allowed=%v (%q), want %v", d.Allowed, d.Reason, tt.want)
			}
		})
	}
}

func TestNodeRestriction(t *testing.T) {
	n1 := request.User{Name: "system:node:n1", Groups: ss(request.NodesGroup)}
	pod := func(node string) *corev1.Pod {
		return &corev1.Pod{Metadata: meta("default", "web"), Spec: &corev1.PodSpec{NodeName: node}}
	}
	tests := []struct {
		name    string
		a       request.Admission
		wantErr string
	}{
		{name: "own node status", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes", Subresource: "status", Name: "n1"}, Operation: request.Update}},
		{name: "create own node (name from the object)", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes"}, Operation: request.Create,
			Object: &corev1.Node{Metadata: meta("", "n1")}}},
		{name: "another node", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes", Name: "n2"}, Operation: request.Update},
			wantErr: `nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2"`},
		{name: "create another node", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes"}, Operation: request.Create,
			Object: &corev1.Node{Metadata: meta("", "n2")}},
			wantErr: `nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2"`},
		{name: "own lease", a: request.Admission{Attributes: request.Attributes{User: n1, APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease"}, Operation: request.Create,
			Object: &coordv1.Lease{Metadata: meta("kube-node-lease", "n1")}}},
		{name: "another node's lease", a: request.Admission{Attributes: request.Attributes{User: n1, APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: "n2"}, Operation: request.Update},
			wantErr: `leases.coordination.k8s.io "n2" is forbidden: node "n1" can only access node lease with the same name as the requesting node`},
		{name: "status of a pod bound to it", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "pods", Subresource: "status", Namespace: "default", Name: "web"}, Operation: request.Update,
			Object: pod("n1"), OldObject: pod("n1")}},
		{name: "status of a pod bound elsewhere", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "pods", Subresource: "status", Namespace: "default", Name: "web"}, Operation: request.Update,
			Object: pod("n1"), OldObject: pod("n2")},
			wantErr: `pods "web" is forbidden: node "n1" can only update pod status for pods with spec.nodeName set to itself`},
		{name: "status of an unbound pod", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "pods", Subresource: "status", Namespace: "default", Name: "web"}, Operation: request.Update,
			Object: pod("n1"), OldObject: pod("")},
			wantErr: `pods "web" is forbidden: node "n1" can only update pod status for pods with spec.nodeName set to itself`},
		{name: "delete a pod bound to it", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "pods", Namespace: "default", Name: "web"}, Operation: request.Delete, OldObject: pod("n1")}},
		{name: "delete a pod bound elsewhere", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "pods", Namespace: "default", Name: "web"}, Operation: request.Delete, OldObject: pod("n2")},
			wantErr: `pods "web" is forbidden: node "n1" can only delete pods with spec.nodeName set to itself`},
		{name: "bind a pod", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "pods", Subresource: "binding", Namespace: "default", Name: "web"}, Operation: request.Create},
			wantErr: `pods "web" is forbidden: node "n1" is not allowed to bind pods`},
		{name: "register with kubelet labels", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes"}, Operation: request.Create,
			Object: labelledNode("n1", map[string]string{"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "m", "topology.kubernetes.io/zone": "a", "example.com/team": "x"}, nil)}},
		{name: "register with restricted labels", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes"}, Operation: request.Create,
			Object: labelledNode("n1", map[string]string{"node-role.kubernetes.io/control-plane": "", "node-restriction.kubernetes.io/pci": "yes", "kubernetes.io/os": "linux"}, nil)},
			wantErr: `nodes "n1" is forbidden: node "n1" is not allowed to set the following labels: node-restriction.kubernetes.io/pci, node-role.kubernetes.io/control-plane`},
		{name: "add a restricted label to itself", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes", Name: "n1"}, Operation: request.Update,
			Object: labelledNode("n1", map[string]string{"kubernetes.io/os": "linux", "sub.node-restriction.kubernetes.io/x": "1", "example.k8s.io/y": "2"}, nil), OldObject: labelledNode("n1", map[string]string{"kubernetes.io/os": "linux"}, nil)},
			wantErr: `nodes "n1" is forbidden: is not allowed to modify labels: example.k8s.io/y, sub.node-restriction.kubernetes.io/x`},
		{name: "remove a restricted label from itself through status", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes", Subresource: "status", Name: "n1"}, Operation: request.Update,
			Object: labelledNode("n1", nil, nil), OldObject: labelledNode("n1", map[string]string{"node-restriction.kubernetes.io/pci": "yes"}, nil)},
			wantErr: `nodes "n1" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/pci`},
		{name: "change kubelet and unprefixed labels", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes", Name: "n1"}, Operation: request.Update,
			Object: labelledNode("n1", map[string]string{"kubernetes.io/arch": "arm64", "team": "b"}, nil), OldObject: labelledNode("n1", map[string]string{"kubernetes.io/arch": "amd64", "team": "a"}, nil)}},
		{name: "remove its taint", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes", Name: "n1"}, Operation: request.Update,
			Object: labelledNode("n1", nil, nil), OldObject: labelledNode("n1", nil, []*corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}})},
			wantErr: `nodes "n1" is forbidden: node "n1" is not allowed to modify taints`},
		{name: "keep its taint", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes", Name: "n1"}, Operation: request.Update,
			Object: labelledNode("n1", nil, []*corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}}), OldObject: labelledNode("n1", nil, []*corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}})}},
		{name: "register with taints", a: request.Admission{Attributes: request.Attributes{User: n1, Resource: "nodes"}, Operation: request.Create,
			Object: labelledNode("n1", nil, []*corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}})}},
		{name: "an admin sets restricted labels", a: request.Admission{Attributes: request.Attributes{User: request.User{Name: "admin", Groups: ss(request.MastersGroup)}, Resource: "nodes", Name: "n1"}, Operation: request.Update,
			Object: labelledNode("n1", map[string]string{"node-role.kubernetes.io/control-plane": ""}, nil), OldObject: labelledNode("n1", nil, nil)}},
		{name: "other users pass", a: request.Admission{Attributes: request.Attributes{User: request.User{Name: "bob"}, Resource: "pods", Subresource: "binding", Namespace: "default", Name: "web"}, Operation: request.Create}},
	}
	nr := NewNodeRestriction()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := nr.Validate(context.Background(), &tt.a)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got %v, want allowed", err)
			case tt.wantErr != "" && err == nil:
				t.Errorf("got allowed, want %q", tt.wantErr)
			case tt.wantErr != "":
				if err.Error() != tt.wantErr {
					t.Errorf("got  %s\nwant %s", err, tt.wantErr)
				}
				if !apierrors.IsForbidden(err) {
					t.Errorf("got reason %q, want Forbidden", apierrors.ReasonOf(err))
				}
			}
		})
	}
}

func labelledNode(name string, labels map[string]string, taints []*corev1.Taint) *corev1.Node {
	m := meta("", name)
	m.Labels = labels
	return &corev1.Node{Metadata: m, Spec: &corev1.NodeSpec{Taints: taints}}
}

func TestBootstrapPolicy(t *testing.T) {
	r := NewRBAC(nil)
	bp := BootstrapPolicy()
	// Through the proto types, as the apiserver stores and then watches them.
	roles, bindings, err := BootstrapObjects()
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := BootstrapMessages()
	if want := len(roles) + len(bindings) + len(bp.Roles) + len(bp.RoleBindings); err != nil || len(msgs) != want {
		t.Fatalf("BootstrapMessages: got %d objects, %v; want %d", len(msgs), err, want)
	}
	if len(roles) != len(bp.ClusterRoles) || len(bindings) != len(bp.ClusterRoleBindings) {
		t.Fatalf("got %d roles and %d bindings, want %d and %d", len(roles), len(bindings), len(bp.ClusterRoles), len(bp.ClusterRoleBindings))
	}
	for i, p := range roles {
		if cr := bp.ClusterRoles[i]; p.GetMetadata().GetName() != cr.Name || len(p.GetRules()) != len(cr.Rules) {
			t.Fatalf("ClusterRole %s: got %v", cr.Name, p)
		}
		if err := r.Put(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range bindings {
		if err := r.Put(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range msgs[len(roles)+len(bindings):] {
		r.Upsert(m)
	}
	// A namespace admin, editor and viewer through RoleBindings of the
	// bootstrap cluster roles.
	for role, user := range map[string]string{"admin": "ann", "edit": "ed", "view": "vi"} {
		r.Upsert(&rbacv1.RoleBinding{Metadata: meta("team", role+"-binding"),
			Subjects: []*rbacv1.Subject{{Kind: "User", Name: user}},
			RoleRef:  &rbacv1.RoleRef{Kind: "ClusterRole", Name: role}})
	}
	sched := request.User{Name: SchedulerUser, Groups: ss(request.AuthenticatedGroup)}
	kcm := request.User{Name: ControllerManagerUser, Groups: ss(request.AuthenticatedGroup)}
	tests := []struct {
		name string
		a    request.Attributes
		want bool
	}{
		{name: "masters via cluster-admin", a: request.Attributes{User: request.User{Name: "x", Groups: ss(request.MastersGroup)}, Verb: "delete", Resource: "nodes", Name: "n"}, want: true},
		{name: "scheduler binds pods", a: request.Attributes{User: sched, Verb: "create", Resource: "pods", Subresource: "binding", Namespace: "default", Name: "web"}, want: true},
		{name: "scheduler watches nodes", a: request.Attributes{User: sched, Verb: "watch", Resource: "nodes"}, want: true},
		{name: "scheduler renews its lease", a: request.Attributes{User: sched, Verb: "update", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-scheduler"}, want: true},
		{name: "scheduler watches CSIStorageCapacities", a: request.Attributes{User: sched, Verb: "watch", APIGroup: "storage.k8s.io", Resource: "csistoragecapacities"}, want: true},
		{name: "scheduler lists PDBs", a: request.Attributes{User: sched, Verb: "list", APIGroup: "policy", Resource: "poddisruptionbudgets"}, want: true},
		{name: "scheduler reads the authentication ConfigMap", a: request.Attributes{User: sched, Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "extension-apiserver-authentication"}, want: true},
		{name: "controller manager reads the authentication ConfigMap", a: request.Attributes{User: kcm, Verb: "watch", Resource: "configmaps", Namespace: "kube-system", Name: "extension-apiserver-authentication"}, want: true},
		{name: "scheduler may not read other ConfigMaps", a: request.Attributes{User: sched, Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "other"}},
		{name: "scheduler may not create deployments", a: request.Attributes{User: sched, Verb: "create", APIGroup: "apps", Resource: "deployments", Namespace: "default"}},
		{name: "controller manager creates replicasets", a: request.Attributes{User: kcm, Verb: "create", APIGroup: "apps", Resource: "replicasets", Namespace: "default"}, want: true},
		{name: "controller manager updates deployment status", a: request.Attributes{User: kcm, Verb: "update", APIGroup: "apps", Resource: "deployments", Subresource: "status", Namespace: "default", Name: "web"}, want: true},
		{name: "controller manager lists everything", a: request.Attributes{User: kcm, Verb: "list", Resource: "secrets"}, want: true},
		{name: "controller manager may not bind pods", a: request.Attributes{User: kcm, Verb: "create", Resource: "pods", Subresource: "binding", Namespace: "default", Name: "web"}},
		{name: "admin manages rolebindings", a: request.Attributes{User: request.User{Name: "ann"}, Verb: "create", APIGroup: "rbac.authorization.k8s.io", Resource: "rolebindings", Namespace: "team"}, want: true},
		{name: "edit creates deployments", a: request.Attributes{User: request.User{Name: "ed"}, Verb: "create", APIGroup: "apps", Resource: "deployments", Namespace: "team"}, want: true},
		{name: "edit may not manage rolebindings", a: request.Attributes{User: request.User{Name: "ed"}, Verb: "create", APIGroup: "rbac.authorization.k8s.io", Resource: "rolebindings", Namespace: "team"}},
		{name: "view reads pods", a: request.Attributes{User: request.User{Name: "vi"}, Verb: "list", Resource: "pods", Namespace: "team"}, want: true},
		{name: "view may not read secrets", a: request.Attributes{User: request.User{Name: "vi"}, Verb: "get", Resource: "secrets", Namespace: "team", Name: "s"}},
		{name: "view may not create pods", a: request.Attributes{User: request.User{Name: "vi"}, Verb: "create", Resource: "pods", Namespace: "team"}},
		{name: "view is only in its namespace", a: request.Attributes{User: request.User{Name: "vi"}, Verb: "list", Resource: "pods", Namespace: "default"}},
		{name: "edit evicts pods", a: request.Attributes{User: request.User{Name: "ed"}, Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "team", Name: "web"}, want: true},
		{name: "admin evicts pods", a: request.Attributes{User: request.User{Name: "ann"}, Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "team", Name: "web"}, want: true},
		{name: "view may not evict pods", a: request.Attributes{User: request.User{Name: "vi"}, Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "team", Name: "web"}},
		{name: "edit creates budgets", a: request.Attributes{User: request.User{Name: "ed"}, Verb: "create", APIGroup: "policy", Resource: "poddisruptionbudgets", Namespace: "team"}, want: true},
		{name: "view reads budgets' status", a: request.Attributes{User: request.User{Name: "vi"}, Verb: "get", APIGroup: "policy", Resource: "poddisruptionbudgets", Subresource: "status", Namespace: "team", Name: "web"}, want: true},
		{name: "view may not write budgets", a: request.Attributes{User: request.User{Name: "vi"}, Verb: "update", APIGroup: "policy", Resource: "poddisruptionbudgets", Namespace: "team", Name: "web"}},
		{name: "controller manager writes budgets' status", a: request.Attributes{User: kcm, Verb: "update", APIGroup: "policy", Resource: "poddisruptionbudgets", Subresource: "status", Namespace: "default", Name: "web"}, want: true},
		{name: "controller manager writes CRD status", a: request.Attributes{User: kcm, Verb: "update", APIGroup: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Subresource: "status", Name: "widgets.example.com"}, want: true},
		{name: "controller manager removes a CRD's finalizer", a: request.Attributes{User: kcm, Verb: "update", APIGroup: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Name: "widgets.example.com"}, want: true},
		// As Kubernetes' generic-garbage-collector: any object may be
		// updated (owner references, finalizers) and deleted.
		{name: "controller manager deletes custom objects", a: request.Attributes{User: kcm, Verb: "delete", APIGroup: "example.com", Resource: "widgets", Namespace: "default", Name: "w"}, want: true},
		{name: "controller manager updates secrets", a: request.Attributes{User: kcm, Verb: "update", Resource: "secrets", Namespace: "default", Name: "s"}, want: true},
		{name: "controller manager may not create CRDs", a: request.Attributes{User: kcm, Verb: "create", APIGroup: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}},
		{name: "controller manager may not create cluster role bindings", a: request.Attributes{User: kcm, Verb: "create", APIGroup: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}},
		{name: "edit may not create CRDs", a: request.Attributes{User: request.User{Name: "ed"}, Verb: "create", APIGroup: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}},
		{name: "proxy watches endpointslices", a: request.Attributes{User: request.User{Name: ProxyUser}, Verb: "watch", APIGroup: "discovery.k8s.io", Resource: "endpointslices"}, want: true},
		{name: "proxy reads nodes", a: request.Attributes{User: request.User{Name: ProxyUser}, Verb: "get", Resource: "nodes", Name: "n1"}, want: true},
		{name: "proxy records events", a: request.Attributes{User: request.User{Name: ProxyUser}, Verb: "create", Resource: "events", Namespace: "default"}, want: true},
		{name: "kube-proxy's own user lists services", a: request.Attributes{User: request.User{Name: "system:kube-proxy"}, Verb: "list", Resource: "services"}, want: true},
		{name: "proxy may not read secrets", a: request.Attributes{User: request.User{Name: ProxyUser}, Verb: "list", Resource: "secrets"}},
		{name: "proxy may not write services", a: request.Attributes{User: request.User{Name: ProxyUser}, Verb: "update", Resource: "services", Namespace: "default", Name: "s"}},
		{name: "system:node role is bound to nobody", a: request.Attributes{User: request.User{Name: "system:node:n1", Groups: ss(request.NodesGroup)}, Verb: "list", Resource: "pods"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := r.Authorize(context.Background(), tt.a)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tt.want {
				t.Errorf("got allowed=%v (%q), want %v", d.Allowed, d.Reason, tt.want)
			}
		})
	}
}

func TestClusterRoleAggregation(t *testing.T) {
	r := NewRBAC(nil)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"rbac.example.com/aggregate-to-monitoring": "true"}}
	r.Upsert(&rbacv1.ClusterRole{Metadata: meta("", "monitoring"), AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []*metav1.LabelSelector{sel}}})
	r.Upsert(&rbacv1.ClusterRoleBinding{Metadata: meta("", "mon"), Subjects: []*rbacv1.Subject{{Kind: "User", Name: "mon"}},
		RoleRef: &rbacv1.RoleRef{Kind: "ClusterRole", Name: "monitoring"}})
	part := &rbacv1.ClusterRole{Metadata: meta("", "pod-metrics"), Rules: []*rbacv1.PolicyRule{pr(ss("get", "list"), ss(""), ss("pods"))}}
	part.Metadata.Labels = map[string]string{"rbac.example.com/aggregate-to-monitoring": "true"}
	a := request.Attributes{User: request.User{Name: "mon"}, Verb: "list", Resource: "pods"}
	allowed := func() bool {
		d, err := r.Authorize(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	steps := []struct {
		name string
		do   func()
		want bool
	}{
		{name: "no matching role yet", do: func() {}},
		{name: "a labelled role joins the aggregate", do: func() { r.Upsert(part) }, want: true},
		{name: "the label removed", do: func() {
			p := proto.Clone(part).(*rbacv1.ClusterRole)
			p.Metadata.Labels = nil
			r.Upsert(p)
		}},
		{name: "labelled again", do: func() { r.Upsert(part) }, want: true},
		{name: "the labelled role deleted", do: func() { r.Delete(part) }},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.do()
			if got := allowed(); got != st.want {
				t.Errorf("got allowed=%v, want %v", got, st.want)
			}
		})
	}
}

// TestNonResourceURLs: RBAC matches non-resource requests against
// nonResourceURLs ("*" suffix as a prefix match) with the bootstrap
// discovery and public-info roles.
func TestNonResourceURLs(t *testing.T) {
	r := NewRBAC(nil)
	msgs, err := BootstrapMessages()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		r.Upsert(m)
	}
	authed := request.User{Name: "bob", Groups: ss(request.AuthenticatedGroup)}
	anon := request.User{Name: request.AnonymousUser, Groups: ss(request.UnauthenticatedGroup)}
	for _, tc := range []struct {
		name string
		a    request.Attributes
		want bool
	}{
		{name: "discovery root", a: request.Attributes{User: authed, Verb: "get", Path: "/apis"}, want: true},
		{name: "prefix /apis/*", a: request.Attributes{User: authed, Verb: "get", Path: "/apis/apps/v1"}, want: true},
		{name: "exact /version", a: request.Attributes{User: authed, Verb: "get", Path: "/version"}, want: true},
		{name: "not listed", a: request.Attributes{User: authed, Verb: "get", Path: "/metrics"}},
		{name: "verb not granted", a: request.Attributes{User: authed, Verb: "post", Path: "/healthz"}},
		{name: "anonymous: public info", a: request.Attributes{User: anon, Verb: "get", Path: "/healthz"}, want: true},
		{name: "anonymous: no discovery", a: request.Attributes{User: anon, Verb: "get", Path: "/apis"}},
		{name: "resource rule does not cover a path", a: request.Attributes{User: authed, Verb: "create", Path: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := r.Authorize(context.Background(), tc.a)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tc.want {
				t.Errorf("got allowed=%v (%q), want %v", d.Allowed, d.Reason, tc.want)
			}
		})
	}
	if !nonResourceURLMatches(ss("*"), "/anything") || nonResourceURLMatches(ss("/api"), "/apis") || !nonResourceURLMatches(ss("/api*"), "/apis") {
		t.Error("nonResourceURLMatches: wrong on *, exact or prefix")
	}
}
