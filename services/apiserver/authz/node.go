// This file holds the Node authorizer: what a node agent may read and write,
// as Kubernetes' node authorizer allows it: its Node and Lease, its pods'
// status, events, and the Secrets and ConfigMaps its pods use.

package authz

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/kplane/kplane/services/apiserver/request"
)

// NodeLeaseNamespace is where node agents keep their heartbeat Leases.
const NodeLeaseNamespace = "kube-node-lease"

// NodeName returns the node a user is the agent of: "n1" for user
// system:node:n1 in group system:nodes. ok is false for any other user.
func NodeName(u request.User) (name string, ok bool) {
	if !strings.HasPrefix(u.Name, request.NodeUserPrefix) || !slices.Contains(u.Groups, request.NodesGroup) {
		return "", false
	}
	name = strings.TrimPrefix(u.Name, request.NodeUserPrefix)
	return name, name != ""
}

// NodeConfig configures the Node authorizer.
type NodeConfig struct {
	// RelatedToNode, if set, reports whether the named configmap or secret is
	// used by a pod bound to node; reads of other configmaps and secrets are
	// then denied. When nil, a node may read any one configmap or secret (a
	// simplification of Kubernetes' object graph: read-only, by name only —
	// a get, or a list or watch of the one object a metadata.name field
	// selector names; never a whole namespace).
	RelatedToNode func(ctx context.Context, node, resource, namespace, name string) (bool, error)
}

// Node is Kubernetes' Node authorizer, simplified: it allows a node agent
// (system:node:<name> in system:nodes) what running its pods takes, and has
// no opinion on anything else (nor on other users), so RBAC decides those.
//
// What it allows a node n:
//   - get, list, watch: pods, nodes, services, endpoints (core) and
//     endpointslices (discovery.k8s.io);
//   - get, and list or watch of the one object a metadata.name=NAME field
//     selector names: configmaps and secrets its pods use (the node agent
//     keeps a watch on each, as the kubelet does);
//   - get: persistentvolumeclaims its pods use, and the persistentvolumes
//     those claims are bound to (see NodeConfig.RelatedToNode);
//   - create serviceaccounts/token for a ServiceAccount a pod bound to the
//     node runs as (see NodeConfig.RelatedToNode; the API service then
//     requires the token to be bound to such a pod, as NodeRestriction);
//   - create, get, update, patch: its own Node, and update/patch its
//     nodes/status; it may not delete Nodes;
//   - get, create, update, patch, delete: its own Lease in kube-node-lease;
//   - create, update, patch: events (core and events.k8s.io);
//   - update, patch pods/status and delete pods (the graceful deletion
//     confirmation) — which pods is NodeRestriction's job, since it needs the
//     stored object.
//
// A create whose Attributes carry no name (the name is in the object) is
// allowed for nodes and for leases in kube-node-lease; NodeRestriction, which
// sees the object, then refuses any name but the node's own. The pair must be
// installed together.
type Node struct {
	cfg NodeConfig
}

var _ Authorizer = (*Node)(nil)

// NewNode returns the Node authorizer.
func NewNode(cfg NodeConfig) *Node { return &Node{cfg: cfg} }

var readVerbs = []string{"get", "list", "watch"}

// Authorize implements Authorizer.
func (n *Node) Authorize(ctx context.Context, a request.Attributes) (request.Decision, error) {
	node, ok := NodeName(a.User)
	if !ok {
		return request.Decision{}, nil
	}
	allow := request.Decision{Allowed: true, Reason: "Node authorizer"}
	deny := func(format string, args ...any) (request.Decision, error) {
		return request.Decision{Reason: fmt.Sprintf(format, args...)}, nil
	}
	v := a.Verb
	switch {
	case a.APIGroup == "" && a.Subresource == "" && slices.Contains(readVerbs, v) &&
		slices.Contains([]string{"pods", "nodes", "services", "endpoints"}, a.Resource):
		return allow, nil
	case a.APIGroup == "discovery.k8s.io" && a.Resource == "endpointslices" && a.Subresource == "" && slices.Contains(readVerbs, v):
		return allow, nil

	case a.APIGroup == "" && (a.Resource == "configmaps" || a.Resource == "secrets"):
		// As Kubernetes' authorizer: get, and a list or watch of one object
		// (the API service names it from a metadata.name=NAME field
		// selector), which is how the node agent watches what its pods use.
		switch {
		case !slices.Contains(readVerbs, v):
			return deny("can only read resources of this type")
		case a.Subresource != "":
			return deny("cannot read subresource")
		case a.Namespace == "":
			return deny("can only read namespaced object of this type")
		case a.Name == "":
			return deny("No Object name found")
		}
		return n.related(ctx, node, a)

	case a.APIGroup == "" && (a.Resource == "persistentvolumeclaims" || a.Resource == "persistentvolumes") && a.Subresource == "":
		if v != "get" {
			return deny("node %q may only get individual %s", node, a.Resource)
		}
		if n.cfg.RelatedToNode == nil {
			return allow, nil
		}
		related, err := n.cfg.RelatedToNode(ctx, node, a.Resource, a.Namespace, a.Name)
		if err != nil {
			return request.Decision{}, fmt.Errorf("authz: node %q: relation to %s %s/%s: %w", node, a.Resource, a.Namespace, a.Name, err)
		}
		if !related {
			return deny("no relationship found between node '%s' and this object", node)
		}
		return allow, nil

	case a.APIGroup == "" && a.Resource == "serviceaccounts":
		if v != "create" || a.Name == "" {
			return deny("can only create tokens for individual service accounts")
		}
		if a.Subresource != "token" {
			return deny("can only create token subresource of serviceaccount")
		}
		if n.cfg.RelatedToNode == nil {
			return allow, nil
		}
		related, err := n.cfg.RelatedToNode(ctx, node, a.Resource, a.Namespace, a.Name)
		if err != nil {
			return request.Decision{}, fmt.Errorf("authz: node %q: relation to serviceaccount %s/%s: %w", node, a.Namespace, a.Name, err)
		}
		if !related {
			return deny("no relationship found between node '%s' and this object", node)
		}
		return allow, nil

	case a.APIGroup == "" && a.Resource == "nodes":
		if v == "create" && a.Name == "" && a.Subresource == "" {
			// The name is in the object: NodeRestriction checks it.
			return allow, nil
		}
		if a.Name != node {
			return deny("node '%s' cannot modify node '%s'", node, a.Name)
		}
		switch {
		case a.Subresource == "" && slices.Contains([]string{"create", "update", "patch"}, v):
			return allow, nil
		case a.Subresource == "status" && slices.Contains([]string{"get", "update", "patch"}, v):
			return allow, nil
		}
		return request.Decision{}, nil

	case a.APIGroup == "coordination.k8s.io" && a.Resource == "leases" && a.Subresource == "":
		if v == "create" && a.Name == "" && a.Namespace == NodeLeaseNamespace {
			// The name is in the object: NodeRestriction checks it.
			return allow, nil
		}
		if a.Namespace != NodeLeaseNamespace || a.Name != node {
			return deny("node '%s' can only access its own lease %s/%s", node, NodeLeaseNamespace, node)
		}
		if slices.Contains([]string{"get", "create", "update", "patch", "delete"}, v) {
			return allow, nil
		}
		return request.Decision{}, nil

	case (a.APIGroup == "" || a.APIGroup == "events.k8s.io") && a.Resource == "events" && a.Subresource == "":
		if slices.Contains([]string{"create", "update", "patch"}, v) {
			return allow, nil
		}
		return request.Decision{}, nil

	case a.APIGroup == "" && a.Resource == "pods" && a.Subresource == "status" && (v == "update" || v == "patch"):
		return allow, nil
	case a.APIGroup == "" && a.Resource == "pods" && a.Subresource == "" && v == "delete":
		return allow, nil
	}
	return request.Decision{}, nil
}

// related allows a read of a named object a pod bound to node uses (any,
// without NodeConfig.RelatedToNode).
func (n *Node) related(ctx context.Context, node string, a request.Attributes) (request.Decision, error) {
	if n.cfg.RelatedToNode == nil {
		return request.Decision{Allowed: true, Reason: "Node authorizer"}, nil
	}
	ok, err := n.cfg.RelatedToNode(ctx, node, a.Resource, a.Namespace, a.Name)
	if err != nil {
		return request.Decision{}, fmt.Errorf("authz: node %q: relation to %s %s/%s: %w", node, a.Resource, a.Namespace, a.Name, err)
	}
	if !ok {
		return request.Decision{Reason: fmt.Sprintf("no relationship found between node '%s' and this object", node)}, nil
	}
	return request.Decision{Allowed: true, Reason: "Node authorizer"}, nil
}
