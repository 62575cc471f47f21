// Package clienttest starts a real API service for tests: a throw-away etcd
// process and an in-process services/apiserver wired as `kplane apiserver`
// wires it (static-token authentication, Node+RBAC authorization with the
// bootstrap roles, NodeRestriction, admission webhooks, the audit log), on
// 127.0.0.1. It is for tests only.
package clienttest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/apiserver/audit"
	"github.com/kplane/kplane/services/apiserver/authn"
	"github.com/kplane/kplane/services/apiserver/authz"
	"github.com/kplane/kplane/services/apiserver/defaulttolerationseconds"
	"github.com/kplane/kplane/services/apiserver/webhook"
)

// Tokens of the users every Env knows (bearer tokens over plaintext
// loopback gRPC).
const (
	AdminToken     = "admin-token"     // user "admin" in system:masters
	BobToken       = "bob-token"       // user "bob", no bindings
	Node1Token     = "node1-token"     // system:node:n1 in system:nodes
	Node2Token     = "node2-token"     // system:node:n2 in system:nodes
	SchedulerToken = "scheduler-token" // system:kube-scheduler
)

// KubeletClientUser is the CN of the API service's client certificate for
// node agents' log servers (pods/log), as kube-apiserver's kubelet client.
const KubeletClientUser = "kube-apiserver-kubelet-client"

const tokenCSV = `admin-token,admin,1,"system:masters"
bob-token,bob,2
node1-token,system:node:n1,3,system:nodes
node2-token,system:node:n2,4,system:nodes
scheduler-token,system:kube-scheduler,5
`

// Env is a running API service.
type Env struct {
	Addr      string
	AuditPath string
	RBAC      *authz.RBAC
	Webhooks  *webhook.Webhooks
	Etcd      string // client URL
	ca        *CA
}

// Options tune Start.
type Options struct {
	// ResolveService is passed to the webhook dispatcher.
	ResolveService func(ctx context.Context, namespace, name string, port int32) (string, error)
	// TLS serves gRPC over TLS with a throw-away CA that also verifies
	// client certificates (DialCert); Dial then uses TLS too.
	TLS bool
	// Configure, if set, may change the apiserver's Config before New.
	Configure func(*apiserver.Config)
}

// StartEtcd runs an etcd process on free loopback ports until the test
// ends and returns its client URL. The test is skipped (failed under CI) if
// etcd is not installed.
func StartEtcd(t testing.TB) string {
	t.Helper()
	bin := testutil.RequireBinary(t, "etcd", "apt-get install etcd-server")
	dir := t.TempDir()
	ports := testutil.FreePorts(t, 2)
	cport, pport := ports[0], ports[1]
	curl := "http://127.0.0.1:" + strconv.Itoa(cport)
	purl := "http://127.0.0.1:" + strconv.Itoa(pport)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin,
		"--name", "default", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "default="+purl, "--log-level", "error")
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		logf.Close()
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{curl}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Status(sctx, curl)
		scancel()
		if err == nil {
			return curl
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			t.Fatalf("etcd did not become ready: %v\n%s", err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Start runs etcd and the API service until the test ends.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	etcdURL := StartEtcd(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(tokenCSV), 0o600); err != nil {
		t.Fatal(err)
	}
	env, err := wire(etcdURL, tokens, filepath.Join(dir, "audit.log"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if opts.TLS {
		env.ca = NewCA(t)
		env.cfg.TLS = &tls.Config{
			Certificates: []tls.Certificate{env.ca.Issue(t, "kplane-apiserver", nil, true)},
			ClientCAs:    env.ca.Pool,
			ClientAuth:   tls.VerifyClientCertIfGiven,
			MinVersion:   tls.VersionTLS12,
		}
		// pods/log reaches node agents whose log servers serve a
		// certificate from the same CA and verify this one.
		env.cfg.KubeletTLS = &tls.Config{
			Certificates: []tls.Certificate{env.ca.Issue(t, KubeletClientUser, nil, false)},
			RootCAs:      env.ca.Pool,
			MinVersion:   tls.VersionTLS12,
		}
	}
	if opts.Configure != nil {
		opts.Configure(&env.cfg)
	}
	srv, err := apiserver.New(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("apiserver Run: %v", err)
		}
		_ = env.logger.Close()
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("apiserver stopped before it was ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("apiserver not ready after 60s")
	}
	env.Env.Addr = srv.Addr()
	return &env.Env
}

type wired struct {
	Env
	cfg    apiserver.Config
	logger *audit.Logger
}

// wire builds the apiserver Config the way `kplane apiserver` should.
func wire(etcdURL, tokenFile, auditPath string, opts Options) (*wired, error) {
	an, err := authn.New(authn.Config{TokenFile: tokenFile})
	if err != nil {
		return nil, err
	}
	logger, err := audit.New(audit.Config{Path: auditPath})
	if err != nil {
		return nil, err
	}
	rbac := authz.NewRBAC(nil)
	pods := authz.NewPodIndex()
	wh := webhook.New(webhook.Config{ResolveService: opts.ResolveService})
	boot, err := authz.BootstrapMessages()
	if err != nil {
		return nil, err
	}
	return &wired{
		Env:    Env{AuditPath: auditPath, RBAC: rbac, Webhooks: wh, Etcd: etcdURL},
		logger: logger,
		cfg: apiserver.Config{
			StoreEndpoints: []string{etcdURL},
			Listen:         "127.0.0.1:0",
			Authenticator:  an,
			Authorizer:     authz.NewDefault(rbac, pods),
			// As `kplane apiserver` and Kubernetes by default: the
			// not-ready and unreachable NoExecute tolerations (300 s) on
			// every pod without its own, then the webhooks.
			Mutating: []apiserver.MutatingAdmission{
				defaulttolerationseconds.New(defaulttolerationseconds.DefaultSeconds, defaulttolerationseconds.DefaultSeconds), wh},
			Validating: []apiserver.ValidatingAdmission{authz.NewNodeRestriction(), wh},
			Auditor:    logger,
			Informers: map[string][]apiserver.ObjectSink{
				"roles":                           {rbac},
				"clusterroles":                    {rbac},
				"rolebindings":                    {rbac},
				"clusterrolebindings":             {rbac},
				"mutatingwebhookconfigurations":   {wh},
				"validatingwebhookconfigurations": {wh},
				"namespaces":                      {wh},
				"pods":                            {pods},
			},
			Bootstrap: boot,
		},
	}, nil
}

// Dial opens a plaintext loopback connection that sends token as a bearer
// token ("" for none).
func (e *Env) Dial(t testing.TB, token string) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if e.ca != nil {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: e.ca.Pool, MinVersion: tls.VersionTLS12}))}
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.NewClient(e.Addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// DialCert opens a TLS connection authenticated by a client certificate
// for user cn in groups orgs, issued by the Env's CA (Options.TLS must be set).
func (e *Env) DialCert(t testing.TB, cn string, orgs ...string) *grpc.ClientConn {
	t.Helper()
	if e.ca == nil {
		t.Fatal("clienttest: DialCert needs Options.TLS")
	}
	return e.dialTLS(t, e.ca.Pool, e.ca.Issue(t, cn, orgs, false))
}

// DialForeignCert is DialCert with a certificate from a CA the server does not trust.
func (e *Env) DialForeignCert(t testing.TB, cn string, orgs ...string) *grpc.ClientConn {
	t.Helper()
	return e.dialTLS(t, e.ca.Pool, NewCA(t).Issue(t, cn, orgs, false))
}

func (e *Env) dialTLS(t testing.TB, roots *x509.CertPool, cert tls.Certificate) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(e.Addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// CA is the Env's certificate authority (nil without Options.TLS): it
// signed the API service's serving and kubelet client certificates.
func (e *Env) CA() *CA { return e.ca }

// bearer sends `authorization: Bearer <token>`, also over plaintext (tests only).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// String describes the Env.
func (e *Env) String() string { return fmt.Sprintf("apiserver %s on etcd %s", e.Addr, e.Etcd) }
