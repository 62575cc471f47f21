package apiserver

// This file holds the gRPC interceptors every call passes: the request
// timeout (kube-apiserver's --request-timeout) and the rule that server
// reflection, like Kubernetes' discovery, is for authenticated callers only.

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/services/apiserver/request"
)

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
