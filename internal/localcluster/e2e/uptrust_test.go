// This file holds the end-to-end test of who may reach the store of a
// `kplane up` cluster: the API services' store client and the members on
// the client port, the members alone on the peer port.

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/internal/testutil/raftpeer"
)

// TestUpStoreTrust replays a security probe of a `kplane up` cluster. With
// a node's certificate (the cluster CA signed it) etcdctl could read
// Secrets from the store and write a ClusterRoleBinding into it, and any
// cluster-CA certificate could send Raft RPCs to a peer port. Now the
// store trusts its own CA only, and its peer ports only members' CNs: the
// node's etcdctl get and put fail at the TLS handshake, the API services'
// store client certificate is refused on a peer port (and the refusal is
// logged), while members, the API services' store client, the admin
// kubeconfig and the cluster keep working.
func TestUpStoreTrust(t *testing.T) {
	testutil.SkipShort(t, "runs a whole `kplane up` of the built binary")
	etcdctlBin := testutil.RequireBinary(t, "etcdctl", "apt-get install -y etcd-client")
	kubectl := testutil.RequireBinary(t, "kubectl", "apt-get install kubectl")
	dir := t.TempDir()
	endpoints := startUp(t, dir, "--schedulers=1", "--controller-managers=1", "--apiservers=1", "--nodes=1")
	pki := filepath.Join(dir, "pki")

	etcdctl := func(caFile, certName string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		all := append([]string{"--endpoints", endpoints, "--dial-timeout", "3s", "--command-timeout", "5s",
			"--cacert", caFile, "--cert", filepath.Join(pki, certName+".crt"), "--key", filepath.Join(pki, certName+".key")}, args...)
		out, err := exec.CommandContext(ctx, etcdctlBin, all...).CombinedOutput()
		return string(out), err
	}
	storeCA, clusterCA := filepath.Join(pki, "store-ca.crt"), filepath.Join(pki, "ca.crt")
	const binding = "/registry/clusterrolebindings/probe-node-admin"

	// The probe, with the CA it used (ca.crt) and with the store's own.
	for _, caFile := range []string{clusterCA, storeCA} {
		if out, err := etcdctl(caFile, "nodes/node-1", "get", "/registry/secrets/", "--prefix"); err == nil {
			t.Errorf("etcdctl get with node-1's certificate (--cacert %s): succeeded, want a refusal\n%s", filepath.Base(caFile), out)
		}
		if out, err := etcdctl(caFile, "nodes/node-1", "put", binding, "cluster-admin"); err == nil {
			t.Errorf("etcdctl put with node-1's certificate (--cacert %s): succeeded, want a refusal\n%s", filepath.Base(caFile), out)
		}
	}
	// Where they fail: the member ends the handshake with an alert (TLS 1.2
	// puts the verdict on the client certificate there; node-1's, from a
	// CA the member does not trust, is not even offered).
	nodeTLS, err := tlsFiles(storeCA, filepath.Join(pki, "nodes", "node-1.crt"), filepath.Join(pki, "nodes", "node-1.key"))
	if err != nil {
		t.Fatal(err)
	}
	nodeTLS.MaxVersion = tls.VersionTLS12
	clientAddr := strings.Split(endpoints, ",")[0]
	if err := tlsHandshake(clientAddr, nodeTLS); err == nil || !strings.Contains(err.Error(), "remote error: tls:") {
		t.Errorf("TLS handshake with node-1's certificate on %s: %v, want the member's alert", clientAddr, err)
	}

	// The API services' store client works, and nothing was written.
	out, err := etcdctl(storeCA, "apiserver-store-client", "get", "/registry/", "--prefix", "--keys-only")
	if err != nil || !strings.Contains(out, "kube-system") {
		t.Fatalf("etcdctl get with apiserver-store-client: %v\n%s\nwant the kube-system namespace among the keys", err, out)
	}
	if strings.Contains(out, binding) {
		t.Errorf("%s was written through the refused put", binding)
	}

	// The peer port: the store client certificate is the store CA's, but
	// it is no member's; a member's peer certificate is.
	st, err := localcluster.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	members := st.Processes[:3]
	storeClientTLS, err := tlsFiles(storeCA, filepath.Join(pki, "apiserver-store-client.crt"), filepath.Join(pki, "apiserver-store-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	peerAddr := peerAddr(t, members[0].PeerURL)
	if err := raftpeer.RequestVote(peerAddr, storeClientTLS); err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("Raft RPC to %s with apiserver-store-client: %v, want the member's bad certificate alert", peerAddr, err)
	}
	memberTLS, err := tlsFiles(storeCA, filepath.Join(pki, members[1].Name+"-peer.crt"), filepath.Join(pki, members[1].Name+"-peer.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := raftpeer.RequestVote(peerAddr, memberTLS); err != nil {
		t.Errorf("Raft RPC to %s with %s's peer certificate: %v", peerAddr, members[1].Name, err)
	}
	log, err := os.ReadFile(members[0].Log)
	if err != nil {
		t.Fatal(err)
	}
	if refusal := regexp.MustCompile(`refused a TLS connection.*port=peer remote-addr=127\.0\.0\.1:\d+ cn=kplane-apiserver`); !refusal.Match(log) {
		t.Errorf("%s's log does not record the refused peer connection of kplane-apiserver:\n%s", members[0].Name, testutil.Tail(string(log), 20))
	}

	// The admin kubeconfig still works, through the API service and the
	// store.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kc := exec.CommandContext(ctx, kubectl, "--kubeconfig", filepath.Join(dir, "kubeconfig"), "get", "nodes", "-o", "name")
	kc.Env = append(os.Environ(), "KUBECACHEDIR="+filepath.Join(dir, "kubecache"), "HOME="+dir)
	if out, err := kc.CombinedOutput(); err != nil || !strings.Contains(string(out), "node/node-1") {
		t.Errorf("kubectl get nodes with the admin kubeconfig: %v\n%s", err, out)
	}
}

// startUp runs `kplane up` with flags in dir until the test ends and
// returns the store endpoints it prints for etcdctl.
func startUp(t *testing.T, dir string, flags ...string) string {
	t.Helper()
	cmd := exec.Command(kplaneBin, append([]string{"up", "--base-port=0", "--data-dir", dir}, flags...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	etcdRE := regexp.MustCompile(`etcdctl --endpoints=(\S+)`)
	endpoints, up := "", false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := etcdRE.FindStringSubmatch(sc.Text()); m != nil {
			endpoints = m[1]
		}
		if strings.Contains(sc.Text(), "kplane down") {
			up = true
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
		exited <- cmd.Wait()
	}()
	if !up || endpoints == "" {
		t.Fatalf("kplane up did not come up (endpoints %q); stderr:\n%s", endpoints, stderr.String())
	}
	return endpoints
}

// tlsHandshake dials addr with tc and completes a TLS handshake.
func tlsHandshake(addr string, tc *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: tc}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// peerAddr returns the host:port of a member's peer URL.
func peerAddr(t *testing.T, peerURL string) string {
	t.Helper()
	addr, err := raftpeer.Addr(peerURL)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
