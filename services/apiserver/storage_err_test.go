// This file holds the tests of how store errors become API errors.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/proto/apierrors"
)

// TestStoreErr: a store that gave up in time answers 504 Timeout, as
// kube-apiserver does, never 500.
func TestStoreErr(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want apierrors.Reason
	}{
		{"deadline", fmt.Errorf("get: %w", context.DeadlineExceeded), apierrors.ReasonTimeout},
		{"store timeout", rpctypes.ErrTimeout, apierrors.ReasonTimeout},
		{"leader failed", rpctypes.ErrTimeoutDueToLeaderFail, apierrors.ReasonTimeout},
		{"connection lost", rpctypes.ErrTimeoutDueToConnectionLost, apierrors.ReasonTimeout},
		{"grpc deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), apierrors.ReasonTimeout},
		{"too large", rpctypes.ErrRequestTooLarge, apierrors.ReasonRequestEntityTooLarge},
		{"compacted", rpctypes.ErrCompacted, apierrors.ReasonExpired},
		{"other", errors.New("disk on fire"), apierrors.ReasonInternalError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := apierrors.ReasonOf(storeErr(tt.err)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
