// Package webhook runs admission webhooks as Kubernetes does: it keeps the
// MutatingWebhookConfiguration and ValidatingWebhookConfiguration objects in
// memory (fed from the apiserver's watch), and for each write sends an
// AdmissionReview v1 (k8s.io/api/admission/v1, JSON) over HTTPS to every
// webhook whose rules, namespaceSelector and objectSelector match, verifying
// the webhook's certificate against its caBundle.
//
// Mutating webhooks run one after another, in the order of their
// configurations' names and then their order in the configuration; each
// JSON-patch response is applied to the object's Kubernetes JSON (kubejson)
// before the next webhook sees it. Validating webhooks run in parallel. A
// webhook that cannot be called, times out (timeoutSeconds, default 10) or
// answers nonsense is skipped under failurePolicy Ignore and fails the request
// under Fail (the default), with the webhook named in the error. A denial
// reaches the client as Kubernetes words it:
// `admission webhook "x.example.com" denied the request: <message>`.
//
// A mutating webhook with reinvocationPolicy IfNeeded is called once more,
// after the others, if a webhook after it changed the object.
//
// Not implemented: matchPolicy Equivalent (rules match the request's own group/version only),
// and matchConditions.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/uuid"
	admissionv1 "k8s.io/api/admission/v1"
	arv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// DefaultTimeout is a webhook's timeout when its configuration gives none.
const DefaultTimeout = 10 * time.Second

// maxResponseBytes bounds a webhook's answer.
const maxResponseBytes = 3 << 20

// Config configures Webhooks.
type Config struct {
	// Logger; nil discards.
	Logger *slog.Logger
	// NamespaceLabels returns a namespace's labels, for namespaceSelector.
	// If nil, the labels of the Namespace objects fed to Upsert are used
	// (register the dispatcher as a sink of "namespaces" too).
	NamespaceLabels func(ctx context.Context, namespace string) (map[string]string, error)
	// ResolveService returns the host:port to dial for a webhook served by a
	// service. The request still goes to https://<name>.<namespace>.svc:<port><path>
	// and the certificate is verified for <name>.<namespace>.svc. Nil dials
	// that name as it is (which needs cluster DNS).
	ResolveService func(ctx context.Context, namespace, name string, port int32) (string, error)
	// TracerProvider records one span per webhook call ("admission.webhook",
	// with the webhook's name, its outcome and any error), so a slow or
	// failing webhook shows in the request's trace. Nil records nothing.
	TracerProvider trace.TracerProvider
}

// Webhooks is the admission webhook dispatcher. It implements the
// apiserver's MutatingAdmission (Admit), ValidatingAdmission (Validate) and
// ObjectSink (Upsert, Delete for webhook configurations). It is safe for
// concurrent use.
type Webhooks struct {
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer

	mu         sync.RWMutex
	mutating   map[string]*arv1.MutatingWebhookConfiguration
	validating map[string]*arv1.ValidatingWebhookConfiguration
	clients    map[string]*http.Client // by clientKey
	nsLabels   map[string]map[string]string
}

// New returns a dispatcher with no webhooks.
func New(cfg Config) *Webhooks {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Webhooks{
		cfg:        cfg,
		tracer:     tp.Tracer("github.com/kplane/kplane/services/apiserver/webhook"),
		log:        log.With("component", "admission.webhook"),
		mutating:   map[string]*arv1.MutatingWebhookConfiguration{},
		validating: map[string]*arv1.ValidatingWebhookConfiguration{},
		clients:    map[string]*http.Client{},
		nsLabels:   map[string]map[string]string{},
	}
}

// Upsert adds or replaces a webhook configuration: kplane's proto
// MutatingWebhookConfiguration / ValidatingWebhookConfiguration, or the
// k8s.io/api/admissionregistration/v1 type. It also takes Namespace objects,
// whose labels it keeps for namespaceSelector when Config.NamespaceLabels is
// nil. Other objects are logged and ignored.
func (w *Webhooks) Upsert(obj any) {
	if err := w.Put(obj); err != nil {
		w.log.Error("ignoring object", "err", err)
	}
}

// Delete forgets a webhook configuration (by name).
func (w *Webhooks) Delete(obj any) {
	if err := w.Remove(obj); err != nil {
		w.log.Error("ignoring object", "err", err)
	}
}

// Put is Upsert returning the error for an object of the wrong type.
func (w *Webhooks) Put(obj any) error {
	if m, ok := obj.(proto.Message); ok && isNamespace(m) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.nsLabels[metaString(m, "name")] = objectLabels(m)
		return nil
	}
	k, err := toK8s(obj)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch c := k.(type) {
	case *arv1.MutatingWebhookConfiguration:
		w.mutating[c.Name] = c
	case *arv1.ValidatingWebhookConfiguration:
		w.validating[c.Name] = c
	}
	return nil
}

// Remove is Delete returning the error for an object of the wrong type.
func (w *Webhooks) Remove(obj any) error {
	if m, ok := obj.(proto.Message); ok && isNamespace(m) {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.nsLabels, metaString(m, "name"))
		return nil
	}
	k, err := toK8s(obj)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch c := k.(type) {
	case *arv1.MutatingWebhookConfiguration:
		delete(w.mutating, c.Name)
	case *arv1.ValidatingWebhookConfiguration:
		delete(w.validating, c.Name)
	}
	return nil
}

// toK8s converts kplane's proto configuration to Kubernetes' type; the two
// share JSON names (caBundle as base64 in both).
func toK8s(obj any) (any, error) {
	switch o := obj.(type) {
	case *arv1.MutatingWebhookConfiguration, *arv1.ValidatingWebhookConfiguration:
		return o, nil
	case proto.Message:
		var into any
		switch string(o.ProtoReflect().Descriptor().Name()) {
		case "MutatingWebhookConfiguration":
			into = &arv1.MutatingWebhookConfiguration{}
		case "ValidatingWebhookConfiguration":
			into = &arv1.ValidatingWebhookConfiguration{}
		default:
			return nil, fmt.Errorf("webhook: %s is not a webhook configuration", o.ProtoReflect().Descriptor().FullName())
		}
		b, err := kubejson.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("webhook: encode %s: %w", o.ProtoReflect().Descriptor().FullName(), err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			return nil, fmt.Errorf("webhook: decode %s: %w", o.ProtoReflect().Descriptor().FullName(), err)
		}
		return into, nil
	}
	return nil, fmt.Errorf("webhook: %T is not a webhook configuration", obj)
}

// hook is one webhook, mutating or validating, in a common shape.
type hook struct {
	name              string
	config            string // configuration name
	clientConfig      arv1.WebhookClientConfig
	rules             []arv1.RuleWithOperations
	failurePolicy     arv1.FailurePolicyType
	namespaceSelector *metav1.LabelSelector
	objectSelector    *metav1.LabelSelector
	sideEffects       *arv1.SideEffectClass
	timeout           time.Duration
	reinvoke          bool // reinvocationPolicy IfNeeded
}

func newHook(config, name string, cc arv1.WebhookClientConfig, rules []arv1.RuleWithOperations, fp *arv1.FailurePolicyType,
	ns, obj *metav1.LabelSelector, se *arv1.SideEffectClass, timeoutSeconds *int32) hook {
	h := hook{name: name, config: config, clientConfig: cc, rules: rules, failurePolicy: arv1.Fail,
		namespaceSelector: ns, objectSelector: obj, sideEffects: se, timeout: DefaultTimeout}
	if fp != nil && *fp != "" {
		h.failurePolicy = *fp
	}
	if timeoutSeconds != nil && *timeoutSeconds > 0 {
		h.timeout = time.Duration(*timeoutSeconds) * time.Second
	}
	return h
}

// snapshot returns the mutating or validating webhooks in Kubernetes' order:
// configurations sorted by name, webhooks in their order within.
func (w *Webhooks) snapshot(mutating bool) []hook {
	w.mu.RLock()
	defer w.mu.RUnlock()
	var out []hook
	if mutating {
		names := sortedKeys(w.mutating)
		for _, n := range names {
			for _, wh := range w.mutating[n].Webhooks {
				h := newHook(n, wh.Name, wh.ClientConfig, wh.Rules, wh.FailurePolicy, wh.NamespaceSelector, wh.ObjectSelector, wh.SideEffects, wh.TimeoutSeconds)
				h.reinvoke = wh.ReinvocationPolicy != nil && *wh.ReinvocationPolicy == arv1.IfNeededReinvocationPolicy
				out = append(out, h)
			}
		}
		return out
	}
	for _, n := range sortedKeys(w.validating) {
		for _, wh := range w.validating[n].Webhooks {
			out = append(out, newHook(n, wh.Name, wh.ClientConfig, wh.Rules, wh.FailurePolicy, wh.NamespaceSelector, wh.ObjectSelector, wh.SideEffects, wh.TimeoutSeconds))
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Admit runs the matching mutating webhooks in order, applying each one's
// patch to a.Object in place; then it calls once more every webhook with
// reinvocationPolicy IfNeeded that a later webhook's patch came after.
func (w *Webhooks) Admit(ctx context.Context, a *request.Admission) error {
	hooks := w.snapshot(true)
	// version counts the patches applied; seen[i] is the version webhook i
	// last saw (-1: it did not match).
	version := 0
	seen := make([]int, len(hooks))
	for i := range hooks {
		seen[i] = -1
		ok, err := w.matches(ctx, &hooks[i], a)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		patched, err := w.callOne(ctx, &hooks[i], a, true)
		if err != nil {
			return err
		}
		if patched {
			version++
		}
		seen[i] = version
	}
	for i := range hooks {
		if !hooks[i].reinvoke || seen[i] < 0 || seen[i] == version {
			continue
		}
		patched, err := w.callOne(ctx, &hooks[i], a, true)
		if err != nil {
			return err
		}
		if patched {
			version++
		}
	}
	return nil
}

// Validate runs the matching validating webhooks in parallel. If any denies
// or fails (under failurePolicy Fail), the first such error in webhook order
// is returned.
func (w *Webhooks) Validate(ctx context.Context, a *request.Admission) error {
	hooks := w.snapshot(false)
	match := make([]bool, len(hooks))
	for i := range hooks {
		ok, err := w.matches(ctx, &hooks[i], a)
		if err != nil {
			return err
		}
		match[i] = ok
	}
	errs := make([]error, len(hooks))
	var wg sync.WaitGroup
	for i := range hooks {
		if !match[i] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = w.callOne(ctx, &hooks[i], a, false)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// matches applies the webhook's rules, namespaceSelector and objectSelector.
func (w *Webhooks) matches(ctx context.Context, h *hook, a *request.Admission) (bool, error) {
	if !slices.ContainsFunc(h.rules, func(r arv1.RuleWithOperations) bool { return ruleMatches(r, a) }) {
		return false, nil
	}
	if ok, err := w.namespaceMatches(ctx, h, a); err != nil || !ok {
		return false, err
	}
	return objectMatches(h, a)
}

// ruleMatches is Kubernetes' rule matching: operations, apiGroups,
// apiVersions with "*"; resources "pods", "pods/status", "*", "*/status",
// "pods/*", "*/*" (a plain "pods" or "*" does not match subresources); scope.
func ruleMatches(r arv1.RuleWithOperations, a *request.Admission) bool {
	if !slices.ContainsFunc(r.Operations, func(op arv1.OperationType) bool {
		return op == arv1.OperationAll || string(op) == string(a.Operation)
	}) {
		return false
	}
	if !matchStar(r.APIGroups, a.APIGroup) || !matchStar(r.APIVersions, a.APIVersion) {
		return false
	}
	resOK := false
	for _, res := range r.Resources {
		rr, sub, _ := strings.Cut(res, "/")
		if (rr == "*" || rr == a.Resource) && (sub == "*" || sub == a.Subresource) {
			resOK = true
			break
		}
	}
	if !resOK {
		return false
	}
	scope := arv1.AllScopes
	if r.Scope != nil && *r.Scope != "" {
		scope = *r.Scope
	}
	switch scope {
	case arv1.ClusterScope:
		return a.Namespace == ""
	case arv1.NamespacedScope:
		return a.Namespace != ""
	}
	return true
}

func matchStar(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}

// namespaceMatches: cluster-scoped objects always match, except Namespaces,
// which are matched by their own labels; others by their namespace's labels.
func (w *Webhooks) namespaceMatches(ctx context.Context, h *hook, a *request.Admission) (bool, error) {
	sel, err := selector(h.namespaceSelector)
	if err != nil {
		return false, apierrors.NewInternalError(fmt.Errorf("webhook %q: invalid namespaceSelector: %w", h.name, err))
	}
	if sel.Empty() {
		return true, nil
	}
	if a.APIGroup == "" && a.Resource == "namespaces" {
		return sel.Matches(labels.Set(objectLabels(a.Object))) || sel.Matches(labels.Set(objectLabels(a.OldObject))), nil
	}
	if a.Namespace == "" {
		return true, nil
	}
	var l map[string]string
	if w.cfg.NamespaceLabels != nil {
		l, err = w.cfg.NamespaceLabels(ctx, a.Namespace)
		if err != nil {
			return false, apierrors.NewInternalError(fmt.Errorf("webhook %q: labels of namespace %q: %w", h.name, a.Namespace, err))
		}
	} else {
		w.mu.RLock()
		l = w.nsLabels[a.Namespace]
		w.mu.RUnlock()
	}
	return sel.Matches(labels.Set(l)), nil
}

// objectMatches: the object's labels or, on update and delete, the old
// object's labels match the objectSelector.
func objectMatches(h *hook, a *request.Admission) (bool, error) {
	sel, err := selector(h.objectSelector)
	if err != nil {
		return false, apierrors.NewInternalError(fmt.Errorf("webhook %q: invalid objectSelector: %w", h.name, err))
	}
	if sel.Empty() {
		return true, nil
	}
	return sel.Matches(labels.Set(objectLabels(a.Object))) || sel.Matches(labels.Set(objectLabels(a.OldObject))), nil
}

func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// objectLabels reads metadata.labels from a kplane object without knowing its Go type.
func objectLabels(m proto.Message) map[string]string {
	if m == nil || !m.ProtoReflect().IsValid() {
		return nil
	}
	msg := m.ProtoReflect()
	md := msg.Descriptor().Fields().ByName("metadata")
	if md == nil || md.Message() == nil || !msg.Has(md) {
		return nil
	}
	meta := msg.Get(md).Message()
	lf := meta.Descriptor().Fields().ByName("labels")
	if lf == nil || !lf.IsMap() {
		return nil
	}
	out := map[string]string{}
	meta.Get(lf).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		out[k.String()] = v.String()
		return true
	})
	return out
}

// callOne sends one AdmissionReview and acts on the answer, applying the
// failure policy to anything that is not a clean answer. patched reports
// that a mutating webhook's patch was applied to a.Object.
func (w *Webhooks) callOne(ctx context.Context, h *hook, a *request.Admission, mutating bool) (patched bool, _ error) {
	if a.DryRun && (h.sideEffects == nil || (*h.sideEffects != arv1.SideEffectClassNone && *h.sideEffects != arv1.SideEffectClassNoneOnDryRun)) {
		return false, apierrors.NewBadRequest(fmt.Sprintf("admission webhook %q does not support dry run", h.name))
	}
	ctx, span := w.tracer.Start(ctx, "admission.webhook", trace.WithAttributes(
		attribute.String("webhook.name", h.name),
		attribute.String("webhook.configuration", h.config),
		attribute.Bool("webhook.mutating", mutating),
		attribute.String("webhook.failure_policy", string(h.failurePolicy)),
	))
	defer span.End()
	start := time.Now()
	resp, reqObj, err := w.call(ctx, h, a)
	if err == nil && mutating && resp.Allowed && len(resp.Patch) > 0 {
		patched, err = applyPatch(h, resp, reqObj, a)
	}
	log := w.log.With("webhook", h.name, "configuration", h.config, "duration", time.Since(start))
	if err != nil {
		span.RecordError(err)
		if h.failurePolicy == arv1.Ignore {
			span.SetAttributes(attribute.String("webhook.outcome", "failed-ignored"))
			log.Warn("webhook failed; ignored by failurePolicy Ignore", "err", err)
			return false, nil
		}
		span.SetAttributes(attribute.String("webhook.outcome", "failed"))
		span.SetStatus(codes.Error, err.Error())
		log.Warn("webhook failed; request refused by failurePolicy Fail", "err", err)
		return false, apierrors.NewInternalError(fmt.Errorf("failed calling webhook %q: %w", h.name, err))
	}
	if !resp.Allowed {
		d := denial(h.name, resp.Result)
		span.SetAttributes(attribute.String("webhook.outcome", "denied"))
		span.SetStatus(codes.Error, d.Message)
		log.Debug("webhook denied the request")
		return false, d
	}
	span.SetAttributes(attribute.String("webhook.outcome", "allowed"), attribute.Bool("webhook.patched", mutating && len(resp.Patch) > 0))
	log.Debug("webhook allowed the request")
	return patched, nil
}

// denial is Kubernetes' error for a webhook's refusal.
func denial(name string, result *metav1.Status) *apierrors.StatusError {
	msg := fmt.Sprintf("admission webhook %q denied the request", name)
	var code int32 = http.StatusForbidden
	reason := apierrors.ReasonForbidden
	if result != nil {
		if result.Message != "" {
			msg += ": " + result.Message
		} else if result.Reason != "" {
			msg += ": " + string(result.Reason)
		} else {
			msg += " without explanation"
		}
		if result.Code >= 400 {
			code = result.Code
			reason = reasonForHTTP(code)
		}
		if result.Reason != "" && apierrors.HTTPCode(apierrors.Reason(result.Reason)) == code {
			reason = apierrors.Reason(result.Reason)
		}
	} else {
		msg += " without explanation"
	}
	return &apierrors.StatusError{Reason: reason, Code: code, Message: msg}
}

func reasonForHTTP(code int32) apierrors.Reason {
	for _, r := range []apierrors.Reason{
		apierrors.ReasonForbidden, apierrors.ReasonBadRequest, apierrors.ReasonUnauthorized, apierrors.ReasonNotFound,
		apierrors.ReasonConflict, apierrors.ReasonInvalid, apierrors.ReasonTooManyRequests, apierrors.ReasonInternalError,
		apierrors.ReasonServiceUnavailable, apierrors.ReasonTimeout, apierrors.ReasonRequestEntityTooLarge,
	} {
		if apierrors.HTTPCode(r) == code {
			return r
		}
	}
	return apierrors.ReasonForbidden
}

// call sends the AdmissionReview and returns the validated response and the
// object JSON that was sent (for patching).
func (w *Webhooks) call(ctx context.Context, h *hook, a *request.Admission) (*admissionv1.AdmissionResponse, []byte, error) {
	review, objJSON, err := buildReview(a)
	if err != nil {
		return nil, nil, err
	}
	body, err := json.Marshal(review)
	if err != nil {
		return nil, nil, fmt.Errorf("encode AdmissionReview: %w", err)
	}
	target, client, err := w.endpoint(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to call webhook: %w", err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read response: %w", err)
	}
	if len(data) > maxResponseBytes {
		return nil, nil, fmt.Errorf("response larger than %d bytes", maxResponseBytes)
	}
	if res.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("webhook answered HTTP %d: %s", res.StatusCode, truncate(string(data), 200))
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, nil, fmt.Errorf("decode AdmissionReview response: %w", err)
	}
	if out.Response == nil {
		return nil, nil, errors.New("webhook response was absent")
	}
	if out.Response.UID != review.Request.UID {
		return nil, nil, fmt.Errorf("expected response.uid=%q, got %q", review.Request.UID, out.Response.UID)
	}
	if out.APIVersion != "" && out.APIVersion != "admission.k8s.io/v1" {
		return nil, nil, fmt.Errorf("expected webhook response of admission.k8s.io/v1, got %s", out.APIVersion)
	}
	return out.Response, objJSON, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// buildReview builds the AdmissionReview v1 request for a.
func buildReview(a *request.Admission) (*admissionv1.AdmissionReview, []byte, error) {
	var objJSON, oldJSON []byte
	var err error
	kindOf := a.Object
	if a.Object != nil && a.Object.ProtoReflect().IsValid() {
		if objJSON, err = kubejson.Marshal(a.Object); err != nil {
			return nil, nil, fmt.Errorf("encode object: %w", err)
		}
	}
	if a.OldObject != nil && a.OldObject.ProtoReflect().IsValid() {
		if oldJSON, err = kubejson.Marshal(a.OldObject); err != nil {
			return nil, nil, fmt.Errorf("encode old object: %w", err)
		}
		if kindOf == nil || !kindOf.ProtoReflect().IsValid() {
			kindOf = a.OldObject
		}
	}
	var gvk metav1.GroupVersionKind
	if kindOf != nil {
		if av, kind, ok := kubejson.TypeMeta(kindOf.ProtoReflect().Descriptor()); ok {
			gv, _ := schema.ParseGroupVersion(av)
			gvk = metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: kind}
		}
	}
	gvr := metav1.GroupVersionResource{Group: a.APIGroup, Version: a.APIVersion, Resource: a.Resource}
	name := a.Name
	if name == "" {
		name = metaString(a.Object, "name")
	}
	dry := a.DryRun
	req := &admissionv1.AdmissionRequest{
		UID:                types.UID(uuid.NewString()),
		Kind:               gvk,
		Resource:           gvr,
		SubResource:        a.Subresource,
		RequestKind:        &gvk,
		RequestResource:    &gvr,
		RequestSubResource: a.Subresource,
		Name:               name,
		Namespace:          a.Namespace,
		Operation:          admissionv1.Operation(a.Operation),
		UserInfo:           authnv1.UserInfo{Username: a.User.Name, UID: a.User.UID, Groups: a.User.Groups},
		DryRun:             &dry,
	}
	if objJSON != nil {
		req.Object = runtime.RawExtension{Raw: objJSON}
	}
	if oldJSON != nil {
		req.OldObject = runtime.RawExtension{Raw: oldJSON}
	}
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	}, objJSON, nil
}

// applyPatch applies a mutating webhook's JSON patch to the object's
// Kubernetes JSON and decodes the result back into a.Object. Fields the
// schema does not know are dropped, as Kubernetes prunes them.
func applyPatch(h *hook, resp *admissionv1.AdmissionResponse, objJSON []byte, a *request.Admission) (changed bool, _ error) {
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		return false, fmt.Errorf("webhook %q returned a patch without patchType JSONPatch", h.name)
	}
	if objJSON == nil || a.Object == nil {
		return false, fmt.Errorf("webhook %q returned a patch for a request without an object", h.name)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		return false, fmt.Errorf("decode JSON patch: %w", err)
	}
	patched, err := patch.Apply(objJSON)
	if err != nil {
		return false, fmt.Errorf("apply JSON patch: %w", err)
	}
	fresh := a.Object.ProtoReflect().New().Interface()
	if err := kubejson.Unmarshal(patched, fresh, kubejson.Options{DiscardUnknown: true}); err != nil {
		return false, fmt.Errorf("decode patched object: %w", err)
	}
	if proto.Equal(fresh, a.Object) {
		return false, nil
	}
	proto.Reset(a.Object)
	proto.Merge(a.Object, fresh)
	return true, nil
}

// isNamespace reports whether m is a core/v1 Namespace.
func isNamespace(m proto.Message) bool {
	d := m.ProtoReflect().Descriptor()
	return d.Name() == "Namespace" && d.FullName().Parent() == "kplane.core.v1"
}

// metaString reads metadata.<field> of a kplane object.
func metaString(m proto.Message, field string) string {
	if m == nil || !m.ProtoReflect().IsValid() {
		return ""
	}
	msg := m.ProtoReflect()
	md := msg.Descriptor().Fields().ByName("metadata")
	if md == nil || md.Message() == nil || !msg.Has(md) {
		return ""
	}
	meta := msg.Get(md).Message()
	f := meta.Descriptor().Fields().ByName(protoreflect.Name(field))
	if f == nil {
		return ""
	}
	return meta.Get(f).String()
}

// endpoint returns the URL to post to and an HTTPS client trusting the
// webhook's caBundle (the system roots when it has none).
func (w *Webhooks) endpoint(ctx context.Context, h *hook) (string, *http.Client, error) {
	cc := h.clientConfig
	var target, dialAddr, serverName string
	switch {
	case cc.URL != nil && *cc.URL != "":
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return "", nil, fmt.Errorf("invalid url: %w", err)
		}
		if u.Scheme != "https" {
			return "", nil, fmt.Errorf("webhook url %q: scheme must be https", *cc.URL)
		}
		target = u.String()
	case cc.Service != nil:
		s := cc.Service
		port := int32(443)
		if s.Port != nil && *s.Port != 0 {
			port = *s.Port
		}
		path := ""
		if s.Path != nil {
			path = *s.Path
		}
		if path != "" && !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		serverName = s.Name + "." + s.Namespace + ".svc"
		target = "https://" + net.JoinHostPort(serverName, strconv.Itoa(int(port))) + path
		if w.cfg.ResolveService != nil {
			addr, err := w.cfg.ResolveService(ctx, s.Namespace, s.Name, port)
			if err != nil {
				return "", nil, fmt.Errorf("resolve service %s/%s:%d: %w", s.Namespace, s.Name, port, err)
			}
			dialAddr = addr
		}
	default:
		return "", nil, errors.New("clientConfig has neither url nor service")
	}
	key := h.config + "\x00" + h.name + "\x00" + string(cc.CABundle) + "\x00" + dialAddr + "\x00" + serverName
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.clients[key]; ok {
		return target, c, nil
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if len(cc.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cc.CABundle) {
			return "", nil, errors.New("caBundle holds no PEM certificate")
		}
		tlsCfg.RootCAs = pool
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}
	if dialAddr != "" {
		d := &net.Dialer{Timeout: 10 * time.Second}
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, dialAddr)
		}
	}
	c := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// Drop clients of webhooks that no longer exist or changed, so the map
	// stays bounded by the configured webhooks.
	if len(w.clients) > 4*w.hookCountLocked()+16 {
		for k, old := range w.clients {
			old.CloseIdleConnections()
			delete(w.clients, k)
		}
	}
	w.clients[key] = c
	return target, c, nil
}

func (w *Webhooks) hookCountLocked() int {
	n := 0
	for _, c := range w.mutating {
		n += len(c.Webhooks)
	}
	for _, c := range w.validating {
		n += len(c.Webhooks)
	}
	return n
}
