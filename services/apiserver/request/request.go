// Package request holds what the API service knows about one request once it
// has been authenticated: who is asking (User) and what they ask to do
// (Attributes). The authenticators, the authorizers, admission and the audit
// log all speak in these terms, so they live in this small package that
// depends on nothing else in kplane but the wire contract's identity.
package request

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/identity"
)

// User is an authenticated identity: from a TLS client certificate (CN is
// the name, each O a group) or from a bearer token. It is the wire
// contract's identity.User, which a front proxy passes on.
type User = identity.User

// Well-known names, as in Kubernetes.
const (
	// AnonymousUser is the name given to a request with no credentials when
	// anonymous access is enabled.
	AnonymousUser = "system:anonymous"
	// UnauthenticatedGroup is the group of the anonymous user.
	UnauthenticatedGroup = "system:unauthenticated"
	// AuthenticatedGroup is added to every authenticated user.
	AuthenticatedGroup = "system:authenticated"
	// NodesGroup is the group of every node agent's identity.
	NodesGroup = "system:nodes"
	// NodeUserPrefix prefixes a node agent's user name: system:node:<node>.
	NodeUserPrefix = "system:node:"
	// MastersGroup is the group that RBAC lets do anything.
	MastersGroup = "system:masters"
)

// Attributes describe one request for authorization and audit, in the terms
// of Kubernetes' RBAC: a verb on a resource (and subresource) in an API group,
// optionally in a namespace and for one named object.
type Attributes struct {
	User        User
	Verb        string // get, list, watch, create, update, patch, delete, deletecollection
	APIGroup    string // "" for core
	APIVersion  string
	Resource    string // plural, lower case: pods, deployments
	Subresource string // status, binding, scale, log
	Namespace   string
	Name        string
	// Path is the URL path of a non-resource request ("/healthz",
	// "/apis/apps"), which has no Resource; RBAC matches it against
	// nonResourceURLs.
	Path string
}

type userKey struct{}

// WithUser returns a context carrying u.
func WithUser(ctx context.Context, u User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the user carried by ctx, if any.
func UserFrom(ctx context.Context) (User, bool) {
	u, ok := ctx.Value(userKey{}).(User)
	return u, ok
}

// Decision is an authorizer's answer. Reason says why, in words a user can
// act on; it is carried into the Forbidden message and the audit log.
type Decision struct {
	Allowed bool
	Reason  string
}

// Operation is what a write does to an object, as admission sees it.
type Operation string

// The operations admission sees, named as in Kubernetes' AdmissionReview.
const (
	Create  Operation = "CREATE"
	Update  Operation = "UPDATE"
	Delete  Operation = "DELETE"
	Connect Operation = "CONNECT"
)

// Admission is what the admission stages of the write path are given: the
// request's attributes and the object being written. Mutating stages may
// change Object in place; validating stages must not. OldObject is the stored
// object on Update and Delete. Objects are kplane's proto messages.
type Admission struct {
	Attributes
	Operation Operation
	Object    proto.Message
	OldObject proto.Message
	DryRun    bool
}
