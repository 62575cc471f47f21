// Package apierrors is kplane's error vocabulary, part of the wire contract
// of the API service: the Kubernetes Status reasons, each tied to one gRPC
// code and one HTTP code.
//
// The API service builds a *StatusError wherever a request is refused and
// turns it into a gRPC status exactly once, at the handler edge (GRPCStatus).
// The status carries a google.rpc.ErrorInfo (reason, kind, name, group) and,
// for Invalid, a google.rpc.BadRequest with one field violation per cause, so
// clients and the gateway can rebuild the same StatusError with FromError and
// render a Kubernetes Status body.
package apierrors

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Reason is a Kubernetes StatusReason.
type Reason string

// The reasons kplane uses, with the names Kubernetes gives them.
const (
	ReasonUnknown               Reason = ""
	ReasonUnauthorized          Reason = "Unauthorized"
	ReasonForbidden             Reason = "Forbidden"
	ReasonNotFound              Reason = "NotFound"
	ReasonAlreadyExists         Reason = "AlreadyExists"
	ReasonConflict              Reason = "Conflict"
	ReasonGone                  Reason = "Gone"
	ReasonExpired               Reason = "Expired"
	ReasonInvalid               Reason = "Invalid"
	ReasonBadRequest            Reason = "BadRequest"
	ReasonMethodNotAllowed      Reason = "MethodNotAllowed"
	ReasonRequestEntityTooLarge Reason = "RequestEntityTooLarge"
	ReasonUnsupportedMediaType  Reason = "UnsupportedMediaType"
	ReasonTimeout               Reason = "Timeout"
	ReasonTooManyRequests       Reason = "TooManyRequests"
	ReasonInternalError         Reason = "InternalError"
	ReasonServiceUnavailable    Reason = "ServiceUnavailable"
)

// errorInfoDomain names kplane as the source of an ErrorInfo detail.
const errorInfoDomain = "kplane.io"

// mapping ties a reason to its HTTP and gRPC codes. One table, used both ways.
var mapping = map[Reason]struct {
	http int32
	grpc codes.Code
}{
	ReasonUnauthorized:          {http.StatusUnauthorized, codes.Unauthenticated},
	ReasonForbidden:             {http.StatusForbidden, codes.PermissionDenied},
	ReasonNotFound:              {http.StatusNotFound, codes.NotFound},
	ReasonAlreadyExists:         {http.StatusConflict, codes.AlreadyExists},
	ReasonConflict:              {http.StatusConflict, codes.Aborted},
	ReasonGone:                  {http.StatusGone, codes.OutOfRange},
	ReasonExpired:               {http.StatusGone, codes.OutOfRange},
	ReasonInvalid:               {http.StatusUnprocessableEntity, codes.InvalidArgument},
	ReasonBadRequest:            {http.StatusBadRequest, codes.InvalidArgument},
	ReasonMethodNotAllowed:      {http.StatusMethodNotAllowed, codes.Unimplemented},
	ReasonRequestEntityTooLarge: {http.StatusRequestEntityTooLarge, codes.ResourceExhausted},
	ReasonTimeout:               {http.StatusGatewayTimeout, codes.DeadlineExceeded},
	ReasonTooManyRequests:       {http.StatusTooManyRequests, codes.Unavailable},
	ReasonInternalError:         {http.StatusInternalServerError, codes.Internal},
	ReasonServiceUnavailable:    {http.StatusServiceUnavailable, codes.Unavailable},
}

// Cause is one field-level problem, as in a Kubernetes StatusCause.
type Cause struct {
	Type    string // FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, FieldValueDuplicate, FieldValueForbidden, FieldValueTooLong, FieldValueTypeInvalid
	Message string
	Field   string // e.g. spec.containers[0].image
}

// StatusError is an API error that knows its Kubernetes reason and codes.
type StatusError struct {
	Reason  Reason
	Code    int32 // HTTP status code
	Message string
	Group   string // API group of the object, "" for core
	Kind    string // resource (plural) or kind the error is about
	Name    string
	Causes  []Cause
	// RetryAfterSeconds is set for TooManyRequests and ServiceUnavailable.
	RetryAfterSeconds int32
}

func (e *StatusError) Error() string { return e.Message }

// GRPCCode is the gRPC code for the error's reason.
func (e *StatusError) GRPCCode() codes.Code {
	if m, ok := mapping[e.Reason]; ok {
		return m.grpc
	}
	return codes.Unknown
}

// GRPCStatus turns the error into a gRPC status carrying its reason, object
// and causes as standard error details. grpc-go calls it when a handler
// returns a *StatusError.
func (e *StatusError) GRPCStatus() *status.Status {
	st := status.New(e.GRPCCode(), e.Message)
	info := &errdetails.ErrorInfo{
		Reason: string(e.Reason),
		Domain: errorInfoDomain,
		Metadata: map[string]string{
			"group": e.Group,
			"kind":  e.Kind,
			"name":  e.Name,
		},
	}
	if e.RetryAfterSeconds > 0 {
		info.Metadata["retryAfterSeconds"] = fmt.Sprint(e.RetryAfterSeconds)
	}
	var withDetails *status.Status
	var err error
	if len(e.Causes) > 0 {
		br := &errdetails.BadRequest{}
		for _, c := range e.Causes {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
				Field:       c.Field,
				Description: c.Message,
				Reason:      c.Type,
			})
		}
		withDetails, err = st.WithDetails(info, br)
	} else {
		withDetails, err = st.WithDetails(info)
	}
	if err != nil {
		return st
	}
	return withDetails
}

// FromError recovers a *StatusError from err: either one in err's chain, or
// one rebuilt from a gRPC status (as received by a client). A gRPC status
// without kplane's details gets the reason that matches its code. It returns
// nil for a nil err.
func FromError(err error) *StatusError {
	if err == nil {
		return nil
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se
	}
	st, ok := status.FromError(err)
	if !ok {
		return NewInternalError(err)
	}
	out := &StatusError{Message: st.Message(), Reason: reasonForCode(st.Code())}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() != errorInfoDomain {
				continue
			}
			out.Reason = Reason(d.GetReason())
			out.Group = d.GetMetadata()["group"]
			out.Kind = d.GetMetadata()["kind"]
			out.Name = d.GetMetadata()["name"]
			fmt.Sscan(d.GetMetadata()["retryAfterSeconds"], &out.RetryAfterSeconds)
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				out.Causes = append(out.Causes, Cause{Type: v.GetReason(), Message: v.GetDescription(), Field: v.GetField()})
			}
		}
	}
	out.Code = HTTPCode(out.Reason)
	return out
}

func reasonForCode(c codes.Code) Reason {
	switch c {
	case codes.Unauthenticated:
		return ReasonUnauthorized
	case codes.PermissionDenied:
		return ReasonForbidden
	case codes.NotFound:
		return ReasonNotFound
	case codes.AlreadyExists:
		return ReasonAlreadyExists
	case codes.Aborted:
		return ReasonConflict
	case codes.OutOfRange:
		return ReasonExpired
	case codes.InvalidArgument:
		return ReasonBadRequest
	case codes.Unimplemented:
		return ReasonMethodNotAllowed
	case codes.ResourceExhausted:
		return ReasonRequestEntityTooLarge
	case codes.DeadlineExceeded:
		return ReasonTimeout
	case codes.Unavailable:
		return ReasonServiceUnavailable
	default:
		return ReasonInternalError
	}
}

// HTTPCode is the HTTP status code for a reason (500 for unknown reasons).
func HTTPCode(r Reason) int32 {
	if m, ok := mapping[r]; ok {
		return m.http
	}
	return http.StatusInternalServerError
}

// ReasonOf returns the reason of err (ReasonUnknown if it has none).
func ReasonOf(err error) Reason {
	if se := FromError(err); se != nil {
		return se.Reason
	}
	return ReasonUnknown
}

// Is* report whether err has the given reason, wherever it came from.
func IsNotFound(err error) bool      { return err != nil && ReasonOf(err) == ReasonNotFound }
func IsAlreadyExists(err error) bool { return err != nil && ReasonOf(err) == ReasonAlreadyExists }
func IsConflict(err error) bool      { return err != nil && ReasonOf(err) == ReasonConflict }
func IsInvalid(err error) bool       { return err != nil && ReasonOf(err) == ReasonInvalid }
func IsForbidden(err error) bool     { return err != nil && ReasonOf(err) == ReasonForbidden }
func IsUnauthorized(err error) bool  { return err != nil && ReasonOf(err) == ReasonUnauthorized }
func IsGone(err error) bool {
	r := ReasonOf(err)
	return err != nil && (r == ReasonGone || r == ReasonExpired)
}

func newError(r Reason, group, kind, name, msg string) *StatusError {
	return &StatusError{Reason: r, Code: HTTPCode(r), Group: group, Kind: kind, Name: name, Message: msg}
}

// qualified is "pods" or "deployments.apps", as Kubernetes names a resource in messages.
func qualified(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// NewNotFound: `pods "web" not found`.
func NewNotFound(group, resource, name string) *StatusError {
	return newError(ReasonNotFound, group, resource, name, fmt.Sprintf("%s %q not found", qualified(group, resource), name))
}

// NewAlreadyExists: `pods "web" already exists`.
func NewAlreadyExists(group, resource, name string) *StatusError {
	return newError(ReasonAlreadyExists, group, resource, name, fmt.Sprintf("%s %q already exists", qualified(group, resource), name))
}

// NewConflict: `Operation cannot be fulfilled on pods "web": <why>`.
func NewConflict(group, resource, name, why string) *StatusError {
	return newError(ReasonConflict, group, resource, name, fmt.Sprintf("Operation cannot be fulfilled on %s %q: %s", qualified(group, resource), name, why))
}

// ConflictModified is the reason Kubernetes gives for a stale resourceVersion.
const ConflictModified = "the object has been modified; please apply your changes to the latest version and try again"

// NewInvalid: `Pod "web" is invalid: [spec.containers[0].image: Required value, ...]`.
// kind is the object's Kind (e.g. Pod), qualified with a non-core group as
// Kubernetes does (`Deployment.apps "web" is invalid`); every cause is listed.
func NewInvalid(group, kind, name string, causes []Cause) *StatusError {
	// The message lists each distinct cause once, as Kubernetes'
	// aggregate does; the causes keep every one.
	parts := make([]string, 0, len(causes))
	seen := make(map[string]bool, len(causes))
	for _, c := range causes {
		part := c.Message
		if c.Field != "" {
			part = c.Field + ": " + c.Message
		}
		if !seen[part] {
			seen[part] = true
			parts = append(parts, part)
		}
	}
	qk := kind
	if group != "" {
		qk += "." + group
	}
	msg := fmt.Sprintf("%s %q is invalid", qk, name)
	switch len(parts) {
	case 0:
	case 1:
		msg += ": " + parts[0]
	default:
		msg += ": [" + strings.Join(parts, ", ") + "]"
	}
	e := newError(ReasonInvalid, group, kind, name, msg)
	e.Causes = causes
	return e
}

// NewForbidden: `pods "web" is forbidden: <why>`.
func NewForbidden(group, resource, name, why string) *StatusError {
	target := qualified(group, resource)
	if name != "" {
		target += fmt.Sprintf(" %q", name)
	}
	return newError(ReasonForbidden, group, resource, name, fmt.Sprintf("%s is forbidden: %s", target, why))
}

// NewUnauthorized: 401 with the given message ("Unauthorized" if empty).
func NewUnauthorized(msg string) *StatusError {
	if msg == "" {
		msg = "Unauthorized"
	}
	return newError(ReasonUnauthorized, "", "", "", msg)
}

// NewGone: a watch or list from a resourceVersion that is no longer available.
func NewGone(msg string) *StatusError { return newError(ReasonGone, "", "", "", msg) }

// NewResourceExpired: "too old resource version: 5 (20)", as Kubernetes says it.
func NewResourceExpired(msg string) *StatusError { return newError(ReasonExpired, "", "", "", msg) }

// NewBadRequest: a malformed request.
func NewBadRequest(msg string) *StatusError { return newError(ReasonBadRequest, "", "", "", msg) }

// NewRequestEntityTooLarge: a body or object over the limit.
func NewRequestEntityTooLarge(msg string) *StatusError {
	return newError(ReasonRequestEntityTooLarge, "", "", "", "Request entity too large: "+msg)
}

// NewMethodNotSupported: the verb is not supported on the resource.
func NewMethodNotSupported(group, resource, verb string) *StatusError {
	return newError(ReasonMethodNotAllowed, group, resource, "", fmt.Sprintf("%s is not supported on resources of kind %q", verb, qualified(group, resource)))
}

// NewTimeout: the server could not finish in time.
func NewTimeout(msg string) *StatusError { return newError(ReasonTimeout, "", "", "", msg) }

// NewTooLargeResourceVersion is kube-apiserver's answer to a read at a
// resourceVersion the store has not reached: 504 Timeout, retry after a
// second, with the ResourceVersionTooLarge cause client-go's reflector
// looks for.
func NewTooLargeResourceVersion(requested, current int64) *StatusError {
	e := newError(ReasonTimeout, "", "", "", fmt.Sprintf("Timeout: Too large resource version: %d, current: %d", requested, current))
	e.Causes = []Cause{{Type: CauseResourceVersionTooLarge, Message: "Too large resource version"}}
	e.RetryAfterSeconds = 1
	return e
}

// CauseResourceVersionTooLarge is the cause type of NewTooLargeResourceVersion.
const CauseResourceVersionTooLarge = "ResourceVersionTooLarge"

// NewTooManyRequests: the server is busy; the client backs off and retries.
func NewTooManyRequests(msg string) *StatusError {
	return newError(ReasonTooManyRequests, "", "", "", msg)
}

// NewServiceUnavailable: try again later.
func NewServiceUnavailable(msg string) *StatusError {
	return newError(ReasonServiceUnavailable, "", "", "", msg)
}

// NewInternalError wraps an unexpected error.
func NewInternalError(err error) *StatusError {
	return newError(ReasonInternalError, "", "", "", fmt.Sprintf("Internal error occurred: %v", err))
}

// WarningHeader is the gRPC response header that carries a warning to the
// client, in Kubernetes' Warning header form (`299 - "<text>"`); the
// gateway passes it on as Warning.
const WarningHeader = "warning"

// FlowSchemaUIDHeader and PriorityLevelUIDHeader are the gRPC response
// headers that name the FlowSchema and priority level API Priority and
// Fairness classified a call into; the gateway passes them on as
// kube-apiserver's X-Kubernetes-PF-FlowSchema-UID and
// X-Kubernetes-PF-PriorityLevel-UID.
const (
	FlowSchemaUIDHeader    = "x-kubernetes-pf-flowschema-uid"
	PriorityLevelUIDHeader = "x-kubernetes-pf-prioritylevel-uid"
)

// WarningValue formats text as a Warning header value with
// apimachinery's NewWarningHeader, as kube-apiserver writes it; text with
// control characters is dropped from the header, as there.
func WarningValue(text string) string {
	v, err := utilnet.NewWarningHeader(299, "-", text)
	if err != nil {
		return ""
	}
	return v
}
