package authz

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/services/apiserver/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// NodeRestriction is Kubernetes' NodeRestriction validating admission plugin,
// for what the Node authorizer cannot check without the objects: a node
// agent may only write its own Node and Lease, the status of pods bound to
// it, delete only pods bound to it, and never bind pods. Requests from other
// users pass untouched.
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
