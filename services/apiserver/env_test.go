// This file holds what the service's in-package tests share: an API service
// on a test store, with a token authenticator and an authorizer that refuses
// only "nobody", and helpers for its clients.

package apiserver

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/internal/storetest"
	"github.com/kplane/kplane/services/apiserver/request"
)

// tokenAuthn is a unit-test authenticator: "authorization: Bearer <name>"
// is user <name>; no token is Unauthorized.
type tokenAuthn struct{}

func (tokenAuthn) Authenticate(ctx context.Context) (request.User, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if name, ok := strings.CutPrefix(v, "Bearer "); ok {
			return request.User{Name: name, Groups: []string{request.AuthenticatedGroup}}, nil
		}
	}
	return request.User{}, apierrors.NewUnauthorized("")
}

// denyNobody is a unit-test authorizer: everyone may do anything except
// the user "nobody".
type denyNobody struct{}

func (denyNobody) Authorize(_ context.Context, a request.Attributes) (request.Decision, error) {
	return request.Decision{Allowed: a.User.Name != "nobody"}, nil
}

type env struct {
	srv    *Server
	conn   *grpc.ClientConn
	eps    []string
	pods   corev1.PodServiceClient
	ns     corev1.NamespaceServiceClient
	cms    corev1.ConfigMapServiceClient
	deps   appsv1.DeploymentServiceClient
	rss    appsv1.ReplicaSetServiceClient
	nodes  corev1.NodeServiceClient
	events corev1.EventServiceClient
}

// newEnv starts a store and an API service on loopback and returns clients
// authenticated as "admin".
func newEnv(t testing.TB, mod func(*Config)) *env {
	t.Helper()
	return newEnvOn(t, storetest.Start(t), mod)
}

// newEnvOn is newEnv on the store at eps.
func newEnvOn(t testing.TB, eps []string, mod func(*Config)) *env {
	t.Helper()
	cfg := Config{StoreEndpoints: eps, Authenticator: tokenAuthn{}, Authorizer: denyNobody{},
		BookmarkInterval: 200 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-srv.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("server not ready after 30s")
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &env{srv: srv, conn: conn, eps: eps,
		pods: corev1.NewPodServiceClient(conn), ns: corev1.NewNamespaceServiceClient(conn),
		cms: corev1.NewConfigMapServiceClient(conn), deps: appsv1.NewDeploymentServiceClient(conn),
		rss: appsv1.NewReplicaSetServiceClient(conn), nodes: corev1.NewNodeServiceClient(conn),
		events: corev1.NewEventServiceClient(conn),
	}
}

// as returns a context authenticated as user (with a test deadline).
func as(t testing.TB, user string) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if user == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+user)
}

func admin(t testing.TB) context.Context { return as(t, "admin") }

func om(ns, name string) *metav1.ObjectMeta { return &metav1.ObjectMeta{Namespace: ns, Name: name} }

func testPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{Metadata: om(ns, name), Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1.27"}}}}
}

func wantReason(t *testing.T, err error, want apierrors.Reason) *apierrors.StatusError {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", want)
	}
	se := apierrors.FromError(err)
	if se.Reason != want {
		t.Fatalf("got reason %s (%v), want %s", se.Reason, err, want)
	}
	return se
}

func mustCreatePod(t *testing.T, e *env, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	resp, err := e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: p.GetMetadata().GetNamespace(), Pod: p})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	return resp.GetPod()
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
