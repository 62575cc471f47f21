// This file holds the tests of authentication over gRPC (client
// certificates, static and service account tokens, anonymous requests) and
// the impersonation refusal message.

package authn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/internal/tokenfile"
	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/identity"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/request"
	"github.com/kplane/kplane/services/apiserver/serviceaccount"
)

// testCA is a throw-away certificate authority for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) issue(t *testing.T, cn string, orgs []string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// server runs a real gRPC server on loopback whose interceptor authenticates
// every call with a and remembers the last user.
type server struct {
	addr string
	ca   *testCA
	mu   sync.Mutex
	last request.User
}

func startServer(t *testing.T, a *Authenticator) *server {
	t.Helper()
	s := &server{ca: newCA(t)}
	tlsCfg := &tls.Config{
		Certificates: []tls.Certificate{s.ca.issue(t, "apiserver", nil, true)},
		ClientCAs:    s.ca.pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			u, err := a.Authenticate(ctx)
			if err != nil {
				return nil, err
			}
			s.mu.Lock()
			s.last = u
			s.mu.Unlock()
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	s.addr = lis.Addr().String()
	return s
}

// call makes one health check with the given client certificate (nil: none)
// and metadata, and returns the user the server saw.
func (s *server) call(t *testing.T, cert *tls.Certificate, md metadata.MD) (request.User, error) {
	t.Helper()
	tc := &tls.Config{RootCAs: s.ca.pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, md)
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		return request.User{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, nil
}

func writeTokens(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAuthenticateOverGRPC(t *testing.T) {
	tokens := writeTokens(t, "# comment\n"+
		"tok-alice,alice,1001,\"dev,ops\"\n"+
		"tok-bob,bob,1002\n"+
		"tok-gw,gateway,1003,system:kplane-gateways\n")
	saTokens, saToken, robot := serviceAccountTokens(t)
	strict, err := New(Config{TokenFile: tokens, ServiceAccounts: saTokens, APIAudiences: []string{testIssuer}})
	if err != nil {
		t.Fatal(err)
	}
	anon, err := New(Config{TokenFile: tokens, Anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	strictSrv, anonSrv := startServer(t, strict), startServer(t, anon)
	otherCA := newCA(t)

	type certSpec struct {
		cn      string
		orgs    []string
		foreign bool // issued by a CA the server does not trust
	}
	tests := []struct {
		name       string
		anonymous  bool
		cert       *certSpec
		md         metadata.MD
		want       request.User
		wantReason apierrors.Reason
	}{
		{name: "client certificate", cert: &certSpec{cn: "system:node:n1", orgs: []string{"system:nodes"}},
			want: request.User{Name: "system:node:n1", Groups: []string{"system:nodes", "system:authenticated"}}},
		{name: "token with groups", md: metadata.Pairs("authorization", "Bearer tok-alice"),
			want: request.User{Name: "alice", UID: "1001", Groups: []string{"dev", "ops", "system:authenticated"}}},
		{name: "token without groups", md: metadata.Pairs("authorization", "Bearer tok-bob"),
			want: request.User{Name: "bob", UID: "1002", Groups: []string{"system:authenticated"}}},
		{name: "unknown token", md: metadata.Pairs("authorization", "Bearer nope"), wantReason: apierrors.ReasonUnauthorized},
		{name: "unknown token is not anonymous", anonymous: true, md: metadata.Pairs("authorization", "Bearer nope"), wantReason: apierrors.ReasonUnauthorized},
		{name: "basic auth scheme", md: metadata.Pairs("authorization", "Basic YWxpY2U6eA=="), wantReason: apierrors.ReasonUnauthorized},
		{name: "no credentials, anonymous disabled", wantReason: apierrors.ReasonUnauthorized},
		{name: "no credentials, anonymous enabled", anonymous: true,
			want: request.User{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}},
		{name: "certificate from an untrusted CA", cert: &certSpec{cn: "mallory", foreign: true}, wantReason: apierrors.ReasonUnknown},
		{name: "front proxy passes the end user on",
			cert: &certSpec{cn: "gateway", orgs: []string{"system:kplane-gateways"}},
			md:   metadata.Pairs(identity.ImpersonateUserKey, "carol", identity.ImpersonateUIDKey, "42", identity.ImpersonateGroupKey, "dev", identity.ImpersonateGroupKey, "qa"),
			want: request.User{Name: "carol", UID: "42", Groups: []string{"dev", "qa", "system:authenticated"}}},
		{name: "certificate user without the proxy group may not impersonate",
			cert:       &certSpec{cn: "bob", orgs: []string{"dev"}},
			md:         metadata.Pairs(identity.ImpersonateUserKey, "admin", identity.ImpersonateGroupKey, "system:masters"),
			wantReason: apierrors.ReasonForbidden},
		{name: "token user may not impersonate",
			md:         metadata.Pairs("authorization", "Bearer tok-alice", identity.ImpersonateUserKey, "admin"),
			wantReason: apierrors.ReasonForbidden},
		{name: "proxy group from a token may not impersonate",
			md:         metadata.Pairs("authorization", "Bearer tok-gw", identity.ImpersonateUserKey, "admin"),
			wantReason: apierrors.ReasonForbidden},
		{name: "anonymous may not impersonate", anonymous: true,
			md:         metadata.Pairs(identity.ImpersonateGroupKey, "system:masters"),
			wantReason: apierrors.ReasonForbidden},
		{name: "ServiceAccount token", md: metadata.Pairs("authorization", "Bearer "+saToken), want: robot},
		{name: "front proxy forwards a ServiceAccount token",
			cert: &certSpec{cn: "gateway", orgs: []string{"system:kplane-gateways"}},
			md:   metadata.Pairs(identity.ForwardedTokenKey, saToken), want: robot},
		{name: "front proxy forwards a static token",
			cert: &certSpec{cn: "gateway", orgs: []string{"system:kplane-gateways"}},
			md:   metadata.Pairs(identity.ForwardedTokenKey, "tok-bob"),
			want: request.User{Name: "bob", UID: "1002", Groups: []string{"system:authenticated"}}},
		{name: "front proxy forwards a tampered token",
			cert:       &certSpec{cn: "gateway", orgs: []string{"system:kplane-gateways"}},
			md:         metadata.Pairs(identity.ForwardedTokenKey, saToken[:len(saToken)-4]+"AAAA"),
			wantReason: apierrors.ReasonUnauthorized},
		{name: "a certificate user without the proxy group may not forward a token",
			cert:       &certSpec{cn: "bob", orgs: []string{"dev"}},
			md:         metadata.Pairs(identity.ForwardedTokenKey, saToken),
			wantReason: apierrors.ReasonForbidden},
		{name: "a token user may not forward a token",
			md:         metadata.Pairs("authorization", "Bearer tok-gw", identity.ForwardedTokenKey, saToken),
			wantReason: apierrors.ReasonForbidden},
		{name: "a forwarded token names no impersonated user besides",
			cert:       &certSpec{cn: "gateway", orgs: []string{"system:kplane-gateways"}},
			md:         metadata.Pairs(identity.ForwardedTokenKey, saToken, identity.ImpersonateUserKey, "admin"),
			wantReason: apierrors.ReasonBadRequest},
		{name: "front proxy must name the user",
			cert:       &certSpec{cn: "gateway", orgs: []string{"system:kplane-gateways"}},
			md:         metadata.Pairs(identity.ImpersonateGroupKey, "dev"),
			wantReason: apierrors.ReasonBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := strictSrv
			if tt.anonymous {
				srv = anonSrv
			}
			var cert *tls.Certificate
			if tt.cert != nil {
				ca := srv.ca
				if tt.cert.foreign {
					ca = otherCA
				}
				c := ca.issue(t, tt.cert.cn, tt.cert.orgs, false)
				cert = &c
			}
			got, err := srv.call(t, cert, tt.md)
			if tt.cert != nil && tt.cert.foreign {
				// The TLS handshake itself fails: no RPC reaches the server.
				if err == nil {
					t.Fatalf("got user %+v, want the handshake refused", got)
				}
				return
			}
			if tt.wantReason != apierrors.ReasonUnknown {
				if r := apierrors.ReasonOf(err); r != tt.wantReason {
					t.Fatalf("got error %v (reason %q), want reason %q", err, r, tt.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want user %+v", err, tt.want)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("user mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// testIssuer is the issuer of serviceAccountTokens' tokens.
const testIssuer = "https://kubernetes.default.svc.cluster.local"

// serviceAccountTokens returns a ServiceAccount token authenticator with a
// key generated here, which knows the ServiceAccount default/robot, a token
// of robot's and the user it authenticates as.
func serviceAccountTokens(t *testing.T) (*serviceaccount.Authenticator, string, request.User) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kid, err := serviceaccount.KeyID(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	objects := serviceaccount.NewObjects()
	objects.Upsert(&corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "robot", Uid: "robot-uid"}})
	a, err := serviceaccount.NewAuthenticator(serviceaccount.AuthenticatorConfig{Issuers: []string{testIssuer},
		Keys: []serviceaccount.PublicKey{{KeyID: kid, Key: &key.PublicKey}}, APIAudiences: []string{testIssuer}, Objects: objects})
	if err != nil {
		t.Fatal(err)
	}
	iss, err := serviceaccount.NewIssuer(testIssuer, key)
	if err != nil {
		t.Fatal(err)
	}
	tok, jti, err := iss.Issue(time.Now(), serviceaccount.Binding{Namespace: "default", ServiceAccount: serviceaccount.Ref{Name: "robot", UID: "robot-uid"},
		Audiences: []string{testIssuer}, ExpirationSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	robot := request.User{Name: "system:serviceaccount:default:robot", UID: "robot-uid",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"},
		Extra:  map[string][]string{serviceaccount.ExtraCredentialID: {"JTI=" + jti}}}
	return a, tok, robot
}

func TestForbiddenImpersonationMessage(t *testing.T) {
	a, err := New(Config{TokenFile: writeTokens(t, "t1,bob,1\n")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer t1", identity.ImpersonateUserKey, "admin"))
	_, err = a.Authenticate(ctx)
	want := `users "admin" is forbidden: User "bob" cannot impersonate users`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want a message starting %q", err, want)
	}
}

// BenchmarkAuthenticateToken measures a bearer-token lookup from incoming metadata.
func BenchmarkAuthenticateToken(b *testing.B) {
	var sb strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&sb, "tok-%d,user-%d,%d,\"g1,g2\"\n", i, i, i)
	}
	a := &Authenticator{proxyGroup: []string{identity.DefaultFrontProxyGroup}}
	var err error
	if a.tokens, err = tokenfile.Parse(strings.NewReader(sb.String())); err != nil {
		b.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer tok-500"))
	for b.Loop() {
		if _, err := a.Authenticate(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
