// This file holds the agent's connection wrappers: a bearer token on every
// call, and a deadline on unary calls that have none.

package nodeagent

import (
	"context"
	"time"

	"google.golang.org/grpc"
)

// WithToken returns conn with every call authenticated by a bearer token,
// so that many simulated nodes, each with its own identity
// (system:node:<name>), share one connection to the API service. conn
// should be a TLS connection: the token is sent with every call.
func WithToken(conn grpc.ClientConnInterface, token string) grpc.ClientConnInterface {
	return tokenConn{conn: conn, opt: grpc.PerRPCCredentials(bearer(token))}
}

type tokenConn struct {
	conn grpc.ClientConnInterface
	opt  grpc.CallOption
}

func (c tokenConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.conn.Invoke(ctx, method, args, reply, append(opts, c.opt)...)
}

func (c tokenConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.conn.NewStream(ctx, desc, method, append(opts, c.opt)...)
}

// bearer sends `authorization: Bearer <token>`. It does not insist on
// transport security, so it also works on a plaintext loopback connection
// (local experiments).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// timeoutConn bounds every unary call whose ctx has no deadline by d (the
// watch streams are left alone), so a stuck API call cannot stall a loop.
type timeoutConn struct {
	grpc.ClientConnInterface
	d time.Duration
}

func (c timeoutConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.d)
		defer cancel()
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}
