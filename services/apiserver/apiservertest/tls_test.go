// This file holds the test of client certificates through a TLS API service:
// CN and O as user and groups, untrusted CAs and plaintext refused, and end
// users passed on only by a front proxy.

package apiservertest

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/identity"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// TestTLSEndToEnd: client certificates through a TLS API service — CN as the
// user and O as groups, an untrusted CA or plaintext refused, and only a
// front proxy may pass an end user on.
func TestTLSEndToEnd(t *testing.T) {
	env := Start(t, Options{TLS: true})
	list := func(conn *grpc.ClientConn, md metadata.MD) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if md != nil {
			ctx = metadata.NewOutgoingContext(ctx, md)
		}
		_, err := corev1.NewConfigMapServiceClient(conn).ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default"})
		return err
	}
	impersonateAdmin := metadata.Pairs(identity.ImpersonateUserKey, "carol", identity.ImpersonateGroupKey, "system:masters")
	tests := []struct {
		name       string
		conn       func() *grpc.ClientConn
		md         metadata.MD
		wantReason apierrors.Reason
		wantFail   bool // refused before any API answer
	}{
		{name: "certificate in system:masters", conn: func() *grpc.ClientConn { return env.DialCert(t, "root", "system:masters") }},
		{name: "certificate without bindings", conn: func() *grpc.ClientConn { return env.DialCert(t, "dave", "devs") }, wantReason: apierrors.ReasonForbidden},
		{name: "token over TLS", conn: func() *grpc.ClientConn { return env.Dial(t, AdminToken) }},
		{name: "no credentials over TLS", conn: func() *grpc.ClientConn { return env.Dial(t, "") }, wantReason: apierrors.ReasonUnauthorized},
		{name: "certificate from an untrusted CA", conn: func() *grpc.ClientConn { return env.DialForeignCert(t, "root", "system:masters") }, wantFail: true},
		{name: "plaintext to a TLS server", conn: func() *grpc.ClientConn {
			c, err := grpc.NewClient(env.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}, wantFail: true},
		{name: "front proxy passes an end user on", conn: func() *grpc.ClientConn { return env.DialCert(t, "gateway", identity.DefaultFrontProxyGroup) }, md: impersonateAdmin},
		{name: "anyone else setting impersonation metadata", conn: func() *grpc.ClientConn { return env.DialCert(t, "dave", "devs") }, md: impersonateAdmin, wantReason: apierrors.ReasonForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := list(tt.conn(), tt.md)
			switch {
			case tt.wantFail:
				if err == nil {
					t.Fatal("got an answer, want the connection refused")
				}
				if r := apierrors.ReasonOf(err); r == apierrors.ReasonForbidden || r == apierrors.ReasonUnauthorized {
					t.Errorf("got an API refusal %v, want the transport to refuse", err)
				}
			case tt.wantReason != "":
				if r := apierrors.ReasonOf(err); r != tt.wantReason {
					t.Errorf("got %v (reason %q), want %q", err, r, tt.wantReason)
				}
			case err != nil:
				t.Errorf("got %v, want allowed", err)
			}
		})
	}

	t.Run("a node's certificate may register only itself", func(t *testing.T) {
		nodes := corev1.NewNodeServiceClient(env.DialCert(t, "system:node:n7", "system:nodes"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := nodes.CreateNode(ctx, &corev1.CreateNodeRequest{Node: &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "n7"}}}); err != nil {
			t.Errorf("n7 registers itself: %v", err)
		}
		_, err := nodes.CreateNode(ctx, &corev1.CreateNodeRequest{Node: &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "n8"}}})
		want := `nodes "n8" is forbidden: node "n7" is not allowed to modify node "n8"`
		if se := apierrors.FromError(err); se == nil || se.Message != want {
			t.Errorf("n7 registers n8: got %v, want %q", err, want)
		}
	})
}
