// This file holds the request path every resource method walks:
// authentication, authorization, admission, validation and the store, timed
// and audited per stage, and get, list, watch, create, update, status,
// scale, binding and delete on it.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/internal/telemetry"
	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	watchstreamv1 "github.com/kplane/kplane/proto/kplane/watchstream/v1"
	"github.com/kplane/kplane/services/apiserver/apierrors"
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
		if c.attrs.Subresource == "status" {
			return validateStatusUpdate(r, obj, old)
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
// NodeRestriction, the ValidatingAdmissionPolicies, then the other
// validating plugins (webhooks) in their configured order.
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
		for _, p := range s.cfg.Validating {
			if _, ok := p.(*authz.NodeRestriction); ok {
				if err := p.Validate(ctx, a); err != nil {
					return err
				}
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

// ---- reads ----

func (s *Server) get(ctx context.Context, r *resourceInfo, ns, name, rv string) (_ proto.Message, err error) {
	c := s.begin(ctx, "get", r, "", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	if rv == "" {
		return s.store.get(ctx, r, ns, name)
	}
	want, err := parseRV(rv)
	if err != nil {
		return nil, err
	}
	ch := s.cacherFor(r)
	if err := ch.waitReady(ctx); err != nil {
		return nil, err
	}
	ch.mu.Lock()
	obj, ok := ch.state[s.store.key(r, ns, name)]
	cur := ch.rev
	ch.mu.Unlock()
	if cur < want {
		// The cache is behind what the client has seen: the store is not.
		return s.store.get(ctx, r, ns, name)
	}
	if !ok {
		return nil, apierrors.NewNotFound(r.Group, r.Resource, name)
	}
	return obj, nil
}

func (s *Server) list(ctx context.Context, r *resourceInfo, ns string, o listOptions) (_ []proto.Message, _ *metav1.ListMeta, err error) {
	c := s.begin(ctx, "list", r, "", ns, "")
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, nil, err
	}
	sel, err := parseSelector(r, ns, o.LabelSelector, o.FieldSelector)
	if err != nil {
		return nil, nil, err
	}
	if o.Limit < 0 {
		return nil, nil, apierrors.NewBadRequest("limit must not be negative")
	}
	rev, err := parseRV(o.ResourceVersion)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case o.Continue != "":
		if o.ResourceVersion != "" && o.ResourceVersion != "0" {
			return nil, nil, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
		}
		tok, err := decodeContinue(o.Continue)
		if err != nil {
			return nil, nil, err
		}
		return s.listStore(ctx, r, ns, tok.Rev, tok.Key, o.Limit, sel, true)
	case o.ResourceVersion == "":
		// The default: a consistent list, a linearizable read of the store.
		return s.listStore(ctx, r, ns, 0, "", o.Limit, sel, false)
	case o.ResourceVersionMatch == "Exact":
		return s.listStore(ctx, r, ns, rev, "", o.Limit, sel, false)
	case o.ResourceVersionMatch != "" && o.ResourceVersionMatch != "NotOlderThan":
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("unsupported resourceVersionMatch %q", o.ResourceVersionMatch))
	}
	// resourceVersion "0" (any) or N (not older than N): the watch cache
	// if it is that recent, else the store (always at least as recent).
	ch := s.cacherFor(r)
	if err := ch.waitReady(ctx); err != nil {
		return nil, nil, err
	}
	items, at := ch.snapshot(sel.matches)
	if at >= rev {
		return items, &metav1.ListMeta{ResourceVersion: formatRV(at)}, nil
	}
	items, lm, err := s.listStore(ctx, r, ns, 0, "", o.Limit, sel, false)
	if err != nil {
		return nil, nil, err
	}
	if cur, _ := parseRV(lm.ResourceVersion); cur < rev {
		// A revision the store has not reached: as kube-apiserver, give it
		// a moment to arrive, then answer 504 with the cause reflectors
		// retry on.
		return s.listFuture(ctx, r, ns, rev, o.Limit, sel)
	}
	return items, lm, nil
}

// tooLargeRVWait is how long a list at a resourceVersion ahead of the store
// waits for the store to reach it (kube-apiserver's watch cache waits 3 s).
const tooLargeRVWait = 3 * time.Second

// listFuture serves a not-older-than list at rev once the store reaches
// rev, or answers Too large resource version after tooLargeRVWait.
func (s *Server) listFuture(ctx context.Context, r *resourceInfo, ns string, rev, limit int64, sel *selector) ([]proto.Message, *metav1.ListMeta, error) {
	end := time.Now().Add(tooLargeRVWait)
	for {
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, storeErr(ctx.Err())
		case <-t.C:
		}
		cur, err := s.store.revision(ctx)
		if err != nil {
			return nil, nil, err
		}
		if cur >= rev {
			return s.listStore(ctx, r, ns, 0, "", limit, sel, false)
		}
		if time.Now().After(end) {
			return nil, nil, apierrors.NewTooLargeResourceVersion(rev, cur)
		}
	}
}

func (s *Server) listStore(ctx context.Context, r *resourceInfo, ns string, rev int64, from string, limit int64, sel *selector, fromContinue bool) ([]proto.Message, *metav1.ListMeta, error) {
	page, err := s.store.list(ctx, r, ns, rev, from, limit, sel)
	if err != nil {
		// A list at a compacted revision is Expired with the store's
		// message ("The resourceVersion for the provided list is too
		// old."), as kube-apiserver answers a list it reads from etcd; a
		// continue token's has its own.
		if fromContinue && apierrors.ReasonOf(err) == apierrors.ReasonExpired {
			return nil, nil, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
		}
		return nil, nil, err
	}
	return page.items, &metav1.ListMeta{ResourceVersion: formatRV(page.rev), Continue: page.next}, nil
}

// watch serves one client watch. build makes the RPC's response message
// for an event; send is the stream's SendMsg. Each event is encoded once,
// however many watchers it goes to (see preEncoded).
func (s *Server) watch(ctx context.Context, r *resourceInfo, ns string, o listOptions, build func(typ string, obj proto.Message) proto.Message, send func(any) error) error {
	return s.runWatch(ctx, r, ns, o, watchSink{
		encode: func(e *watchEvent) (any, trace.SpanContext, error) {
			return e.encoded(func() proto.Message {
				if e.typ == eventBookmark {
					bm := r.New()
					meta(bm).ResourceVersion = formatRV(e.rev)
					setTypeMeta(r, bm)
					return build(eventBookmark, bm)
				}
				return build(e.typ, e.obj)
			})
		},
		send: send,
	})
}

// watchSink is what a watch does with each event: encode gives what to
// send for it (computed once per event, shared by its watchers) and the
// trace context its object records; send sends that.
type watchSink struct {
	encode func(e *watchEvent) (any, trace.SpanContext, error)
	send   func(any) error
}

// runWatch authorizes one client watch, starts it on the resource's cache
// and hands every event to sink until the call ends or the watcher is cut
// off.
func (s *Server) runWatch(ctx context.Context, r *resourceInfo, ns string, o listOptions, sink watchSink) (err error) {
	c := s.begin(ctx, "watch", r, "", ns, "")
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return err
	}
	sel, err := parseSelector(r, ns, o.LabelSelector, o.FieldSelector)
	if err != nil {
		return err
	}
	rev, err := parseRV(o.ResourceVersion)
	if err != nil {
		return err
	}
	var filter watchFilter
	if ns != "" || !sel.empty() {
		filter = watchFilter{key: sel.key(), match: sel.matchesWith, exact: sel.fields.RequiresExactMatch}
	}
	if o.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(o.TimeoutSeconds)*time.Second)
		defer cancel()
	}
	ch := s.cacherFor(r)
	w, err := ch.watch(ctx, rev, filter, o.AllowWatchBookmarks, o.SendInitialEvents)
	if err != nil {
		return err
	}
	defer ch.stop(w)
	// The watch is established: send the headers now, so a client can tell
	// even before the first event (audit stage ResponseStarted).
	_ = grpc.SendHeader(ctx, metadata.Pairs(watchstreamv1.EstablishedHeader, "true"))
	s.auditResponseStarted(c)
	deliver := func(e *watchEvent) error {
		enc, sc, err := sink.encode(e)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if sc.IsValid() {
			// Hop "watch delivery": a span in the trace of the change
			// being delivered, when that change was traced.
			_, span := s.tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), sc), "watch.deliver",
				trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithAttributes(attribute.String("k8s.resource", r.Resource), attribute.String("watch.event", e.typ),
					attribute.String("k8s.object", e.key)))
			defer span.End()
		}
		return sink.send(enc)
	}
	for _, e := range w.initial {
		if err := deliver(e); err != nil {
			return err
		}
	}
	w.initial = nil
	// The end of the call finishes the watcher like a cut-off does, so the
	// loop waits on its one notification channel: a receive from one
	// channel costs the runtime far less than a select over two (each of
	// which it locks, and queues this goroutine on, per event), which with
	// 10,000 watchers is paid 10,000 times per event.
	unregister := context.AfterFunc(ctx, func() { ch.stop(w) })
	defer unregister()
	for {
		batch, ok := w.next()
		if !ok {
			break
		}
		for _, e := range batch {
			if err := deliver(e); err != nil {
				return err
			}
		}
	}
	// Cut off (too slow), the cache re-listed, or the call ended: end the
	// stream cleanly; the client resumes from its last resourceVersion.
	return nil
}

// ---- writes ----

const generateNameChars = "bcdfghjklmnpqrstvwxz2456789"

func generateName(prefix string) string {
	b := make([]byte, 5)
	for i := range b {
		b[i] = generateNameChars[rand.IntN(len(generateNameChars))]
	}
	return prefix + string(b)
}

func (s *Server) create(ctx context.Context, r *resourceInfo, ns string, obj proto.Message, wo writeOptions) (_ proto.Message, err error) {
	c := s.begin(ctx, "create", r, "", ns, "")
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, apierrors.NewBadRequest("the request has no object")
	}
	dry, err := wo.dryRun()
	if err != nil {
		return nil, err
	}
	obj = proto.Clone(obj)
	m := meta(obj)
	if r.Namespaced {
		if m.Namespace == "" {
			m.Namespace = ns
		}
		if ns != "" && m.Namespace != ns {
			return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		if ns == "" {
			return nil, apierrors.NewBadRequest("a namespace is required to create " + r.Resource)
		}
	} else if m.Namespace != "" {
		m.Namespace = ""
	}
	setTypeMeta(r, obj)
	generated := m.Name == "" && m.GenerateName != ""
	prepareForCreate(r, obj)
	for attempt := 0; ; attempt++ {
		try := obj
		if generated {
			// Each attempt starts from the request's object: defaults and
			// a Job's generated labels name the attempt's name.
			try = proto.Clone(obj)
			meta(try).Name = generateName(m.GenerateName)
		}
		c.attrs.Name = meta(try).Name
		out, err := s.createOnce(ctx, c, r, try, dry)
		if generated && apierrors.IsAlreadyExists(err) && attempt < 8 {
			continue
		}
		return out, err
	}
}

func prepareForCreate(r *resourceInfo, obj proto.Message) {
	m := meta(obj)
	m.Uid = uuid.NewString()
	m.CreationTimestamp = now()
	m.ResourceVersion = ""
	m.Generation = 1
	m.DeletionTimestamp = nil
	m.DeletionGracePeriodSeconds = nil
	switch o := obj.(type) {
	case *corev1.Pod:
		// Status belongs to the node agent; a new pod is Pending.
		o.Status = &corev1.PodStatus{Phase: "Pending"}
	case *appsv1.Deployment:
		o.Status = nil
	case *appsv1.ReplicaSet:
		o.Status = nil
	case *corev1.ReplicationController:
		o.Status = nil
	case *appsv1.DaemonSet:
		prepareDaemonSetCreate(o)
	case *apiextensionsv1.CustomResourceDefinition:
		prepareCRDCreate(o)
	case *appsv1.StatefulSet:
		prepareStatefulSet(o, nil)
	case *corev1.PersistentVolumeClaim, *corev1.PersistentVolume:
		prepareVolumeCreate(o)
	case *dynamicv1.Object:
		if r.HasStatus {
			o.Status = nil // written through the status subresource only
		}
	case *policyv1.PodDisruptionBudget:
		// As Kubernetes' strategy: a new budget's status is empty (its
		// counts written as zeros) until the disruption controller's.
		o.Status = &policyv1.PodDisruptionBudgetStatus{}
	case *discoveryv1.EndpointSlice:
		prepareEndpointSliceWrite(o, nil)
	default:
		prepareMoreKinds(obj, nil)
	case *batchv1.CronJob:
		o.Status = nil // a Job's is cleared with its generated selector
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		o.Status = nil // then written by typeCheckPolicy
	case *corev1.ResourceQuota:
		// The resource quota controller fills it.
		o.Status = nil
	case *corev1.Namespace:
		o.Status = &corev1.NamespaceStatus{Phase: "Active"}
		// As in Kubernetes: every new namespace is held, once deleted, until
		// the namespace controller has emptied it and finalized it.
		if o.Spec == nil {
			o.Spec = &corev1.NamespaceSpec{}
		}
		if !slices.Contains(o.Spec.Finalizers, namespaceFinalizer) {
			o.Spec.Finalizers = append(o.Spec.Finalizers, namespaceFinalizer)
		}
	}
}

func (s *Server) createOnce(ctx context.Context, c *call, r *resourceInfo, obj proto.Message, dry bool) (proto.Message, error) {
	adm := s.admission(c, request.Create, obj, nil, dry)
	if err := s.mutate(ctx, c, adm); err != nil {
		return nil, err
	}
	if p, ok := obj.(*corev1.Pod); ok {
		p.Status.QosClass = podQOSClass(p.GetSpec())
	}
	if j, ok := obj.(*batchv1.Job); ok {
		generateJobSelector(j)
	}
	if err := s.validate(ctx, c, r, obj, nil); err != nil {
		return nil, err
	}
	if err := s.typeCheckPolicy(obj); err != nil {
		return nil, err
	}
	if err := s.admitValidating(ctx, c, adm); err != nil {
		return nil, err
	}
	q, err := s.newQuotaCharge(ctx, c, r, request.Create, obj, nil, dry)
	if err != nil {
		return nil, err
	}
	if dry {
		if err := q.dryRun(ctx); err != nil {
			return nil, err
		}
		return obj, s.dryRunAddresses(ctx, obj, nil)
	}
	m := meta(obj)
	setTraceAnnotation(ctx, m)
	var rev int64
	err = s.storeStage(ctx, c, func(ctx context.Context) (err error) {
		rev, err = s.storeCreate(ctx, r, obj, q)
		return err
	})
	if err != nil {
		return nil, err
	}
	m.ResourceVersion = formatRV(rev)
	return obj, nil
}

// checkTarget fills an object's name and namespace from the request, or
// refuses a mismatch.
func checkTarget(r *resourceInfo, obj proto.Message, ns, name string) error {
	m := meta(obj)
	if m.Name == "" {
		m.Name = name
	}
	if m.Name != name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.Name, name))
	}
	if r.Namespaced {
		if m.Namespace == "" {
			m.Namespace = ns
		}
		if m.Namespace != ns {
			return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
	}
	return nil
}

// beginUpdate is the common start of a write to an existing object
// (update, updateStatus): the request's audit record, authentication and
// authorization, then the request's own checks — an object, a valid dryRun,
// a name and namespace that match the URL. It returns a copy of obj with
// its TypeMeta set.
func (s *Server) beginUpdate(ctx context.Context, r *resourceInfo, sub, ns, name string, obj proto.Message, wo writeOptions) (*call, proto.Message, bool, error) {
	c := s.begin(ctx, "update", r, sub, ns, name)
	if err := s.authnz(ctx, c); err != nil {
		return c, nil, false, err
	}
	if obj == nil {
		return c, nil, false, apierrors.NewBadRequest("the request has no object")
	}
	dry, err := wo.dryRun()
	if err != nil {
		return c, nil, false, err
	}
	obj = proto.Clone(obj)
	if err := checkTarget(r, obj, ns, name); err != nil {
		return c, nil, false, err
	}
	setTypeMeta(r, obj)
	return c, obj, dry, nil
}

func (s *Server) update(ctx context.Context, r *resourceInfo, ns, name string, obj proto.Message, wo writeOptions) (_ proto.Message, err error) {
	c, obj, dry, err := s.beginUpdate(ctx, r, "", ns, name, obj, wo)
	defer func() { s.end(ctx, c, err) }()
	if err != nil {
		return nil, err
	}
	clientRV := meta(obj).GetResourceVersion()
	if clientRV == "" && !r.AllowUnconditionalUpdate {
		return nil, invalid(r, name, fieldErrRequiredRV())
	}
	return s.guaranteedUpdate(ctx, c, r, ns, name, clientRV, dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		if err := s.uidPrecondition(r, ns, name, obj, old); err != nil {
			return nil, nil, err
		}
		n := proto.Clone(obj)
		prepareForUpdate(r, n, old)
		return n, s.admission(c, request.Update, n, old, dry), nil
	})
}

// uidPrecondition refuses, as kube-apiserver does, a write whose object
// names a uid other than the stored object's: the uid is a precondition
// (the object may have been deleted and created again), never a change. An
// object without a uid writes whatever is stored.
func (s *Server) uidPrecondition(r *resourceInfo, ns, name string, obj, old proto.Message) error {
	want, have := meta(obj).GetUid(), meta(old).GetUid()
	if want == "" || want == have {
		return nil
	}
	return apierrors.NewConflict(r.Group, r.Resource, name, fmt.Sprintf(
		"StorageError: invalid object, Code: 4, Key: %s, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: %s, UID in object meta: %s",
		s.store.key(r, ns, name), want, have))
}

// prepareForUpdate carries over what a client may not change through the
// main resource: identity, timestamps, status (for resources with a status
// subresource), and bumps generation when the spec changed.
func prepareForUpdate(r *resourceInfo, obj, old proto.Message) {
	m, om := meta(obj), meta(old)
	m.Uid = om.GetUid()
	m.CreationTimestamp = om.GetCreationTimestamp()
	m.DeletionTimestamp = om.GetDeletionTimestamp()
	m.DeletionGracePeriodSeconds = om.DeletionGracePeriodSeconds
	m.Generation = om.GetGeneration()
	if r.HasStatus {
		copyField(obj, old, "status")
	}
	if ns, ok := obj.(*corev1.Namespace); ok {
		// spec.finalizers change only through namespaces/finalize.
		if ns.Spec == nil {
			ns.Spec = &corev1.NamespaceSpec{}
		}
		ns.Spec.Finalizers = old.(*corev1.Namespace).GetSpec().GetFinalizers()
	}
	if ds, ok := obj.(*appsv1.DaemonSet); ok {
		prepareDaemonSetUpdate(ds, old.(*appsv1.DaemonSet))
	}
	if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
		prepareCRDUpdate(crd)
	}
	if ss, ok := obj.(*appsv1.StatefulSet); ok {
		prepareStatefulSet(ss, old.(*appsv1.StatefulSet))
	}
	// As in Kubernetes, where defaults are applied when the request is
	// decoded, before this: a field the client left out and defaulting
	// fills is no change (kubectl apply of a StatefulSet's claim
	// templates, a list it replaces whole, sends them undefaulted).
	defaulted := proto.Clone(obj)
	setDefaults(defaulted)
	if !specEqual(defaulted, old) {
		m.Generation++
	}
	if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
		prepareEndpointSliceWrite(es, old.(*discoveryv1.EndpointSlice))
	}
	prepareMoreKinds(obj, old)
}

// mutation builds the new object from the current one for one attempt of
// a guaranteed update, with the admission record for it.
type mutation func(old proto.Message) (proto.Message, *request.Admission, error)

// guaranteedUpdate applies f to the current object and writes the result
// with a compare-and-swap on the current object's revision. With a client
// resourceVersion a stale one is a Conflict (never retried on the client's
// behalf); without one (an unconditional update, or a server-side update of
// a subresource) a lost race is retried with the new current object.
func (s *Server) guaranteedUpdate(ctx context.Context, c *call, r *resourceInfo, ns, name, clientRV string, dry bool, f mutation) (proto.Message, error) {
	// The first attempt starts from the watch cache's copy instead of a
	// store read, as Kubernetes' cacher hands its cached object to
	// GuaranteedUpdate: when the copy is current (nearly always) the update
	// costs one store round trip instead of two. When it is stale the
	// compare-and-swap fails and returns the store's current value for the
	// next attempt; and anything decided from a copy not known to be current
	// (a refusal, a conflict, a dry run, "nothing changed") is decided again
	// from the store.
	old, current := s.cachedCopy(r, ns, name), false
	for attempt := 0; ; attempt++ {
		if old == nil {
			var err error
			if old, err = s.store.get(ctx, r, ns, name); err != nil {
				return nil, err
			}
			current = true
		}
		n, err := s.tryUpdate(ctx, c, r, name, clientRV, old, f)
		if err != nil || dry || proto.Equal(n, old) {
			if !current {
				old = nil // decide from the store's value
				continue
			}
			if err != nil {
				return nil, err
			}
			if dry {
				return n, s.dryRunAddresses(ctx, n, old)
			}
			return old, nil // nothing changed: no write, as in Kubernetes
		}
		m := meta(n)
		oldRV := m.GetResourceVersion()
		setTraceAnnotation(ctx, m)
		rev, _ := parseRV(oldRV)
		var newRev int64
		finished := m.DeletionTimestamp != nil && !heldByFinalizers(n) && m.GetDeletionGracePeriodSeconds() == 0
		err = s.storeStage(ctx, c, func(ctx context.Context) (err error) {
			if finished {
				newRev, err = s.storeRemove(ctx, r, ns, name, rev, n)
			} else {
				var q *quotaCharge
				if q, err = s.newQuotaCharge(ctx, c, r, request.Update, n, old, false); err != nil {
					return err
				}
				newRev, err = s.storeUpdate(ctx, r, ns, name, rev, n, old, q)
			}
			return err
		})
		var ce *casError
		if errors.As(err, &ce) {
			if ce.cur == nil {
				return nil, apierrors.NewNotFound(r.Group, r.Resource, name)
			}
			if (clientRV != "" && current) || attempt >= maxGuaranteedAttempts {
				return nil, apierrors.NewConflict(r.Group, r.Resource, name, apierrors.ConflictModified)
			}
			old, current = ce.cur, true
			continue
		}
		if err != nil {
			return nil, err
		}
		m.ResourceVersion = formatRV(newRev)
		return n, nil
	}
}

// tryUpdate is one attempt of guaranteedUpdate from old: the mutation,
// admission and validation; the result carries old's resourceVersion.
func (s *Server) tryUpdate(ctx context.Context, c *call, r *resourceInfo, name, clientRV string, old proto.Message, f mutation) (proto.Message, error) {
	oldRV := meta(old).GetResourceVersion()
	if clientRV != "" && clientRV != oldRV {
		return nil, apierrors.NewConflict(r.Group, r.Resource, name, apierrors.ConflictModified)
	}
	n, adm, err := f(old)
	if err != nil {
		return nil, err
	}
	if err := s.mutate(ctx, c, adm); err != nil {
		return nil, err
	}
	if adm.Subresource == "" || adm.Subresource == "status" || adm.Subresource == "scale" || adm.Subresource == "finalize" {
		if err := s.validate(ctx, c, r, n, old); err != nil {
			return nil, err
		}
	}
	if adm.Subresource == "" {
		if err := s.typeCheckPolicy(n); err != nil {
			return nil, err
		}
	}
	if err := s.admitValidating(ctx, c, adm); err != nil {
		return nil, err
	}
	meta(n).ResourceVersion = oldRV
	return n, nil
}

// cachedCopy is a copy of the object from the watch cache, or nil when the
// cache does not hold it (or is not ready).
func (s *Server) cachedCopy(r *resourceInfo, ns, name string) proto.Message {
	ch := s.cacherFor(r)
	if ch == nil {
		return nil
	}
	select {
	case <-ch.ready:
	default:
		return nil
	}
	ch.mu.Lock()
	obj, ok := ch.state[s.store.key(r, ns, name)]
	ch.mu.Unlock()
	if !ok {
		return nil
	}
	return proto.Clone(obj)
}

func (s *Server) updateStatus(ctx context.Context, r *resourceInfo, ns, name string, obj proto.Message, wo writeOptions) (_ proto.Message, err error) {
	c, obj, dry, err := s.beginUpdate(ctx, r, "status", ns, name, obj, wo)
	defer func() { s.end(ctx, c, err) }()
	if err != nil {
		return nil, err
	}
	clientRV := meta(obj).GetResourceVersion()
	return s.guaranteedUpdate(ctx, c, r, ns, name, clientRV, dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		if err := s.uidPrecondition(r, ns, name, obj, old); err != nil {
			return nil, nil, err
		}
		n := proto.Clone(old)
		copyField(n, obj, "status")
		if pv, ok := n.(*corev1.PersistentVolume); ok {
			preparePersistentVolumeStatus(pv, old.(*corev1.PersistentVolume))
		}
		// Labels (but a Deployment's), annotations, finalizers and owner
		// references (but a Pod's) may change through status, as in
		// Kubernetes, whose status strategies reset only those; a custom
		// object's status strategy keeps all of the old metadata.
		_, custom := n.(*dynamicv1.Object)
		if _, ok := n.(*appsv1.Deployment); !ok && !custom {
			meta(n).Labels = meta(obj).GetLabels()
		}
		if !custom {
			meta(n).Annotations = meta(obj).GetAnnotations()
			meta(n).Finalizers = meta(obj).GetFinalizers()
		}
		if _, ok := n.(*corev1.Pod); !ok && !custom {
			meta(n).OwnerReferences = meta(obj).GetOwnerReferences()
		}
		// The gateway records the status writer in managedFields.
		if mf := meta(obj).GetManagedFields(); len(mf) > 0 {
			meta(n).ManagedFields = mf
		}
		return n, s.admission(c, request.Update, n, old, dry), nil
	})
}

// namespaceFinalizer is the spec finalizer every namespace gets at
// creation; the namespace controller removes it once the namespace is empty.
const namespaceFinalizer = "kubernetes"

// heldByFinalizers reports whether obj, once being deleted, must stay: it
// has metadata finalizers, or (a namespace) spec finalizers.
func heldByFinalizers(obj proto.Message) bool {
	if len(meta(obj).GetFinalizers()) > 0 {
		return true
	}
	ns, ok := obj.(*corev1.Namespace)
	return ok && len(ns.GetSpec().GetFinalizers()) > 0
}

// finalize writes a namespace's spec.finalizers (namespaces/finalize): the
// only way to change them after creation. A namespace being deleted goes
// once none are left (nor metadata finalizers).
func (s *Server) finalize(ctx context.Context, r *resourceInfo, name string, obj proto.Message, wo writeOptions) (_ proto.Message, err error) {
	c, obj, dry, err := s.beginUpdate(ctx, r, "finalize", "", name, obj, wo)
	defer func() { s.end(ctx, c, err) }()
	if err != nil {
		return nil, err
	}
	want := obj.(*corev1.Namespace).GetSpec().GetFinalizers()
	return s.guaranteedUpdate(ctx, c, r, "", name, meta(obj).GetResourceVersion(), dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		n := proto.Clone(old).(*corev1.Namespace)
		if n.Spec == nil {
			n.Spec = &corev1.NamespaceSpec{}
		}
		n.Spec.Finalizers = slices.Clone(want)
		return n, s.admission(c, request.Update, n, old, dry), nil
	})
}

func (s *Server) getScale(ctx context.Context, r *resourceInfo, ns, name string) (_ *autoscalingv1.Scale, err error) {
	c := s.begin(ctx, "get", r, "scale", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	obj, err := s.store.get(ctx, r, ns, name)
	if err != nil {
		return nil, err
	}
	return scaleOf(r, obj), nil
}

// scaleOf renders the scale subresource of a deployment or replica set.
func scaleOf(r *resourceInfo, obj proto.Message) *autoscalingv1.Scale {
	m := meta(obj)
	sc := &autoscalingv1.Scale{
		ApiVersion: "autoscaling/v1", Kind: "Scale",
		Metadata: &metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), Uid: m.GetUid(),
			ResourceVersion: m.GetResourceVersion(), CreationTimestamp: m.GetCreationTimestamp()},
		Spec: &autoscalingv1.ScaleSpec{}, Status: &autoscalingv1.ScaleStatus{},
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		sc.Spec.Replicas = o.GetSpec().GetReplicas()
		sc.Status.Replicas = o.GetStatus().GetReplicas()
		sc.Status.Selector = labelSelectorString(o.GetSpec().GetSelector())
	case *appsv1.ReplicaSet:
		sc.Spec.Replicas = o.GetSpec().GetReplicas()
		sc.Status.Replicas = o.GetStatus().GetReplicas()
		sc.Status.Selector = labelSelectorString(o.GetSpec().GetSelector())
	case *corev1.ReplicationController:
		sc.Spec.Replicas = o.GetSpec().GetReplicas()
		sc.Status.Replicas = o.GetStatus().GetReplicas()
		sc.Status.Selector = labels.SelectorFromSet(o.GetSpec().GetSelector()).String()
	case *appsv1.StatefulSet:
		sc.Spec.Replicas = o.GetSpec().GetReplicas()
		sc.Status.Replicas = o.GetStatus().GetReplicas()
		sc.Status.Selector = labelSelectorString(o.GetSpec().GetSelector())
	case *dynamicv1.Object:
		customScale(r, o, sc)
	}
	return sc
}

func (s *Server) updateScale(ctx context.Context, r *resourceInfo, ns, name string, sc *autoscalingv1.Scale, wo writeOptions) (_ *autoscalingv1.Scale, err error) {
	c := s.begin(ctx, "update", r, "scale", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	if sc == nil {
		return nil, apierrors.NewBadRequest("the request has no Scale")
	}
	dry, err := wo.dryRun()
	if err != nil {
		return nil, err
	}
	if n := sc.GetMetadata().GetName(); n != "" && n != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", n, name))
	}
	if sc.GetSpec().GetReplicas() < 0 {
		return nil, apierrors.NewInvalid("autoscaling", "Scale", name, []apierrors.Cause{{Type: "FieldValueInvalid", Field: "spec.replicas", Message: fmt.Sprintf("Invalid value: %d: must be greater than or equal to 0", sc.GetSpec().GetReplicas())}})
	}
	replicas := sc.GetSpec().GetReplicas()
	out, err := s.guaranteedUpdate(ctx, c, r, ns, name, sc.GetMetadata().GetResourceVersion(), dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		n := proto.Clone(old)
		switch o := n.(type) {
		case *appsv1.Deployment:
			o.Spec.Replicas = proto.Int32(replicas)
		case *appsv1.ReplicaSet:
			o.Spec.Replicas = proto.Int32(replicas)
		case *corev1.ReplicationController:
			o.Spec.Replicas = proto.Int32(replicas)
		case *appsv1.StatefulSet:
			o.Spec.Replicas = proto.Int32(replicas)
		case *dynamicv1.Object:
			if err := setCustomReplicas(r, o, replicas); err != nil {
				return nil, nil, err
			}
		}
		if !specEqual(n, old) {
			meta(n).Generation++
		}
		return n, s.admission(c, request.Update, n, old, dry), nil
	})
	if err != nil {
		return nil, err
	}
	return scaleOf(r, out), nil
}

func (s *Server) bind(ctx context.Context, r *resourceInfo, ns, name string, b *corev1.Binding, wo writeOptions) (_ *metav1.Status, err error) {
	c := s.begin(ctx, "create", r, "binding", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	if b == nil {
		return nil, apierrors.NewBadRequest("the request has no Binding")
	}
	dry, err := wo.dryRun()
	if err != nil {
		return nil, err
	}
	if n := b.GetMetadata().GetName(); n != "" && n != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", n, name))
	}
	node := b.GetTarget().GetName()
	if k := b.GetTarget().GetKind(); k != "" && k != "Node" {
		return nil, apierrors.NewInvalid("", "Binding", name, []apierrors.Cause{{Type: "FieldValueNotSupported", Field: "target.kind", Message: fmt.Sprintf("Unsupported value: %q: supported values: \"Node\"", k)}})
	}
	if node == "" {
		return nil, apierrors.NewInvalid("", "Binding", name, []apierrors.Cause{{Type: "FieldValueRequired", Field: "target.name", Message: "Required value"}})
	}
	_, err = s.guaranteedUpdate(ctx, c, r, ns, name, "", dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		pod := proto.Clone(old).(*corev1.Pod)
		if n := pod.GetSpec().GetNodeName(); n != "" {
			return nil, nil, apierrors.NewConflict("", "pods/binding", name, fmt.Sprintf("pod %s is already assigned to node %q", name, n))
		}
		if pod.GetMetadata().GetDeletionTimestamp() != nil {
			return nil, nil, apierrors.NewConflict("", "pods/binding", name, fmt.Sprintf("pod %s is being deleted, cannot be assigned to a host", name))
		}
		if uid := b.GetMetadata().GetUid(); uid != "" && uid != pod.GetMetadata().GetUid() {
			return nil, nil, apierrors.NewConflict("", "pods/binding", name, "Precondition failed: UID in precondition: "+uid+", UID in object meta: "+pod.GetMetadata().GetUid())
		}
		if pod.Spec == nil {
			pod.Spec = &corev1.PodSpec{}
		}
		pod.Spec.NodeName = node
		if pod.Status == nil {
			pod.Status = &corev1.PodStatus{}
		}
		setPodCondition(pod.Status, &corev1.PodCondition{Type: "PodScheduled", Status: "True", LastTransitionTime: now()})
		adm := s.admission(c, request.Create, b, old, dry)
		return pod, adm, nil
	})
	if err != nil {
		return nil, err
	}
	return &metav1.Status{ApiVersion: "v1", Kind: "Status", Status: "Success", Code: 201}, nil
}

func setPodCondition(st *corev1.PodStatus, c *corev1.PodCondition) {
	for i, existing := range st.Conditions {
		if existing.GetType() == c.GetType() {
			if existing.GetStatus() == c.GetStatus() {
				c.LastTransitionTime = existing.GetLastTransitionTime()
			}
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}

func (s *Server) delete(ctx context.Context, r *resourceInfo, ns, name string, o deleteOptions) (_ proto.Message, err error) {
	c := s.begin(ctx, "delete", r, "", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	dry, err := parseDryRun(o.DryRun)
	if err != nil {
		return nil, err
	}
	if err := checkDeleteOptions(o); err != nil {
		return nil, err
	}
	if o.PropagationPolicy == "" && r.Group == "batch" && r.Resource == "jobs" {
		// As Kubernetes keeps for compatibility: deleting a batch/v1 Job
		// without a policy orphans its pods (kubectl sends Background).
		o.PropagationPolicy = "Orphan"
	}
	return s.deleteObject(ctx, c, r, ns, name, o, dry, true)
}

// checkDeleteOptions refuses a negative grace period and an unknown
// propagation policy, as Kubernetes' DeleteOptions validation does.
func checkDeleteOptions(o deleteOptions) error {
	if g := o.GracePeriodSeconds; g != nil && *g < 0 {
		return apierrors.NewInvalid("", "DeleteOptions", "", []apierrors.Cause{{Type: "FieldValueInvalid", Field: "gracePeriodSeconds", Message: fmt.Sprintf("Invalid value: %d: must be greater than or equal to 0", *g)}})
	}
	switch o.PropagationPolicy {
	case "", "Orphan", "Background", "Foreground":
	default:
		return apierrors.NewInvalid("", "DeleteOptions", "", []apierrors.Cause{{Type: "FieldValueNotSupported", Field: "propagationPolicy", Message: fmt.Sprintf("Unsupported value: %q: supported values: \"Foreground\", \"Background\", \"Orphan\"", o.PropagationPolicy)}})
	}
	return nil
}

// deleteObject is delete once the request is authorized and its options
// checked: the preconditions, admission (when admit; an eviction's delete
// runs none of its own, as in Kubernetes, where admission sees the
// Eviction), then the delete or the marking of the object.
func (s *Server) deleteObject(ctx context.Context, c *call, r *resourceInfo, ns, name string, o deleteOptions, dry, admit bool) (proto.Message, error) {
	for attempt := 0; ; attempt++ {
		old, err := s.store.get(ctx, r, ns, name)
		if err != nil {
			return nil, err
		}
		om := meta(old)
		if p := o.Preconditions; p != nil {
			if p.Uid != nil && p.GetUid() != om.GetUid() {
				return nil, apierrors.NewConflict(r.Group, r.Resource, name, fmt.Sprintf("Precondition failed: UID in precondition: %s, UID in object meta: %s", p.GetUid(), om.GetUid()))
			}
			if p.ResourceVersion != nil && p.GetResourceVersion() != om.GetResourceVersion() {
				return nil, apierrors.NewConflict(r.Group, r.Resource, name, fmt.Sprintf("Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", p.GetResourceVersion(), om.GetResourceVersion()))
			}
		}
		if ns, ok := old.(*corev1.Namespace); ok && om.GetDeletionTimestamp() != nil && len(ns.GetSpec().GetFinalizers()) > 0 {
			return nil, apierrors.NewConflict(r.Group, r.Resource, name, "The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system.")
		}
		if admit {
			adm := s.admission(c, request.Delete, nil, old, dry)
			if err := s.mutate(ctx, c, adm); err != nil {
				return nil, err
			}
			if err := s.admitValidating(ctx, c, adm); err != nil {
				return nil, err
			}
		}
		n, pending := deletionState(r, old, o)
		rev, _ := parseRV(om.GetResourceVersion())
		if dry {
			return n, nil
		}
		if pending && !proto.Equal(n, old) {
			// Marking the object is a change: the controllers that carry
			// out the deletion (namespace, garbage collector, node agent)
			// continue this request's trace.
			setTraceAnnotation(ctx, meta(n))
		}
		var newRev int64
		err = s.storeStage(ctx, c, func(ctx context.Context) (err error) {
			switch {
			case pending && proto.Equal(n, old):
				newRev = rev // already marked; nothing to write
			case pending:
				newRev, err = s.store.update(ctx, r, ns, name, rev, n)
			default:
				newRev, err = s.storeRemove(ctx, r, ns, name, rev, old)
			}
			return err
		})
		var ce *casError
		if errors.As(err, &ce) {
			if ce.cur == nil {
				return nil, apierrors.NewNotFound(r.Group, r.Resource, name)
			}
			if attempt >= maxGuaranteedAttempts {
				return nil, apierrors.NewConflict(r.Group, r.Resource, name, apierrors.ConflictModified)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if pending {
			meta(n).ResourceVersion = formatRV(newRev)
		}
		return n, nil
	}
}

// deletionState decides what a delete does to old: pending (the object
// stays, marked with deletionTimestamp, because of finalizers or a pod's
// grace period) with the marked object, or gone (returns old).
func deletionState(r *resourceInfo, old proto.Message, o deleteOptions) (proto.Message, bool) {
	n := proto.Clone(old)
	m := meta(n)
	grace := int64(0)
	if r.Graceful {
		pod := old.(*corev1.Pod)
		grace = pod.GetSpec().GetTerminationGracePeriodSeconds()
		if o.GracePeriodSeconds != nil {
			grace = *o.GracePeriodSeconds
		}
		// Never scheduled or already finished: nothing to wait for.
		if pod.GetSpec().GetNodeName() == "" || pod.GetStatus().GetPhase() == "Succeeded" || pod.GetStatus().GetPhase() == "Failed" {
			grace = 0
		}
		// A second delete may shorten the grace period, never lengthen it.
		if m.DeletionGracePeriodSeconds != nil && *m.DeletionGracePeriodSeconds < grace {
			grace = *m.DeletionGracePeriodSeconds
		}
	}
	switch o.PropagationPolicy {
	case "Orphan":
		addFinalizer(m, "orphan")
	case "Foreground":
		addFinalizer(m, "foregroundDeletion")
	}
	if crd, ok := n.(*apiextensionsv1.CustomResourceDefinition); ok {
		markCRDTerminating(crd)
	}
	if grace == 0 && !heldByFinalizers(n) {
		return old, false
	}
	if m.DeletionTimestamp == nil || (m.DeletionGracePeriodSeconds != nil && grace < *m.DeletionGracePeriodSeconds) {
		m.DeletionTimestamp = timestamppb.New(time.Now().Add(time.Duration(grace) * time.Second).Truncate(time.Second))
		m.DeletionGracePeriodSeconds = proto.Int64(grace)
	}
	if ns, ok := n.(*corev1.Namespace); ok {
		if ns.Status == nil {
			ns.Status = &corev1.NamespaceStatus{}
		}
		ns.Status.Phase = "Terminating"
	}
	return n, true
}

func addFinalizer(m *metav1.ObjectMeta, f string) {
	for _, x := range m.Finalizers {
		if x == f {
			return
		}
	}
	m.Finalizers = append(m.Finalizers, f)
}
