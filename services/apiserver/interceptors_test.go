// This file holds the tests of the in-flight limits.

package apiserver

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// mastersAuthn authenticates the bearer token "root" as a member of
// system:masters and any other as a plain user.
type mastersAuthn struct{}

func (mastersAuthn) Authenticate(ctx context.Context) (request.User, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 && v[0] == "Bearer root" {
		return request.User{Name: "root", Groups: []string{request.MastersGroup}}, nil
	}
	return request.User{Name: "alice", Groups: []string{request.AuthenticatedGroup}}, nil
}

// TestInflightLimits: with every write slot taken, another write gets 429
// with Retry-After 1 while reads and system:masters still go through; a
// freed slot serves the next write.
func TestInflightLimits(t *testing.T) {
	counter, _ := noop.NewMeterProvider().Meter("").Int64Counter("throttled")
	s := &Server{cfg: Config{Authenticator: mastersAuthn{}}, inflight: newInflight(1, 1), throttled: counter}
	write := &grpc.UnaryServerInfo{FullMethod: "/kplane.core.v1.PodService/CreatePod"}
	read := &grpc.UnaryServerInfo{FullMethod: "/kplane.core.v1.PodService/ListPods"}
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	as := func(token string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
	}

	// One write holds the only write slot until released.
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.limitInflight(as("alice"), nil, write, func(context.Context, any) (any, error) {
			close(entered)
			<-release
			return "ok", nil
		})
	}()
	<-entered

	_, err := s.limitInflight(as("alice"), nil, write, ok)
	se := apierrors.FromError(err)
	if se == nil || se.Code != 429 || se.Reason != apierrors.ReasonTooManyRequests || se.RetryAfterSeconds != 1 ||
		se.Message != "Too many requests, please try again later." {
		t.Fatalf("a write over the limit: got %v (%+v), want 429 retrying after 1 s", err, se)
	}
	if v, err := s.limitInflight(as("alice"), nil, read, ok); err != nil || v != "ok" {
		t.Errorf("a read while the writes are full: %v %v", v, err)
	}
	if v, err := s.limitInflight(as("root"), nil, write, ok); err != nil || v != "ok" {
		t.Errorf("system:masters over the limit: %v %v, want served", v, err)
	}
	health := &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}
	if _, err := s.limitInflight(as("alice"), nil, health, ok); err != nil {
		t.Errorf("health check over the limit: %v", err)
	}
	close(release)
	<-done
	if v, err := s.limitInflight(as("alice"), nil, write, ok); err != nil || v != "ok" {
		t.Errorf("a write after the slot was freed: %v %v", v, err)
	}
}
