// This file holds the tests that each API error maps to one gRPC code, HTTP
// status and Kubernetes message, and that a plain gRPC status reads back as
// an error.

package apierrors

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrorsMapOneToOne(t *testing.T) {
	tests := []struct {
		name     string
		err      *StatusError
		wantGRPC codes.Code
		wantHTTP int32
		wantMsg  string
	}{
		{name: "not found", err: NewNotFound("", "pods", "web"), wantGRPC: codes.NotFound, wantHTTP: 404, wantMsg: `pods "web" not found`},
		{name: "already exists", err: NewAlreadyExists("apps", "deployments", "web"), wantGRPC: codes.AlreadyExists, wantHTTP: 409, wantMsg: `deployments.apps "web" already exists`},
		{name: "conflict", err: NewConflict("", "pods", "web", ConflictModified), wantGRPC: codes.Aborted, wantHTTP: 409,
			wantMsg: `Operation cannot be fulfilled on pods "web": the object has been modified; please apply your changes to the latest version and try again`},
		{name: "invalid one cause", err: NewInvalid("", "Pod", "web", []Cause{{Type: "FieldValueRequired", Message: "Required value", Field: "spec.containers[0].image"}}),
			wantGRPC: codes.InvalidArgument, wantHTTP: 422, wantMsg: `Pod "web" is invalid: spec.containers[0].image: Required value`},
		{name: "invalid two causes", err: NewInvalid("", "Pod", "web", []Cause{{Message: "Required value", Field: "a"}, {Message: "Invalid value", Field: "b"}}),
			wantGRPC: codes.InvalidArgument, wantHTTP: 422, wantMsg: `Pod "web" is invalid: [a: Required value, b: Invalid value]`},
		{name: "forbidden", err: NewForbidden("", "pods", "", `User "bob" cannot list resource "pods" in API group "" in the namespace "default"`),
			wantGRPC: codes.PermissionDenied, wantHTTP: 403, wantMsg: `pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "default"`},
		{name: "unauthorized", err: NewUnauthorized(""), wantGRPC: codes.Unauthenticated, wantHTTP: 401, wantMsg: "Unauthorized"},
		{name: "expired", err: NewResourceExpired("too old resource version: 5 (20)"), wantGRPC: codes.OutOfRange, wantHTTP: 410, wantMsg: "too old resource version: 5 (20)"},
		{name: "too large", err: NewRequestEntityTooLarge("limit is 3145728"), wantGRPC: codes.ResourceExhausted, wantHTTP: 413, wantMsg: "Request entity too large: limit is 3145728"},
		{name: "bad request", err: NewBadRequest("bad"), wantGRPC: codes.InvalidArgument, wantHTTP: 400, wantMsg: "bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.GRPCCode(); got != tt.wantGRPC {
				t.Errorf("gRPC code: got %v, want %v", got, tt.wantGRPC)
			}
			if got := tt.err.Code; got != tt.wantHTTP {
				t.Errorf("HTTP code: got %d, want %d", got, tt.wantHTTP)
			}
			if got := tt.err.Error(); got != tt.wantMsg {
				t.Errorf("message: got %q, want %q", got, tt.wantMsg)
			}
			// Across the wire: a client rebuilds the same error from the status.
			wire := status.Convert(tt.err).Err()
			got := FromError(wire)
			if diff := cmp.Diff(tt.err, got); diff != "" {
				t.Errorf("round trip through gRPC (-sent +received):\n%s", diff)
			}
			// And a wrapped error keeps its reason.
			wrapped := fmt.Errorf("update: %w", tt.err)
			if ReasonOf(wrapped) != tt.err.Reason {
				t.Errorf("ReasonOf(wrapped): got %q, want %q", ReasonOf(wrapped), tt.err.Reason)
			}
		})
	}
}

func TestFromErrorPlainStatus(t *testing.T) {
	got := FromError(status.Error(codes.Aborted, "stale"))
	if got.Reason != ReasonConflict || got.Code != 409 {
		t.Errorf("got reason %q code %d, want Conflict 409", got.Reason, got.Code)
	}
	if FromError(nil) != nil {
		t.Error("FromError(nil): got non-nil")
	}
	if got := FromError(errors.New("boom")); got.Reason != ReasonInternalError {
		t.Errorf("plain error: got reason %q, want InternalError", got.Reason)
	}
}
