// This file holds the audit webhook backend: events POSTed as audit.k8s.io/v1
// EventLists to the server a kubeconfig file names, as kube-apiserver's
// --audit-webhook-config-file does, through k8s.io/apiserver's own webhook
// backend (retries with backoff) and, in batch mode, its buffered backend
// (batches of up to 400 events or 30 s, throttled to 10 batches a second).

package audit

import (
	"fmt"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	k8saudit "k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/plugin/pkg/audit/buffered"
	"k8s.io/apiserver/plugin/pkg/audit/webhook"
)

// Webhook modes, as kube-apiserver's --audit-webhook-mode names them.
const (
	WebhookBatch    = "batch"
	WebhookBlocking = "blocking"
)

// WebhookConfig configures a Webhook.
type WebhookConfig struct {
	// ConfigFile is a kubeconfig naming the server (its cluster) and the
	// credentials to present (its user).
	ConfigFile string
	// Mode is batch (the default: events are buffered and sent
	// asynchronously) or blocking (each event is sent before the request
	// goes on). kube-apiserver's blocking-strict is not supported.
	Mode string
	// InitialBackoff is the wait before the first retry (default 10 s,
	// kube-apiserver's).
	InitialBackoff time.Duration
}

// Webhook sends audit events to a webhook. Start it with Run and flush it
// with Shutdown.
type Webhook struct {
	backend k8saudit.Backend
}

// NewWebhook builds the backend cfg describes.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	backoff := cfg.InitialBackoff
	if backoff <= 0 {
		backoff = 10 * time.Second
	}
	b, err := webhook.NewBackend(cfg.ConfigFile, auditv1.SchemeGroupVersion,
		wait.Backoff{Duration: backoff, Factor: 1.5, Jitter: 0.2, Steps: 5}, nil)
	if err != nil {
		return nil, fmt.Errorf("audit webhook: %w", err)
	}
	switch cfg.Mode {
	case "", WebhookBatch:
		// kube-apiserver's --audit-webhook-batch-* defaults.
		b = buffered.NewBackend(b, buffered.BatchConfig{BufferSize: 10000, MaxBatchSize: 400, MaxBatchWait: 30 * time.Second,
			ThrottleEnable: true, ThrottleQPS: 10, ThrottleBurst: 15, AsyncDelegate: true})
	case WebhookBlocking:
	default:
		return nil, fmt.Errorf("audit webhook: mode %q: supported values: %q, %q", cfg.Mode, WebhookBatch, WebhookBlocking)
	}
	return &Webhook{backend: b}, nil
}

// Run starts sending until stop is closed.
func (w *Webhook) Run(stop <-chan struct{}) error { return w.backend.Run(stop) }

// Shutdown sends what is buffered and stops.
func (w *Webhook) Shutdown() { w.backend.Shutdown() }

// Log hands e to the backend (in blocking mode: sends it).
func (w *Webhook) Log(e *Event) error {
	ev := e.internal()
	if !w.backend.ProcessEvents(ev) {
		return fmt.Errorf("audit webhook: event %s not sent", e.AuditID)
	}
	return nil
}

// StageTimingsAnnotation carries an event's stage timings (kplane's
// addition) in the Kubernetes event the webhook receives:
// "authn=12µs,authz=30µs,...".
const StageTimingsAnnotation = "kplane.io/stage-timings"

// internal is e as k8s.io/apiserver's audit event.
func (e *Event) internal() *auditinternal.Event {
	out := &auditinternal.Event{
		Level:                    auditinternal.Level(e.Level),
		AuditID:                  types.UID(e.AuditID),
		Stage:                    auditinternal.Stage(e.Stage),
		RequestURI:               e.RequestURI,
		Verb:                     e.Verb,
		User:                     authnv1.UserInfo{Username: e.User.Username, UID: e.User.UID, Groups: e.User.Groups, Extra: extraOf(e.User)},
		SourceIPs:                e.SourceIPs,
		UserAgent:                e.UserAgent,
		RequestReceivedTimestamp: metav1.NewMicroTime(e.RequestReceivedTimestamp),
		StageTimestamp:           metav1.NewMicroTime(e.StageTimestamp),
	}
	if e.ImpersonatedUser != nil {
		out.ImpersonatedUser = &authnv1.UserInfo{Username: e.ImpersonatedUser.Username, UID: e.ImpersonatedUser.UID, Groups: e.ImpersonatedUser.Groups, Extra: extraOf(*e.ImpersonatedUser)}
	}
	if r := e.ObjectRef; r != nil {
		out.ObjectRef = &auditinternal.ObjectReference{Resource: r.Resource, Namespace: r.Namespace, Name: r.Name,
			APIGroup: r.APIGroup, APIVersion: r.APIVersion, Subresource: r.Subresource}
	}
	if s := e.ResponseStatus; s != nil {
		out.ResponseStatus = &metav1.Status{Code: s.Code, Reason: metav1.StatusReason(s.Reason), Message: s.Message}
	}
	if len(e.RequestObject) > 0 {
		out.RequestObject = &runtime.Unknown{Raw: e.RequestObject, ContentType: runtime.ContentTypeJSON}
	}
	if len(e.ResponseObject) > 0 {
		out.ResponseObject = &runtime.Unknown{Raw: e.ResponseObject, ContentType: runtime.ContentTypeJSON}
	}
	if len(e.Annotations) > 0 || len(e.StageTimings) > 0 {
		out.Annotations = map[string]string{}
		for k, v := range e.Annotations {
			out.Annotations[k] = v
		}
		if len(e.StageTimings) > 0 {
			var b []byte
			for i, st := range e.StageTimings {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, st.Name...)
				b = append(b, '=')
				b = append(b, (time.Duration(st.Micros) * time.Microsecond).String()...)
			}
			out.Annotations[StageTimingsAnnotation] = string(b)
		}
	}
	return out
}

// Multi sends each event to every one of its auditors (the log and the
// webhook); the first error is returned after all were tried.
type Multi []interface{ Log(*Event) error }

// Log hands e to each auditor.
func (m Multi) Log(e *Event) error {
	var first error
	for _, a := range m {
		if err := a.Log(e); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// extraOf is u's extra in the form of k8s.io/api's UserInfo.
func extraOf(u UserInfo) map[string]authnv1.ExtraValue {
	if len(u.Extra) == 0 {
		return nil
	}
	out := make(map[string]authnv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		out[k] = authnv1.ExtraValue(v)
	}
	return out
}
