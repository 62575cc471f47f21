// This file holds the interfaces the API service is assembled from:
// authenticator, authorizer and rule resolver, mutating and validating
// admission, auditor, and the sinks fed by its watches.

package apiserver

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/kplane/kplane/services/apiserver/audit"
	"github.com/kplane/kplane/services/apiserver/request"
)

// The stages of the write path, as interfaces. Each request walks them in
// this order: Authenticator → Authorizer → MutatingAdmission (built-in
// defaults, then webhooks) → validation (built in: RBAC escalation
// prevention for rbac objects, then the schema) → ValidatingAdmission
// (NamespaceLifecycle built in, then NodeRestriction and webhooks) → the
// store Txn. Reads stop after the Authorizer. Every error returned by a stage
// should be an *apierrors.StatusError; the service prefixes nothing and
// converts it to a gRPC status once, at the handler edge. Any other error is
// reported as InternalError.

// Authenticator finds who is calling from a gRPC request's context (the
// peer's verified TLS client certificate via google.golang.org/grpc/peer,
// `authorization: Bearer ...` metadata via google.golang.org/grpc/metadata).
// It returns apierrors.NewUnauthorized when the credentials are missing (and
// anonymous access is disabled) or invalid. The returned user carries every
// group, including system:authenticated.
type Authenticator interface {
	Authenticate(ctx context.Context) (request.User, error)
}

// Authorizer decides whether a.User may do a. A refusal is Decision{Allowed:
// false, Reason: ...}, not an error; the service turns it into Forbidden with
// Kubernetes' wording. An error means the authorizer could not decide (the
// request fails with InternalError).
type Authorizer interface {
	Authorize(ctx context.Context, a request.Attributes) (request.Decision, error)
}

// RuleResolver, when the Authorizer implements it too, lists the rules that
// apply to a user in a namespace (SelfSubjectRulesReview, `kubectl auth
// can-i --list`); incomplete says some of what the authorizer allows cannot
// be listed as rules. authz.Union, RBAC and Node implement it.
type RuleResolver interface {
	RulesFor(ctx context.Context, u request.User, namespace string) (rules []rbacv1.PolicyRule, incomplete bool, err error)
}

// MutatingAdmission may change a.Object in place (a *corev1.Pod, ... — the
// generated proto types under proto/kplane). On Create a.Object has no
// resourceVersion yet; on Update a.OldObject is the stored object; on Delete
// a.Object is nil and a.OldObject the stored object. When a.DryRun is set the
// plugin must have no side effects. A denial is an error, normally
// apierrors.NewForbidden or NewInvalid, whose message names the plugin.
type MutatingAdmission interface {
	Admit(ctx context.Context, a *request.Admission) error
}

// ValidatingAdmission accepts or refuses a write after validation; it must
// not change a.Object. The same conventions as MutatingAdmission apply.
type ValidatingAdmission interface {
	Validate(ctx context.Context, a *request.Admission) error
}

// Auditor records one event per request that reached authentication, after
// the response is known (*audit.Logger implements it). The service fills the
// event: audit ID (also sent as the gRPC header "audit-id"), user, verb,
// object, stage timings ("authn", "authz", "admission.mutate", "validate",
// "admission.validate", "store") and response status.
type Auditor interface {
	Log(e *audit.Event) error
}

// ObjectSink receives the objects of a resource as the service's own watch
// sees them: Upsert on ADDED/MODIFIED, Delete on DELETED, both with the
// current object. Caches that must follow the store (RBAC, webhook
// configurations) implement it; the service registers them with
// Config.Informers and feeds them from the watch multiplexer, after an
// initial list, in resourceVersion order. Calls for one sink never overlap.
type ObjectSink interface {
	Upsert(obj any)
	Delete(obj any)
}
