// Package audit writes the API service's audit log: one JSON line per
// request stage that reached authentication, in the shape of Kubernetes'
// audit.k8s.io/v1 Event, at the level and stages an audit Policy gives
// (policy.go; without one, level Metadata at stage ResponseComplete), plus
// kplane's per-stage timings. The file is rotated by size
// (gopkg.in/natefinch/lumberjack.v2); "-" writes to standard output.
//
// The apiserver gives each request an ID from NewID as soon as it arrives,
// returns it to the client in the gRPC header "audit-id" (HeaderKey), records
// stage timings on an *Event as the request goes through the write path, and
// calls Logger.Log once when the response is known.
package audit

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// HeaderKey is the gRPC response header (and HTTP header, via the gateway)
// that carries a request's audit ID.
const HeaderKey = "audit-id"

// NewID returns a fresh audit ID: a random (version 4) UUID, as Kubernetes uses.
func NewID() string {
	id, err := uuid.NewRandomFromReader(rand.Reader)
	if err != nil {
		// crypto/rand does not fail on supported platforms; keep a usable ID anyway.
		return uuid.NewString()
	}
	return id.String()
}

// Config configures a Logger.
type Config struct {
	// Path is the log file; "-" is standard output. Empty disables the
	// audit log (New returns nil).
	Path string
	// MaxSizeMB rotates the file when it would grow past this size; default 100.
	MaxSizeMB int
	// MaxBackups is how many rotated files are kept; 0 keeps them all.
	MaxBackups int
	// MaxAgeDays removes rotated files older than this; 0 keeps them forever.
	MaxAgeDays int
}

// Logger appends events to the audit log. It is safe for concurrent use;
// a nil *Logger discards everything.
type Logger struct {
	mu  sync.Mutex
	out io.WriteCloser
}

// New opens the audit log described by cfg. With an empty Path it returns a
// nil *Logger, which discards events.
func New(cfg Config) (*Logger, error) {
	if cfg.Path == "" {
		return nil, nil
	}
	if cfg.Path == "-" {
		return &Logger{out: nopCloser{os.Stdout}}, nil
	}
	size := cfg.MaxSizeMB
	if size <= 0 {
		size = 100
	}
	lj := &lumberjack.Logger{Filename: cfg.Path, MaxSize: size, MaxBackups: cfg.MaxBackups, MaxAge: cfg.MaxAgeDays}
	// Open (create) the file now, so a bad path fails at start-up, not on the
	// first request.
	if _, err := lj.Write(nil); err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", cfg.Path, err)
	}
	return &Logger{out: lj}, nil
}

// nopCloser is standard output, which closing the log leaves open.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// NewWriter returns a Logger that writes to w, for tests and for callers
// that bring their own sink.
func NewWriter(w io.WriteCloser) *Logger { return &Logger{out: w} }

// Log writes e as one JSON line. It fills Kind and APIVersion, and Level
// and Stage when they are empty (Metadata, ResponseComplete).
func (l *Logger) Log(e *Event) error {
	if l == nil || e == nil {
		return nil
	}
	e.Kind, e.APIVersion = "Event", "audit.k8s.io/v1"
	if e.Level == "" {
		e.Level = LevelMetadata
	}
	if e.Stage == "" {
		e.Stage = StageResponseComplete
	}
	if e.StageTimestamp.IsZero() {
		e.StageTimestamp = time.Now()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("audit: encode event: %w", err)
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.out.Write(b); err != nil {
		return fmt.Errorf("audit: write: %w", err)
	}
	return nil
}

// Close closes the log file.
func (l *Logger) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.out.Close()
}

// Event is one audit record. Field names follow audit.k8s.io/v1 Event;
// StageTimings is kplane's addition.
type Event struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Level      string `json:"level"`
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	// RequestURI is the HTTP request URI the gateway received, or the
	// gRPC method (/kplane.core.v1.PodService/CreatePod) of a gRPC client.
	RequestURI       string     `json:"requestURI,omitempty"`
	Verb             string     `json:"verb"`
	User             UserInfo   `json:"user"`
	ImpersonatedUser *UserInfo  `json:"impersonatedUser,omitempty"`
	SourceIPs        []string   `json:"sourceIPs,omitempty"`
	UserAgent        string     `json:"userAgent,omitempty"`
	ObjectRef        *ObjectRef `json:"objectRef,omitempty"`
	ResponseStatus   *Status    `json:"responseStatus,omitempty"`
	// RequestObject (levels Request and RequestResponse) and
	// ResponseObject (RequestResponse) are the request's and the
	// response's object in Kubernetes' JSON.
	RequestObject            json.RawMessage   `json:"requestObject,omitempty"`
	ResponseObject           json.RawMessage   `json:"responseObject,omitempty"`
	RequestReceivedTimestamp time.Time         `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time         `json:"stageTimestamp"`
	StageTimings             []StageTiming     `json:"stageTimings,omitempty"`
	Annotations              map[string]string `json:"annotations,omitempty"`
}

// UserInfo is who made the request.
type UserInfo struct {
	Username string   `json:"username"`
	UID      string   `json:"uid,omitempty"`
	Groups   []string `json:"groups,omitempty"`
	// Extra is the authenticator's extra (a ServiceAccount token's
	// credential ID, pod and node), as Kubernetes records it.
	Extra map[string][]string `json:"extra,omitempty"`
}

func userInfo(u request.User) UserInfo {
	out := UserInfo{Username: u.Name, UID: u.UID, Groups: append([]string(nil), u.Groups...)}
	for k, v := range u.Extra {
		if out.Extra == nil {
			out.Extra = map[string][]string{}
		}
		out.Extra[k] = append([]string(nil), v...)
	}
	return out
}

// ObjectRef is what the request was about.
type ObjectRef struct {
	Resource    string `json:"resource,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	APIGroup    string `json:"apiGroup,omitempty"`
	APIVersion  string `json:"apiVersion,omitempty"`
	Subresource string `json:"subresource,omitempty"`
}

// Status is the response, as a Kubernetes Status would give it.
type Status struct {
	Code    int32  `json:"code"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// StageTiming is how long one stage of the write path took.
type StageTiming struct {
	Name string `json:"name"` // authn, authz, admission.mutate, validate, admission.validate, store
	// Micros is the stage's duration in microseconds.
	Micros int64 `json:"durationMicros"`
}

// NewEvent starts an event for a request received at received.
func NewEvent(id string, received time.Time) *Event {
	return &Event{AuditID: id, RequestReceivedTimestamp: received}
}

// SetUser records who made the request (after authentication).
func (e *Event) SetUser(u request.User) {
	e.User = userInfo(u)
}

// SetImpersonatedUser records the user an authenticated user acted as.
func (e *Event) SetImpersonatedUser(u request.User) {
	ui := userInfo(u)
	e.ImpersonatedUser = &ui
}

// SetAttributes records the verb and object the request was about (and the
// user in them, unless the authenticated user was recorded already).
func (e *Event) SetAttributes(a request.Attributes) {
	e.Verb = a.Verb
	if a.User.Name != "" && e.User.Username == "" {
		e.SetUser(a.User)
	}
	e.ObjectRef = &ObjectRef{
		Resource: a.Resource, Namespace: a.Namespace, Name: a.Name,
		APIGroup: a.APIGroup, APIVersion: a.APIVersion, Subresource: a.Subresource,
	}
}

// Timed records that stage name ran from start until now; use it as
// `defer ev.Timed("authz", time.Now())` or call it when the stage ends.
func (e *Event) Timed(name string, start time.Time) {
	e.StageTimings = append(e.StageTimings, StageTiming{Name: name, Micros: time.Since(start).Microseconds()})
}

// SetResponse records the response's HTTP-equivalent code and, for errors,
// its reason and message.
func (e *Event) SetResponse(code int32, reason, message string) {
	e.ResponseStatus = &Status{Code: code, Reason: reason, Message: message}
}

// SetError records the response for err: 200 for nil, else the code, reason
// and message of the Kubernetes Status err maps to.
func (e *Event) SetError(err error) {
	if err == nil {
		e.SetResponse(http.StatusOK, "", "")
		return
	}
	se := apierrors.FromError(err)
	e.SetResponse(se.Code, string(se.Reason), se.Message)
}
