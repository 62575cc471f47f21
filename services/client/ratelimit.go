// This file holds the client-side rate limit of controllers' unary calls,
// with Event and Lease calls exempt as in Kubernetes' controller manager.

package client

import (
	"context"
	"fmt"
	"strings"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
)

// RateLimit returns a unary client interceptor that lets at most qps calls
// per second through on average, burst at once, as client-go's
// --kube-api-qps/--kube-api-burst token bucket does for Kubernetes'
// controllers: a call waits for a token (or fails when its context ends
// first). qps <= 0 disables the limit (nil is returned).
//
// Event and Lease calls are not counted: in Kubernetes' controller manager
// events go through the event broadcaster (asynchronous, aggregated and
// spam-filtered) and leader election through a client of its own, so that a
// burst of work cannot delay the lease renewal that keeps the leader.
// Watches are streams and are not limited either.
func RateLimit(qps float64, burst int) (grpc.UnaryClientInterceptor, error) {
	if qps <= 0 {
		return nil, nil
	}
	if burst < 1 {
		return nil, fmt.Errorf("client: rate limit burst %d with qps %g: want at least 1", burst, qps)
	}
	lim := rate.NewLimiter(rate.Limit(qps), burst)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !unlimited(method) {
			if err := lim.Wait(ctx); err != nil {
				return fmt.Errorf("client rate limiter (%g qps): %w", qps, err)
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}, nil
}

// unlimited reports whether a call bypasses RateLimit's bucket.
func unlimited(method string) bool {
	return strings.HasPrefix(method, "/kplane.core.v1.EventService/") ||
		strings.HasPrefix(method, "/kplane.coordination.v1.LeaseService/")
}
