// This file holds one webhook call: the AdmissionReview sent, the
// endpoint (a URL or a Service resolved through its endpoints) and its
// client, the response's denial or patch, and Kubernetes' errors for
// each way a call fails.

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
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/uuid"
	admissionv1 "k8s.io/api/admission/v1"
	arv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/request"
)

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
