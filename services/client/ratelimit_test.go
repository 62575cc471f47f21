// This file holds the test of the client-side rate limit and the calls it
// leaves alone.

package client

import (
	"context"
	"testing"

	"google.golang.org/grpc"
)

func TestRateLimit(t *testing.T) {
	if i, err := RateLimit(0, 0); i != nil || err != nil {
		t.Fatalf("qps 0: got %v, %v; want no interceptor", i != nil, err)
	}
	if _, err := RateLimit(10, 0); err == nil {
		t.Fatal("burst 0 with qps 10: want an error")
	}
	// 1 call per hour after a burst of 2: the third pod call must wait, and
	// gives up when its context ends; events and leases never wait.
	limit, err := RateLimit(1.0/3600, 2)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		return nil
	}
	ctx := context.Background()
	for range 2 {
		if err := limit(ctx, "/kplane.core.v1.PodService/CreatePod", nil, nil, nil, invoke); err != nil {
			t.Fatalf("call within the burst: %v", err)
		}
	}
	for _, m := range []string{"/kplane.core.v1.EventService/CreateEvent", "/kplane.coordination.v1.LeaseService/UpdateLease"} {
		if err := limit(ctx, m, nil, nil, nil, invoke); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = limit(cctx, "/kplane.core.v1.PodService/CreatePod", nil, nil, nil, invoke)
	if err == nil {
		t.Fatalf("call over the limit: got %v, want it refused", err)
	}
	if calls != 4 {
		t.Fatalf("%d calls went through, want 4", calls)
	}
}
