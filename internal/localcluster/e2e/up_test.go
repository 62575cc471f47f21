// This file holds the tests of the whole `kplane up` as separate processes:
// kubectl against it, killed components restarted, a clean stop on Ctrl-C or
// `kplane down`, and the clients it refuses.

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// TestUp runs `kplane up` (the whole control plane as separate processes),
// checks the store it prints, applies examples/deployment.yaml with the real
// kubectl through the kubeconfig it writes, waits for 2 pods Running,
// SIGKILLs an API service, a scheduler and a controller manager (kplane up
// restarts them with new PIDs while the cluster carries on scaling), makes
// the active scheduler lose its Lease (it exits, and is restarted too), and
// stops it with SIGINT (Ctrl-C): it exits cleanly and every process it
// started is gone.
func TestUp(t *testing.T) {
	testutil.SkipShort(t, "runs a whole `kplane up` of the built binary")
	kubectl := testutil.RequireBinary(t, "kubectl", "apt-get install kubectl")
	dir := t.TempDir()
	cmd := exec.Command(kplaneBin, "up", "--base-port=0", "--data-dir", dir)
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
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
		}
	}()
	var (
		endpoints, kubeconfig string
		pids                  []int
		pidRE                 = regexp.MustCompile(`\spid (\d+)\s`)
		etcdRE                = regexp.MustCompile(`etcdctl --endpoints=(\S+)`)
		kubeRE                = regexp.MustCompile(`kubectl --kubeconfig (\S+)`)
		addrRE                = regexp.MustCompile(`^\s*(apiserver-2|gateway)\s+pid \d+\s+(127\.0\.0\.1:\d+)\s`)
		addrs                 = map[string]string{}
		procPIDs              = map[string]int{}
	)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if m := pidRE.FindStringSubmatch(line); m != nil {
			pid, _ := strconv.Atoi(m[1])
			pids = append(pids, pid)
			procPIDs[strings.Fields(line)[0]] = pid
		}
		if m := addrRE.FindStringSubmatch(line); m != nil {
			addrs[m[1]] = m[2]
		}
		if m := etcdRE.FindStringSubmatch(line); m != nil {
			endpoints = m[1]
		}
		if m := kubeRE.FindStringSubmatch(line); m != nil {
			kubeconfig = m[1]
			break
		}
	}
	if kubeconfig == "" || endpoints == "" {
		_ = cmd.Wait()
		t.Fatalf("kplane up printed no kubectl --kubeconfig or etcdctl line; stderr:\n%s", stderr.String())
	}
	go func() {
		for sc.Scan() {
		}
		exited <- cmd.Wait()
	}()
	// 3 store members, 2 API services, gateway, 2 schedulers,
	// 2 controller managers, 1 node agent, the cluster DNS.
	if got, want := len(pids), 12; got != want {
		t.Errorf("got %d processes listed, want %d", got, want)
	}
	if want := filepath.Join(dir, "kubeconfig"); kubeconfig != want {
		t.Errorf("got kubeconfig %s, want %s", kubeconfig, want)
	}

	storeTLS, err := tlsFiles(filepath.Join(dir, "pki", "store-ca.crt"), filepath.Join(dir, "pki", "store-client.crt"), filepath.Join(dir, "pki", "store-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), TLS: storeTLS, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	list, err := cli.MemberList(ctx)
	cancel()
	if err != nil || len(list.Members) != 3 {
		t.Fatalf("member list: got %v (%v), want 3 members", list, err)
	}

	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		c.Env = append(os.Environ(), "KUBECACHEDIR="+filepath.Join(dir, "kubecache"), "HOME="+dir)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	// The API services keep default/kubernetes as kube-apiserver does: the
	// first address of 10.96.0.0/12, port 443 to the gateway's port, and
	// Endpoints listing the gateway's address.
	_, gwPort, _ := strings.Cut(addrs["gateway"], ":")
	if out, err := run("get", "service", "kubernetes", "-o", "jsonpath={.spec.clusterIP} {.spec.ports[0].port} {.spec.ports[0].targetPort}"); err != nil || out != "10.96.0.1 443 "+gwPort {
		t.Errorf("the kubernetes Service: %q (%v), want %q", out, err, "10.96.0.1 443 "+gwPort)
	}
	if out, err := run("get", "endpoints", "kubernetes", "--no-headers"); err != nil || !strings.Contains(out, addrs["gateway"]) {
		t.Errorf("the kubernetes Endpoints: %q (%v), want %s", out, err, addrs["gateway"])
	}
	if out, err := run("apply", "-f", filepath.Join("..", "..", "..", "examples", "deployment.yaml")); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, err := run("get", "pods", "-l", "app=web", "--no-headers")
		if err == nil && strings.Count(out, " Running ") == 2 && len(strings.Split(strings.TrimSpace(out), "\n")) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 2 pods Running within 90s; kubectl get pods said (%v):\n%s", err, out)
		}
		time.Sleep(time.Second)
	}

	// pods/log works across processes: the API service reaches the node
	// agent's log server over HTTPS with its kubelet client certificate
	// (the pods log nothing on the built-in runtime; an error would show).
	if out, err := run("logs", "deploy/web"); err != nil {
		t.Errorf("kubectl logs deploy/web: %v\n%s", err, out)
	}

	// Kill an API service replica, a scheduler and a controller manager:
	// every client (gateway, schedulers, controllers, node agent) fails
	// over to the other API service, the standbys or the restarted
	// replicas lead, so scaling up still ends with 3 pods Running; and
	// kplane up restarts the three.
	killed := []string{"apiserver-1", "scheduler-1", "controllers-1"}
	for _, name := range killed {
		if pid := procPIDs[name]; pid == 0 {
			t.Fatalf("kplane up printed no pid for %s", name)
		} else if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	deadline = time.Now().Add(90 * time.Second)
	for {
		out, err := run("scale", "deployment/web", "--replicas=3")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl scale with %v killed: %v\n%s", killed, err, out)
		}
		time.Sleep(time.Second)
	}
	for {
		out, err := run("get", "pods", "-l", "app=web", "--no-headers")
		if err == nil && strings.Count(out, " Running ") == 3 && len(strings.Split(strings.TrimSpace(out), "\n")) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 3 pods Running within 90s of killing %v; kubectl get pods said (%v):\n%s", killed, err, out)
		}
		time.Sleep(time.Second)
	}

	st := checkStatus(t, dir, procPIDs, killed)
	pids = append(pids, checkLeaseLoss(t, dir, st)...)
	st, _ = getStatus(t, dir)
	for _, p := range processes(st) {
		pids = append(pids, p.PID)
	}

	// Both leader-elected components hold their Lease.
	if out, err := run("get", "leases", "-n", "kube-system", "-o", "name"); err != nil ||
		!strings.Contains(out, "lease.coordination.k8s.io/kube-scheduler") ||
		!strings.Contains(out, "lease.coordination.k8s.io/kube-controller-manager") {
		t.Errorf("kubectl get leases: got (%v)\n%s\nwant the scheduler's and the controller manager's", err, out)
	}
	checkRefused(t, dir, addrs["apiserver-2"], addrs["gateway"])

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("kplane up after Ctrl-C: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("kplane up still running 60s after Ctrl-C")
	}
	// Every process it started is gone (kplane up waits for each).
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still running after kplane up stopped", pid)
		}
	}
}

// checkRefused checks what `kplane up` refuses: plaintext gRPC to an API
// service, an HTTPS client that does not trust the generated CA (the
// gateway's certificate does not verify), and a request without
// credentials (401).
func checkRefused(t *testing.T, dir, apiAddr, gwAddr string) {
	t.Helper()
	if apiAddr == "" || gwAddr == "" {
		t.Fatalf("kplane up printed no address for apiserver-1 (%q) or gateway (%q)", apiAddr, gwAddr)
	}
	conn, err := grpc.NewClient(apiAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := client.Must[*corev1.Namespace](conn).List(ctx, "", client.ListOptions{}); err == nil {
		t.Error("plaintext gRPC to the API service: got an answer, want a refusal")
	}

	url := "https://" + gwAddr + "/api/v1/namespaces"
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url); err == nil {
		resp.Body.Close()
		t.Error("HTTPS without the generated CA: got an answer, want a certificate error")
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("HTTPS with the generated CA: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("HTTPS without credentials: got status %d, want 401", resp.StatusCode)
	}
}

// tlsFiles returns a client TLS configuration from PEM files.
func tlsFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// getStatus runs `kplane status -o json`.
func getStatus(t *testing.T, dir string) (*localcluster.Status, []byte) {
	t.Helper()
	out, err := exec.Command(kplaneBin, "status", "--data-dir", dir, "-o", "json").Output()
	if err != nil {
		t.Fatalf("kplane status -o json: %v\n%s", err, out)
	}
	var st localcluster.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("kplane status -o json: %v\n%s", err, out)
	}
	return &st, out
}

// processes returns every process of a status but the store members.
func processes(st *localcluster.Status) []localcluster.ProcessStatus {
	return slices.Concat(st.APIServer, st.Gateway, st.Scheduler, st.Controllers, st.NodeAgent)
}

// pidOf returns the current PID of the named process in st (0 if none).
func pidOf(st *localcluster.Status, name string) int {
	for _, p := range processes(st) {
		if p.Name == name {
			return p.PID
		}
	}
	return 0
}

// checkStatus checks `kplane status -o json` after the processes killed
// were SIGKILLed: each is running again with a new PID and one restart
// (the others none), one Raft leader among 3 running members, both API
// services serving, one active scheduler and one active controller
// manager, 3 nodes Ready, and the plain table. It returns the status.
func checkStatus(t *testing.T, dir string, before map[string]int, killed []string) *localcluster.Status {
	t.Helper()
	var st *localcluster.Status
	deadline := time.Now().Add(60 * time.Second)
	for {
		var out []byte
		st, out = getStatus(t, dir)
		// The restarts take the supervisor's backoff and the Leases may
		// still name a replica that was killed a moment ago; wait
		// (bounded) for every process running and one active of each.
		restarted := true
		for _, p := range processes(st) {
			restarted = restarted && p.Running && (p.Healthy == nil || *p.Healthy)
		}
		if restarted && countActive(st.Scheduler) == 1 && countActive(st.Controllers) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kplane status: want every process running and serving, one active scheduler and controller manager within 60s; got\n%s", out)
		}
		time.Sleep(time.Second)
	}
	// Another replica may have exited by itself meanwhile (a standby
	// that lost its Lease in the failover) and been restarted too.
	for _, p := range processes(st) {
		switch {
		case !slices.Contains(killed, p.Name):
			if p.Restarts != 0 {
				t.Logf("%s exited by itself and was restarted %d times", p.Name, p.Restarts)
			}
		case p.Restarts < 1 || p.PID == before[p.Name]:
			t.Errorf("%s: pid %d (%d before the kill), %d restarts; want a new pid and a restart", p.Name, p.PID, before[p.Name], p.Restarts)
		}
	}
	leaders := 0
	for _, m := range st.Store {
		if !m.Running || m.PID == 0 || !strings.HasPrefix(m.ClientURL, "https://") || m.ID == "" {
			t.Errorf("store member %+v: want running with an https client URL and an ID", m)
		}
		if m.Leader {
			leaders++
		}
	}
	if len(st.Store) != 3 || leaders != 1 {
		t.Errorf("store: got %d members, %d leaders; want 3 and 1", len(st.Store), leaders)
	}
	if len(st.APIServer) != 2 {
		t.Errorf("apiserver: got %+v, want 2", st.APIServer)
	}
	ready := 0
	for _, n := range st.Nodes {
		if n.Ready {
			ready++
		}
	}
	if ready != 3 {
		t.Errorf("nodes: got %+v, want 3 Ready", st.Nodes)
	}
	out, err := exec.Command(kplaneBin, "status", "--data-dir", dir).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^store\s+store\d\s+\d+\s+running\s+\d+\s+leader\s`).Match(out) ||
		!regexp.MustCompile(`(?m)^apiserver\s+apiserver-1\s+\d+\s+running\s+[1-9]\d*\s+serving\s`).Match(out) ||
		!strings.Contains(string(out), "nodes: 3 of 3 Ready") {
		t.Errorf("kplane status: %v\n%s\nwant a leader, apiserver-1 running again after its restart and 3 of 3 nodes Ready", err, out)
	}
	return st
}

// checkLeaseLoss makes the active scheduler lose its Lease: SIGSTOP past
// its renew deadline (10 s), then SIGCONT. It finds it has not renewed in
// time, stops leading and exits with an error, as kube-scheduler does, and
// kplane up restarts it. It returns the PIDs it saw.
func checkLeaseLoss(t *testing.T, dir string, st *localcluster.Status) []int {
	t.Helper()
	var active localcluster.ProcessStatus
	for _, p := range st.Scheduler {
		if p.Active != nil && *p.Active {
			active = p
		}
	}
	if err := syscall.Kill(active.PID, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", active.Name, err)
	}
	time.Sleep(12 * time.Second)
	if err := syscall.Kill(active.PID, syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT %s: %v", active.Name, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, out := getStatus(t, dir)
		var p localcluster.ProcessStatus
		for _, s := range st.Scheduler {
			if s.Name == active.Name {
				p = s
			}
		}
		if p.Running && p.PID != active.PID && p.Restarts == active.Restarts+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) did not come back with a new PID within 60s of losing its Lease; status:\n%s", active.Name, active.PID, out)
		}
		time.Sleep(time.Second)
	}
	log, err := os.ReadFile(active.Log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "lost the leader lease") {
		t.Errorf("%s's log does not say it lost its Lease:\n%s", active.Name, log)
	}
	st, _ = getStatus(t, dir)
	return []int{active.PID, pidOf(st, active.Name)}
}

func countActive(ps []localcluster.ProcessStatus) int {
	n := 0
	for _, p := range ps {
		if p.Active != nil && *p.Active {
			n++
		}
	}
	return n
}

// TestUpDown starts a small `kplane up` (sizes from its flags), stops it
// with `kplane down` from outside, and checks that kplane up exited
// cleanly, every process is gone, and `kplane status` then says nothing
// runs there.
func TestUpDown(t *testing.T) {
	testutil.SkipShort(t, "runs a whole `kplane up` of the built binary")
	dir := t.TempDir()
	cmd := exec.Command(kplaneBin, "up", "--base-port=0", "--data-dir", dir,
		"--store-members=1", "--apiservers=1", "--schedulers=1", "--controller-managers=1", "--nodes=1")
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
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
		}
	}()
	var pids []int
	pidRE := regexp.MustCompile(`\spid (\d+)\s`)
	sc := bufio.NewScanner(stdout)
	up := false
	for sc.Scan() {
		if m := pidRE.FindStringSubmatch(sc.Text()); m != nil {
			pid, _ := strconv.Atoi(m[1])
			pids = append(pids, pid)
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
	if !up {
		t.Fatalf("kplane up did not come up; stderr:\n%s", stderr.String())
	}
	// 1 store member, 1 API service, the gateway, 1 scheduler, 1
	// controller manager, 1 node agent, the cluster DNS.
	if len(pids) != 7 {
		t.Errorf("got %d processes listed, want 7", len(pids))
	}
	if out, err := exec.Command(kplaneBin, "down", "--data-dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("kplane down: %v\n%s", err, out)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("kplane up after kplane down: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("kplane up still running 60s after kplane down")
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still running after kplane down", pid)
		}
	}
	out, err := exec.Command(kplaneBin, "status", "--data-dir", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no kplane up is running here") {
		t.Errorf("kplane status after kplane down: %v\n%s\nwant an error saying nothing runs", err, out)
	}
}
