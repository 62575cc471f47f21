// This file holds the request path every resource method walks:
// authentication, authorization, admission, validation and the store, timed
// and audited per stage. The verbs on it are in reads.go, writes.go,
// subresources.go and deletes.go.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/codes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/proto/apierrors"
	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	certificatesv1 "github.com/kplane/kplane/proto/kplane/certificates/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/audit"
	"github.com/kplane/kplane/services/apiserver/authz"
	"github.com/kplane/kplane/services/apiserver/request"
)

// Names of the write path's stages, used in audit timings, in the
// "kplane-denied-by" response trailer and (later) as trace span names.
const (
	stageAuthn            = "authn"
	stageAuthz            = "authz"
	stageMutate           = "admission.mutate"
	stageValidate         = "validate"
	stageAdmitValidate    = "admission.validate"
	stageStore            = "store"
	deniedByTrailer       = "kplane-denied-by"
	auditIDHeader         = "audit-id"
	maxGuaranteedAttempts = 16
)

// call is the state of one request as it walks the stages.
type call struct {
	ev    *audit.Event
	attrs request.Attributes
	// decision is the audit Policy's, once decided (auditing.go); idSent:
	// the audit-id header is set.
	decision audit.Decision
	decided  bool
	idSent   bool
}

// begin starts a request: an audit ID (returned as the audit-id header)
// and the attributes it will be authorized and audited with.
func (s *Server) begin(ctx context.Context, verb string, r *resourceInfo, sub, ns, name string) *call {
	id := audit.NewID()
	c := &call{ev: audit.NewEvent(id, time.Now()), attrs: request.Attributes{
		Verb: verb, APIGroup: r.Group, APIVersion: r.Version, Resource: r.Resource,
		Subresource: sub, Namespace: ns, Name: name,
	}}
	if method, ok := grpc.Method(ctx); ok {
		c.ev.RequestURI = method
	}
	return c
}

// end records the outcome in the audit log (only for requests that got as
// far as authentication).
func (s *Server) end(ctx context.Context, c *call, err error) {
	if err != nil {
		s.log.Debug("request failed", "verb", c.attrs.Verb, "resource", c.attrs.Resource, "name", c.attrs.Name, "err", err)
	}
	s.auditEnd(ctx, c, err)
}

// stage runs one stage of the write path, times it, and on failure names
// the stage in the response trailer.
// Each stage is a span named after it (the store stage: store.Txn), a
// child of the request's span; f gets the span's context.
func (s *Server) stage(ctx context.Context, c *call, name string, f func(context.Context) error) error {
	start := time.Now()
	spanName := name
	if name == stageStore {
		spanName = "store.Txn"
	}
	sctx, span := s.tracer.Start(ctx, spanName)
	err := f(sctx)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	c.ev.Timed(name, start)
	if err != nil {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(deniedByTrailer, name))
		s.log.Debug("denied", "stage", name, "err", err)
	}
	return err
}

// plugin runs one built-in admission plugin; when it applies to the
// request, in a span of its own named after it (admission.Priority, ...),
// and a refusal is logged with the plugin's name.
func (s *Server) plugin(ctx context.Context, name string, applies bool, f func(context.Context) error) error {
	if !applies {
		return f(ctx)
	}
	ctx, span := s.tracer.Start(ctx, "admission."+name)
	defer span.End()
	err := f(ctx)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		s.log.Debug("denied", "plugin", name, "err", err)
	}
	return err
}

// authenticate is stage 1: who is calling.
func (s *Server) authenticate(ctx context.Context, c *call) error {
	return s.stage(ctx, c, stageAuthn, func(ctx context.Context) error {
		u, err := s.authenticatedUser(ctx)
		if err != nil {
			var se *apierrors.StatusError
			if !errors.As(err, &se) {
				return apierrors.NewUnauthorized(err.Error())
			}
			return err
		}
		c.ev.SetUser(u)
		s.auditAuthenticated(ctx, c, u)
		as, impersonating, err := s.impersonatedUser(ctx, u)
		if err != nil {
			return err
		}
		if impersonating {
			c.ev.SetImpersonatedUser(as)
		}
		c.attrs.User = as
		return nil
	})
}

// authorize is stage 2: may they do it.
func (s *Server) authorize(ctx context.Context, c *call) error {
	return s.stage(ctx, c, stageAuthz, func(ctx context.Context) error {
		d, err := s.cfg.Authorizer.Authorize(ctx, c.attrs)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("authorizer: %w", err))
		}
		if d.Allowed {
			return nil
		}
		why := d.Reason
		if why == "" {
			why = forbiddenReason(c.attrs)
		}
		// Kubernetes names the resource without its subresource here
		// (`pods "p" is forbidden: ... resource "pods/exec"`).
		return apierrors.NewForbidden(c.attrs.APIGroup, c.attrs.Resource, c.attrs.Name, why)
	})
}

// forbiddenReason words a refusal as Kubernetes does.
func forbiddenReason(a request.Attributes) string {
	res := a.Resource
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	msg := fmt.Sprintf("User %q cannot %s resource %q in API group %q", a.User.Name, a.Verb, res, a.APIGroup)
	if a.Namespace != "" {
		msg += fmt.Sprintf(" in the namespace %q", a.Namespace)
	} else {
		msg += " at the cluster scope"
	}
	return msg
}

// authnz runs stages 1 and 2.
func (s *Server) authnz(ctx context.Context, c *call) error {
	if err := s.authenticate(ctx, c); err != nil {
		return err
	}
	return s.authorize(ctx, c)
}

// mutate is stage 3: built-in defaults, then the mutating plugins
// (webhooks) in order.
func (s *Server) mutate(ctx context.Context, c *call, a *request.Admission) error {
	return s.stage(ctx, c, stageMutate, func(ctx context.Context) error {
		if a.Object != nil && a.Subresource == "" {
			setDefaults(a.Object)
		}
		// The built-in plugins Kubernetes runs before the webhooks.
		if err := s.plugin(ctx, "LimitRanger", limitRangerApplies(a), func(ctx context.Context) error { return s.admitLimitRanges(ctx, a) }); err != nil {
			return err
		}
		if err := s.plugin(ctx, "Priority", a.Resource == "pods", func(ctx context.Context) error { return s.admitPriority(ctx, a) }); err != nil {
			return err
		}
		for _, p := range s.cfg.Mutating {
			if err := p.Admit(ctx, a); err != nil {
				return err
			}
		}
		if err := s.admitClaim(ctx, a, true); err != nil {
			return err
		}
		// A webhook may not clear what defaulting set.
		if a.Object != nil && a.Subresource == "" {
			setDefaults(a.Object)
		}
		return nil
	})
}

// validate is stage 4: RBAC escalation prevention (rbac objects only), then
// schema validation, every violation with its path.
func (s *Server) validate(ctx context.Context, c *call, r *resourceInfo, obj, old proto.Message) error {
	return s.stage(ctx, c, stageValidate, func(ctx context.Context) error {
		if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
			return validateCRD(ctx, r, crd, old, c.attrs.Subresource == "status")
		}
		if o, ok := obj.(*dynamicv1.Object); ok {
			oldObj, _ := old.(*dynamicv1.Object)
			return validateCustom(ctx, r, o, oldObj)
		}
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
			oc, _ := old.(*certificatesv1.CertificateSigningRequest)
			return invalid(r, meta(csr).GetName(), validateCSR(r, csr, oc, c.attrs.Subresource))
		}
		if c.attrs.Subresource == "status" {
			return validateStatusUpdate(r, obj, old)
		}
		if c.attrs.Subresource == "ephemeralcontainers" {
			return invalid(r, meta(obj).GetName(), validateEphemeralContainersUpdate(r, obj.(*corev1.Pod), old.(*corev1.Pod)))
		}
		if err := s.preventEscalation(ctx, c, r, obj, old); err != nil {
			return err
		}
		if svc, ok := obj.(*corev1.Service); ok {
			return s.validateService(r, svc, old)
		}
		switch obj.(type) {
		case *admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			return s.validatePolicyObject(ctx, c, r, obj, old)
		}
		return validateObject(r, obj, old)
	})
}

// admitValidating is stage 5, in kube-apiserver's order: NamespaceLifecycle,
// NodeRestriction, PodSecurity, the ValidatingAdmissionPolicies, then the
// other validating plugins (webhooks) in their configured order.
func (s *Server) admitValidating(ctx context.Context, c *call, a *request.Admission) error {
	return s.stage(ctx, c, stageAdmitValidate, func(ctx context.Context) error {
		if err := s.namespaceLifecycle(ctx, a); err != nil {
			return err
		}
		if err := s.plugin(ctx, "LimitRanger", limitRangerApplies(a), func(ctx context.Context) error { return s.validateLimitRanges(ctx, a) }); err != nil {
			return err
		}
		if err := s.plugin(ctx, "Priority", a.Resource == "priorityclasses", func(ctx context.Context) error { return s.validatePriorityClassAdmission(ctx, a) }); err != nil {
			return err
		}
		if err := s.admitClaim(ctx, a, false); err != nil {
			return err
		}
		if err := s.plugin(ctx, "CertificateApproval", a.Resource == "certificatesigningrequests", func(ctx context.Context) error { return s.admitCertificates(ctx, a) }); err != nil {
			return err
		}
		for _, p := range s.cfg.Validating {
			if _, ok := p.(*authz.NodeRestriction); ok {
				if err := p.Validate(ctx, a); err != nil {
					return err
				}
			}
		}
		if s.podSecurity.Applies(a) {
			if err := s.plugin(ctx, "PodSecurity", true, func(ctx context.Context) error { return s.admitPodSecurity(ctx, c, a) }); err != nil {
				return err
			}
		}
		if err := s.admitPolicies(ctx, c, a); err != nil {
			return err
		}
		for _, p := range s.cfg.Validating {
			if _, ok := p.(*authz.NodeRestriction); ok {
				continue
			}
			if err := p.Validate(ctx, a); err != nil {
				return err
			}
		}
		return nil
	})
}

// storeStage is stage 6: the store Txn.
func (s *Server) storeStage(ctx context.Context, c *call, f func(context.Context) error) error {
	return s.stage(ctx, c, stageStore, f)
}

// setTraceAnnotation records the trace context of the request writing m on
// it (see internal/telemetry: one trace across the watch-driven hops). An
// untraced request leaves the annotation as it is.
func setTraceAnnotation(ctx context.Context, m *metav1.ObjectMeta) {
	if v := telemetry.AnnotationValue(ctx); v != "" {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[telemetry.Annotation] = v
	}
}

// protectedNamespaces exist from start-up and may not be deleted.
var protectedNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

func isProtectedNamespace(n string) bool {
	for _, p := range protectedNamespaces {
		if p == n {
			return true
		}
	}
	return false
}

// namespaceLifecycle refuses creating objects in a namespace that does not
// exist or is being deleted, and deleting the built-in namespaces.
func (s *Server) namespaceLifecycle(ctx context.Context, a *request.Admission) error {
	if a.Resource == "namespaces" {
		if a.Operation == request.Delete && isProtectedNamespace(a.Name) {
			return apierrors.NewForbidden("", "namespaces", a.Name, "this namespace may not be deleted")
		}
		return nil
	}
	if a.Operation != request.Create || a.Namespace == "" || a.Subresource != "" {
		return nil
	}
	// The namespace cache first, as Kubernetes' plugin uses its informer;
	// a namespace it has not seen yet is looked up in the store.
	nsr := s.resources["namespaces"]
	nc := s.cachers["namespaces"]
	nc.mu.Lock()
	obj, ok := nc.state[s.store.key(nsr, "", a.Namespace)]
	nc.mu.Unlock()
	if !ok {
		var err error
		if obj, err = s.store.get(ctx, nsr, "", a.Namespace); err != nil {
			return err
		}
	}
	if meta(obj).GetDeletionTimestamp() != nil || obj.(*corev1.Namespace).GetStatus().GetPhase() == "Terminating" {
		return apierrors.NewForbidden(a.APIGroup, a.Resource, a.Name,
			fmt.Sprintf("unable to create new content in namespace %s because it is being terminated", a.Namespace))
	}
	return nil
}

func (s *Server) admission(c *call, op request.Operation, obj, old proto.Message, dry bool) *request.Admission {
	return &request.Admission{Attributes: c.attrs, Operation: op, Object: obj, OldObject: old, DryRun: dry}
}
