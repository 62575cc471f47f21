// This file holds the NodeRestriction admission plugin: what a node agent may
// write, checked against the objects themselves.

package authz

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	corev1k8s "k8s.io/api/core/v1"
	kubeletapis "k8s.io/kubelet/pkg/apis"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// NodeRestriction is Kubernetes' NodeRestriction validating admission plugin,
// for what the Node authorizer cannot check without the objects: a node
// agent may only write its own Node and Lease, the status of pods bound to
// it, delete only pods bound to it, and never bind pods. On its own Node it
// may not change its taints after registering, nor set, change or remove
// labels that steer workloads: the node-restriction.kubernetes.io/ ones and
// every kubernetes.io or k8s.io label outside the set a kubelet sets itself
// (hostname, os, arch, instance type, zone and region, and the
// kubelet.kubernetes.io/ and node.kubernetes.io/ namespaces). Requests from
// other users pass untouched.
type NodeRestriction struct{}

// NewNodeRestriction returns the plugin.
func NewNodeRestriction() *NodeRestriction { return &NodeRestriction{} }

// Validate refuses with Forbidden what a node may not do. Object (create,
// update) and OldObject (update, delete) are kplane's proto messages; a pod's
// binding is read from OldObject's spec.nodeName.
func (NodeRestriction) Validate(_ context.Context, a *request.Admission) error {
	node, ok := NodeName(a.User)
	if !ok {
		return nil
	}
	name := a.Name
	if name == "" {
		name = stringField(a.Object, "metadata", "name")
	}
	forbid := func(format string, args ...any) error {
		return apierrors.NewForbidden(a.APIGroup, a.Resource, name, fmt.Sprintf(format, args...))
	}
	switch {
	case a.APIGroup == "" && a.Resource == "nodes":
		if name != node {
			return forbid("node %q is not allowed to modify node %q", node, name)
		}
		if a.Operation == request.Delete {
			return forbid("node %q is not allowed to delete nodes", node)
		}
		return admitOwnNode(node, a, forbid)
	case a.APIGroup == "coordination.k8s.io" && a.Resource == "leases":
		if a.Namespace != NodeLeaseNamespace || name != node {
			return forbid("node %q can only access node lease with the same name as the requesting node", node)
		}
	case a.APIGroup == "" && a.Resource == "pods":
		switch {
		case a.Subresource == "binding":
			return forbid("node %q is not allowed to bind pods", node)
		case a.Subresource == "status":
			if bound := stringField(a.OldObject, "spec", "nodeName"); bound != node {
				return forbid("node %q can only update pod status for pods with spec.nodeName set to itself", node)
			}
		case a.Subresource == "" && a.Operation == request.Delete:
			if bound := stringField(a.OldObject, "spec", "nodeName"); bound != node {
				return forbid("node %q can only delete pods with spec.nodeName set to itself", node)
			}
		case a.Subresource == "" && a.Operation == request.Create:
			return forbid("node %q is not allowed to create pods", node)
		case a.Subresource == "" && a.Operation == request.Update:
			return forbid("node %q is not allowed to update pods", node)
		}
	}
	return nil
}

// admitOwnNode checks a node's write of its own Node object: on create, the
// labels it registers with; on update (the object or its status), that its
// taints stay as they are and it changes no restricted label. The messages
// are Kubernetes' own.
func admitOwnNode(node string, a *request.Admission, forbid func(string, ...any) error) error {
	switch a.Operation {
	case request.Create:
		n, _ := a.Object.(*corev1.Node)
		if bad := forbiddenNodeLabels(modifiedLabels(n.GetMetadata().GetLabels(), nil)); len(bad) > 0 {
			return forbid("node %q is not allowed to set the following labels: %s", node, strings.Join(bad, ", "))
		}
	case request.Update:
		n, _ := a.Object.(*corev1.Node)
		old, _ := a.OldObject.(*corev1.Node)
		if n == nil || old == nil {
			return nil
		}
		if !taintsEqual(n.GetSpec().GetTaints(), old.GetSpec().GetTaints()) {
			return forbid("node %q is not allowed to modify taints", node)
		}
		if bad := forbiddenNodeLabels(modifiedLabels(n.GetMetadata().GetLabels(), old.GetMetadata().GetLabels())); len(bad) > 0 {
			return forbid("is not allowed to modify labels: %s", strings.Join(bad, ", "))
		}
	}
	return nil
}

// modifiedLabels returns, sorted, the keys whose presence or value differs
// between a and b.
func modifiedLabels(a, b map[string]string) []string {
	var keys []string
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// forbiddenNodeLabels returns the keys a node may not add, change or remove
// on itself: those in the node-restriction.kubernetes.io namespace (or a
// subdomain of it), and those in a kubernetes.io or k8s.io namespace that
// are not kubelet labels.
func forbiddenNodeLabels(keys []string) []string {
	var bad []string
	for _, k := range keys {
		ns, _, ok := strings.Cut(k, "/")
		if !ok {
			continue
		}
		switch {
		case ns == corev1k8s.LabelNamespaceNodeRestriction || strings.HasSuffix(ns, "."+corev1k8s.LabelNamespaceNodeRestriction):
			bad = append(bad, k)
		case isKubernetesNamespace(ns) && !kubeletapis.IsKubeletLabel(k):
			bad = append(bad, k)
		}
	}
	return bad
}

func isKubernetesNamespace(ns string) bool {
	return ns == "kubernetes.io" || strings.HasSuffix(ns, ".kubernetes.io") ||
		ns == "k8s.io" || strings.HasSuffix(ns, ".k8s.io")
}

func taintsEqual(a, b []*corev1.Taint) bool {
	return slices.EqualFunc(a, b, func(x, y *corev1.Taint) bool { return proto.Equal(x, y) })
}

// stringField follows path (JSON or proto field names) through nested
// messages of m and returns the string at its end, or "" if any step is
// missing. It reads kplane's objects without depending on their Go types.
func stringField(m proto.Message, path ...string) string {
	if m == nil {
		return ""
	}
	msg := m.ProtoReflect()
	if !msg.IsValid() {
		return ""
	}
	for i, p := range path {
		fd := fieldByName(msg.Descriptor(), p)
		if fd == nil || fd.IsList() || fd.IsMap() {
			return ""
		}
		if i == len(path)-1 {
			if fd.Kind() != protoreflect.StringKind {
				return ""
			}
			return msg.Get(fd).String()
		}
		if fd.Message() == nil || !msg.Has(fd) {
			return ""
		}
		msg = msg.Get(fd).Message()
	}
	return ""
}

func fieldByName(d protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	if fd := d.Fields().ByJSONName(name); fd != nil {
		return fd
	}
	return d.Fields().ByName(protoreflect.Name(name))
}
