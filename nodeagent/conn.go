package nodeagent

import (
	"context"

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
