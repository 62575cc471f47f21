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
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	arv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/kubejson"
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
	// No selector selects everything, as Kubernetes defaults it to {}.
	if h.namespaceSelector == nil {
		h.namespaceSelector = &metav1.LabelSelector{}
	}
	if h.objectSelector == nil {
		h.objectSelector = &metav1.LabelSelector{}
	}
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
