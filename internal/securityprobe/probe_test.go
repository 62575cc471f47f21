// Package securityprobe is kplane's security regression suite: every attack
// a probe of a `kplane up` cluster tried, replayed against a fresh `kplane
// up` (on loopback) as an attacker holding one component's credentials
// would try it. Each attempt is a subtest that logs "held" or fails with
// "BROKE"; the summary at the end lists them all. README's Security section
// lists the attempts and what stops each.
package securityprobe

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/services/apiserver/serviceaccount"
)

// kplaneBin is the kplane binary TestMain builds for `kplane up`.
var kplaneBin string

func TestMain(m *testing.M) {
	os.Exit(testutil.RunWithKplane(m, &kplaneBin))
}

// cluster is the `kplane up` under attack and the credentials found in its
// data directory, as an attacker who stole one component's would hold them.
type cluster struct {
	cp  *localcluster.ControlPlane
	pki string
	ca  *x509.CertPool // the cluster CA, which the gateway's serving certificate chains to
}

func (c *cluster) cert(t *testing.T, name string) tls.Certificate {
	t.Helper()
	dir := c.pki
	if strings.HasPrefix(name, "node-") {
		dir = filepath.Join(c.pki, "nodes")
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	if err != nil {
		t.Fatalf("credentials %s: %v", name, err)
	}
	return pair
}

// https returns a client of the gateway presenting cert (none if nil).
func (c *cluster) https(cert *tls.Certificate) *http.Client {
	tc := &tls.Config{RootCAs: c.ca, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
}

type response struct {
	code int
	body string
}

// do sends one request to the gateway; as, if set, impersonates that user
// (the client must be allowed to impersonate).
func (c *cluster) do(t *testing.T, client *http.Client, method, path, contentType, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, c.cp.GatewayURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{code: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, body: string(b)}
}

// results collects the attempts' outcomes for the summary.
type results struct {
	mu    sync.Mutex
	lines []string
}

func (r *results) add(name string, held bool, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	word := "held "
	if !held {
		word = "BROKE"
	}
	r.lines = append(r.lines, fmt.Sprintf("%s  %-44s %s", word, name, detail))
}

// TestSecurityProbe starts `kplane up` and replays each attempt.
func TestSecurityProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kplane up")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp, err := localcluster.Up(ctx, localcluster.UpConfig{Binary: kplaneBin, DataDir: dir, Schedulers: 1, ControllerManagers: 1})
	if err != nil {
		t.Fatalf("kplane up: %v", err)
	}
	t.Cleanup(cp.Stop)
	caPEM, err := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := &cluster{cp: cp, pki: filepath.Join(dir, "pki"), ca: pool}
	admin := c.cert(t, "admin")
	node1 := c.cert(t, "node-1")
	asAdmin, asNode := c.https(&admin), c.https(&node1)
	var res results
	attempt := func(name string, f func(t *testing.T) (held bool, detail string)) {
		t.Run(name, func(t *testing.T) {
			held, detail := f(t)
			res.add(name, held, detail)
			if !held {
				t.Errorf("BROKE: %s", detail)
				return
			}
			t.Logf("held: %s", detail)
		})
	}
	expect := func(r response, code int, contains string) (bool, string) {
		d := fmt.Sprintf("%d %.160s", r.code, strings.TrimSpace(r.body))
		return r.code == code && strings.Contains(r.body, contains), d
	}

	// The store: only the API services may read or write it, and only
	// members may speak Raft.
	storeEndpoints := strings.Split(cp.Store.Endpoints(), ",")
	storeClient := func(cert tls.Certificate) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: storeEndpoints, DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
			TLS: &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}) // #nosec G402 -- the attacker does not care who serves
	}
	attempt("store: read a Secret with a node's certificate", func(t *testing.T) (bool, string) {
		cli, err := storeClient(node1)
		if err != nil {
			return true, "no connection: " + err.Error()
		}
		defer cli.Close()
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = cli.Get(gctx, "/registry/secrets/", clientv3.WithPrefix())
		return err != nil, fmt.Sprintf("get: %v", err)
	})
	attempt("store: write a ClusterRoleBinding with a node's certificate", func(t *testing.T) (bool, string) {
		cli, err := storeClient(node1)
		if err != nil {
			return true, "no connection: " + err.Error()
		}
		defer cli.Close()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = cli.Put(pctx, "/registry/clusterrolebindings/pwned", "x")
		return err != nil, fmt.Sprintf("put: %v", err)
	})
	attempt("raft: speak Raft with the API services' store certificate", func(t *testing.T) (bool, string) {
		u, err := url.Parse(cp.Store.Members[0].PeerURL)
		if err != nil {
			t.Fatal(err)
		}
		storeCert := c.cert(t, "apiserver-store-client")
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", u.Host,
			&tls.Config{Certificates: []tls.Certificate{storeCert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) // #nosec G402
		if err != nil {
			return true, "handshake refused: " + err.Error()
		}
		defer conn.Close()
		// TLS 1.3 reports a refused client certificate on the first read.
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = bufio.NewReader(conn).ReadByte()
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			return true, "connection refused after the handshake: " + err.Error()
		}
		return false, "a non-member's TLS connection to the peer port stayed open"
	})

	// RBAC: the right to write bindings or roles is not the right to grant
	// more than one holds.
	setup := []string{
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"probe-binder"},"rules":[{"apiGroups":["rbac.authorization.k8s.io"],"resources":["clusterrolebindings","clusterroles"],"verbs":["create"]}]}`,
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"probe-binder"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"probe-binder"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"mallory"}]}`,
	}
	for i, obj := range setup {
		path := "/apis/rbac.authorization.k8s.io/v1/clusterroles"
		if i == 1 {
			path = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
		}
		if r := c.do(t, asAdmin, "POST", path, "application/json", obj); r.code != http.StatusCreated {
			t.Fatalf("setup %s: %d %s", path, r.code, r.body)
		}
	}
	// The authorizer learns of the binding from its watch: wait until
	// mallory may create bindings before trying to escalate with them.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r := c.do(t, asAdmin, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json",
			`{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"resourceAttributes":{"group":"rbac.authorization.k8s.io","resource":"clusterrolebindings","verb":"create"}}}`,
			"Impersonate-User", "mallory")
		if strings.Contains(r.body, `"allowed":true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mallory's binding not in effect after 30 s: %d %s", r.code, r.body)
		}
	}
	// Each API service replica learns of the binding from its own watch, and
	// the gateway spreads calls over them: while one still refuses mallory
	// the create itself ("cannot create resource"), ask again.
	asMallory := func(t *testing.T, path, body string) response {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			r := c.do(t, asAdmin, "POST", path, "application/json", body, "Impersonate-User", "mallory")
			if !strings.Contains(r.body, "cannot create resource") || time.Now().After(deadline) {
				return r
			}
		}
	}
	attempt("rbac: bind cluster-admin to oneself holding only create clusterrolebindings", func(t *testing.T) (bool, string) {
		r := asMallory(t, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
			`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"pwned"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"mallory"}]}`)
		return expect(r, http.StatusForbidden, "attempting to grant RBAC permissions not currently held")
	})
	attempt("rbac: write a ClusterRole granting Secrets one cannot read", func(t *testing.T) (bool, string) {
		r := asMallory(t, "/apis/rbac.authorization.k8s.io/v1/clusterroles",
			`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"pwned"},"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get","list"]}]}`)
		return expect(r, http.StatusForbidden, "attempting to grant RBAC permissions not currently held")
	})

	// NodeRestriction: a node may not steer workloads to itself or touch
	// another node.
	attempt("node: label itself control-plane", func(t *testing.T) (bool, string) {
		r := c.do(t, asNode, "PATCH", "/api/v1/nodes/node-1", "application/merge-patch+json",
			`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`)
		return expect(r, http.StatusForbidden, "is not allowed to modify labels: node-role.kubernetes.io/control-plane")
	})
	attempt("node: set a node-restriction.kubernetes.io label on itself", func(t *testing.T) (bool, string) {
		r := c.do(t, asNode, "PATCH", "/api/v1/nodes/node-1", "application/merge-patch+json",
			`{"metadata":{"labels":{"node-restriction.kubernetes.io/pci":"yes"}}}`)
		return expect(r, http.StatusForbidden, "node-restriction.kubernetes.io/pci")
	})
	attempt("node: taint itself", func(t *testing.T) (bool, string) {
		r := c.do(t, asNode, "PATCH", "/api/v1/nodes/node-1", "application/merge-patch+json",
			`{"spec":{"taints":[{"key":"dedicated","value":"me","effect":"NoSchedule"}]}}`)
		return expect(r, http.StatusForbidden, "is not allowed to modify taints")
	})
	attempt("node: label another node", func(t *testing.T) (bool, string) {
		r := c.do(t, asNode, "PATCH", "/api/v1/nodes/node-2", "application/merge-patch+json", `{"metadata":{"labels":{"x":"y"}}}`)
		return expect(r, http.StatusForbidden, "")
	})
	attempt("node: read every Secret", func(t *testing.T) (bool, string) {
		r := c.do(t, asNode, "GET", "/api/v1/secrets", "", "")
		return expect(r, http.StatusForbidden, "")
	})

	// The HTTP edge.
	anon := c.https(nil)
	attempt("edge: list pods without credentials", func(t *testing.T) (bool, string) {
		return expect(c.do(t, anon, "GET", "/api/v1/pods", "", ""), http.StatusUnauthorized, "")
	})
	for _, p := range []string{"/apis", "/api/v1", "/openapi/v3"} {
		attempt("edge: discovery "+p+" without credentials", func(t *testing.T) (bool, string) {
			return expect(c.do(t, anon, "GET", p, "", ""), http.StatusUnauthorized, "")
		})
	}
	attempt("edge: read /metrics without credentials", func(t *testing.T) (bool, string) {
		return expect(c.do(t, anon, "GET", "/metrics", "", ""), http.StatusUnauthorized, "")
	})
	attempt("edge: read /metrics with a node's certificate", func(t *testing.T) (bool, string) {
		return expect(c.do(t, asNode, "GET", "/metrics", "", ""), http.StatusForbidden, `cannot get path \"/metrics\"`)
	})
	attempt("edge: a body as text/plain", func(t *testing.T) (bool, string) {
		r := c.do(t, asAdmin, "POST", "/api/v1/namespaces/default/configmaps", "text/plain", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"probe"}}`)
		return expect(r, http.StatusUnsupportedMediaType, "UnsupportedMediaType")
	})
	attempt("edge: duplicate fields under fieldValidation=Strict", func(t *testing.T) (bool, string) {
		r := c.do(t, asAdmin, "POST", "/api/v1/namespaces/default/configmaps?fieldValidation=Strict", "application/json",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"probe-dup","name":"other"}}`)
		return expect(r, http.StatusBadRequest, `duplicate field \"metadata.name\"`)
	})
	attempt("edge: a body larger than the limit", func(t *testing.T) (bool, string) {
		big := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"probe-big"},"data":{"a":"` + strings.Repeat("x", 4<<20) + `"}}`
		return expect(c.do(t, asAdmin, "POST", "/api/v1/namespaces/default/configmaps", "application/json", big), http.StatusRequestEntityTooLarge, "")
	})
	if r := c.do(t, asAdmin, "POST", "/api/v1/namespaces/default/configmaps", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"probe"}}`); r.code != http.StatusCreated {
		t.Fatalf("setup configmap: %d %s", r.code, r.body)
	}
	attempt("edge: change an object's uid by merge patch", func(t *testing.T) (bool, string) {
		r := c.do(t, asAdmin, "PATCH", "/api/v1/namespaces/default/configmaps/probe", "application/merge-patch+json", `{"metadata":{"uid":"00000000-0000-4000-8000-000000000001"}}`)
		return expect(r, http.StatusUnprocessableEntity, "field is immutable")
	})
	attempt("edge: replace an object naming another uid", func(t *testing.T) (bool, string) {
		r := c.do(t, asAdmin, "PUT", "/api/v1/namespaces/default/configmaps/probe", "application/json",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"probe","uid":"00000000-0000-4000-8000-000000000001"},"data":{"a":"b"}}`)
		return expect(r, http.StatusConflict, "Precondition failed: UID in precondition")
	})
	attempt("edge: list at a resourceVersion from the future", func(t *testing.T) (bool, string) {
		r := c.do(t, asAdmin, "GET", "/api/v1/namespaces/default/configmaps?resourceVersion=999999999&resourceVersionMatch=NotOlderThan", "", "")
		return expect(r, http.StatusGatewayTimeout, "Too large resource version")
	})
	// ServiceAccount tokens: a token must be signed by the cluster's key
	// and still valid; a working one shows the refusals are not blanket.
	saToken := func(t *testing.T, key crypto.Signer, now time.Time) string {
		t.Helper()
		// The ServiceAccount controller creates it soon after kplane up.
		r := c.do(t, asAdmin, "GET", "/api/v1/namespaces/default/serviceaccounts/default", "", "")
		for i := 0; i < 300 && r.code == http.StatusNotFound; i++ {
			time.Sleep(100 * time.Millisecond)
			r = c.do(t, asAdmin, "GET", "/api/v1/namespaces/default/serviceaccounts/default", "", "")
		}
		var sa struct {
			Metadata struct{ UID string } `json:"metadata"`
		}
		if r.code != http.StatusOK || json.Unmarshal([]byte(r.body), &sa) != nil {
			t.Fatalf("get the default ServiceAccount: %d %s", r.code, r.body)
		}
		iss, err := serviceaccount.NewIssuer(localcluster.ServiceAccountIssuer, key)
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := iss.Issue(now, serviceaccount.Binding{Namespace: "default", ServiceAccount: serviceaccount.Ref{Name: "default", UID: sa.Metadata.UID},
			Audiences: []string{localcluster.ServiceAccountIssuer}, ExpirationSeconds: 3600})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	withToken := func(t *testing.T, tok string) response {
		t.Helper()
		return c.do(t, c.https(nil), "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", "application/json",
			`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`, "Authorization", "Bearer "+tok)
	}
	clusterKey, keyErr := serviceaccount.LoadSigningKey(filepath.Join(dir, localcluster.ServiceAccountKeyFile))
	attempt("authn: a ServiceAccount token forged with another key", func(t *testing.T) (bool, string) {
		if keyErr != nil {
			t.Fatal(keyErr)
		}
		if r := withToken(t, saToken(t, clusterKey, time.Now())); r.code != http.StatusCreated || !strings.Contains(r.body, "system:serviceaccount:default:default") {
			return false, "a token signed by the cluster's own key does not authenticate: " + r.body
		}
		forger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return expect(withToken(t, saToken(t, forger, time.Now())), http.StatusUnauthorized, "Unauthorized")
	})
	attempt("authn: an expired ServiceAccount token", func(t *testing.T) (bool, string) {
		if keyErr != nil {
			t.Fatal(keyErr)
		}
		return expect(withToken(t, saToken(t, clusterKey, time.Now().Add(-2*time.Hour))), http.StatusUnauthorized, "Unauthorized")
	})
	grpcAnon := func(t *testing.T) *grpc.ClientConn {
		t.Helper()
		conn, err := grpc.NewClient(cp.APIServers[0], grpc.WithTransportCredentials(credentials.NewTLS(
			&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}))) // #nosec G402 -- an attacker's client
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	attempt("grpc: list pods on the API service without credentials", func(t *testing.T) (bool, string) {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := corev1.NewPodServiceClient(grpcAnon(t)).ListPods(lctx, &corev1.ListPodsRequest{})
		return status.Code(err) == codes.Unauthenticated, fmt.Sprintf("%v", err)
	})
	attempt("grpc: server reflection without credentials", func(t *testing.T) (bool, string) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, err := reflectionpb.NewServerReflectionClient(grpcAnon(t)).ServerReflectionInfo(rctx)
		if err == nil {
			// A Send that meets a stream the server already ended returns
			// io.EOF; the stream's status is then Recv's error.
			if err = st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err == nil || errors.Is(err, io.EOF) {
				_, err = st.Recv()
			}
		}
		return status.Code(err) == codes.Unauthenticated, fmt.Sprintf("%v", err)
	})

	t.Cleanup(func() {
		var b bytes.Buffer
		fmt.Fprintln(&b, "security probe of kplane up:")
		for _, l := range res.lines {
			fmt.Fprintln(&b, "  "+l)
		}
		t.Log(b.String())
	})
}
