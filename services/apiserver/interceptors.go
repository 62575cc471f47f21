// This file holds the gRPC interceptors every call passes: the request
// timeout (kube-apiserver's --request-timeout), the limits on calls in
// flight (--max-requests-inflight, --max-mutating-requests-inflight) and the
// rule that server reflection, like Kubernetes' discovery, is for
// authenticated callers only.

package apiserver

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// Kubernetes' defaults for --max-requests-inflight and
// --max-mutating-requests-inflight.
const (
	DefaultMaxRequestsInflight         = 400
	DefaultMaxMutatingRequestsInflight = 200
)

// inflight holds the slots of the calls running at once, reads and writes
// apart; a nil channel is no limit.
type inflight struct {
	reads, writes chan struct{}
}

func newInflight(reads, writes int) inflight {
	var f inflight
	if reads > 0 {
		f.reads = make(chan struct{}, reads)
	}
	if writes > 0 {
		f.writes = make(chan struct{}, writes)
	}
	return f
}

// isReadOnly reports whether a method only reads (Get..., List...); every
// other call (creates, updates, deletes, binds, reviews) counts as
// mutating, as in Kubernetes.
func isReadOnly(fullMethod string) bool {
	name := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	return strings.HasPrefix(name, "Get") || strings.HasPrefix(name, "List")
}

// limitInflight runs a unary call if a slot of its kind is free, and
// otherwise refuses it at once as kube-apiserver's max-in-flight filter
// does: 429 TooManyRequests, retry after a second. Members of
// system:masters are never refused, as in Kubernetes. Watches and log
// streams are long-running and not counted. The gRPC health service is
// never limited: a loaded replica must still say it is serving.
func (s *Server) limitInflight(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	slots := s.inflight.writes
	if isReadOnly(info.FullMethod) {
		slots = s.inflight.reads
	}
	if slots == nil || strings.HasPrefix(info.FullMethod, "/grpc.health.") {
		return handler(ctx, req)
	}
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
		return handler(ctx, req)
	default:
	}
	if u, err := s.cfg.Authenticator.Authenticate(ctx); err == nil && slices.Contains(u.Groups, request.MastersGroup) {
		return handler(ctx, req)
	}
	s.throttled.Add(ctx, 1)
	e := apierrors.NewTooManyRequests("Too many requests, please try again later.")
	e.RetryAfterSeconds = 1
	return nil, e
}

// DefaultRequestTimeout is kube-apiserver's default --request-timeout.
const DefaultRequestTimeout = time.Minute

// boundUnary gives every unary call a deadline of at most the request
// timeout, so that no call waits without end on a store member that stopped
// answering: a store call cut short answers 504 Timeout.
func (s *Server) boundUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if t := s.cfg.RequestTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	return handler(ctx, req)
}

// reflectionPrefix starts the methods of gRPC's server reflection service
// (v1 and v1alpha).
const reflectionPrefix = "/grpc.reflection."

// authenticatedReflection lets only authenticated callers list the
// services and their schemas, as kube-apiserver serves discovery and
// OpenAPI to system:authenticated only. Other streams pass untouched.
func (s *Server) authenticatedReflection(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if strings.HasPrefix(info.FullMethod, reflectionPrefix) {
		u, err := s.cfg.Authenticator.Authenticate(ss.Context())
		if err != nil || u.Name == "" || u.Name == request.AnonymousUser {
			return status.Error(codes.Unauthenticated, "Unauthorized: server reflection is for authenticated callers")
		}
	}
	return handler(srv, ss)
}
