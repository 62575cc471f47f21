// This file holds the test of a whole `kplane up` with its node agent on a
// real containerd: pods are scheduled, really run, each on its own IP from
// the node's pod CIDR through the CNI network the agent writes, and answer;
// and the harness that starts it with a pod network of the test's own.

package nodeagent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/internal/containerdtest"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// TestUpContainerd runs the whole `kplane up` control plane (separate
// processes, mTLS) with its node agent on a real containerd (what `kplane
// up --runtime containerd --cri-socket PATH` starts), the agent writing
// node-1's CNI network (a bridge of the test's own over its pod CIDR):
// pods created without a node are scheduled to node-1 and really run; two
// of them serve the same container port, each in its own network
// namespace, on its own IP from node-1's pod CIDR, and answer from the
// host; a hostPort answers on the host's address; a hostNetwork pod runs
// in the host's namespace with the host's IP; and once the pods are
// deleted no veth, network namespace or NAT rule of theirs remains. Root
// and containerd are needed (skipped otherwise; failed under CI=true).
func TestUpContainerd(t *testing.T) {
	testutil.SkipShort(t, "builds kplane and runs a whole cluster on containerd")
	requireUpOnContainerd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp, envs, pn := upOnContainerd(ctx, t, 1)
	env := envs[0]
	conn, err := cp.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pods := client.Must[*corev1.Pod](conn)
	node, err := client.Must[*corev1.Node](conn).Get(ctx, "", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	podCIDR, err := netip.ParsePrefix(node.GetSpec().GetPodCidr())
	if err != nil {
		t.Fatalf("node-1's spec.podCIDR %q: %v", node.GetSpec().GetPodCidr(), err)
	}
	if !pn.cluster.Contains(podCIDR.Addr()) {
		t.Fatalf("node-1's pod CIDR %s is not in the test's %s", podCIDR, pn.cluster)
	}

	hostPort := int32(testutil.FreePort(t))
	hostNetAddr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	grace := int64(1)
	hello := func(name, addr string, hostNetwork bool, ports ...*corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{
			Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: &corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace,
				HostNetwork:                   hostNetwork,
				Containers: []*corev1.Container{{
					Name:  "hello",
					Image: containerdtest.HelloImage,
					Env:   []*corev1.EnvVar{{Name: containerdtest.HelloAddrEnv, Value: addr}},
					Ports: ports,
				}},
			},
		}
	}
	for _, p := range []*corev1.Pod{
		hello("hello-a", ":8080", false, &corev1.ContainerPort{ContainerPort: 8080, HostPort: hostPort}),
		hello("hello-b", ":8080", false, &corev1.ContainerPort{ContainerPort: 8080}),
		hello("hello-host", hostNetAddr, true),
	} {
		if _, err := pods.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	running := map[string]*corev1.Pod{}
	for _, name := range []string{"hello-a", "hello-b", "hello-host"} {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
			p, err := pods.Get(ctx, "default", name)
			if err == nil && p.GetStatus().GetPhase() == "Running" {
				running[name] = p
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s not Running within 2 minutes: %v %v", name, err, p.GetStatus())
			}
		}
	}
	for name, p := range running {
		if got := p.GetSpec().GetNodeName(); got != "node-1" {
			t.Errorf("pod %s on node %q, want node-1", name, got)
		}
		if id := p.GetStatus().GetContainerStatuses()[0].GetContainerId(); !strings.HasPrefix(id, "containerd://") {
			t.Errorf("pod %s: container ID %q, want a containerd:// one", name, id)
		}
		st := p.GetStatus()
		if ips := st.GetPodIps(); len(ips) != 1 || ips[0].GetIp() != st.GetPodIp() {
			t.Errorf("pod %s: podIPs %v, want [%s]", name, ips, st.GetPodIp())
		}
	}
	ipA, ipB := running["hello-a"].GetStatus().GetPodIp(), running["hello-b"].GetStatus().GetPodIp()
	for _, ip := range []string{ipA, ipB} {
		a, err := netip.ParseAddr(ip)
		if err != nil || !podCIDR.Contains(a) {
			t.Errorf("pod IP %q: want an address in node-1's pod CIDR %s", ip, podCIDR)
		}
	}
	t.Logf("node-1's pod CIDR %s on bridge %s; pod IPs %s and %s", podCIDR, pn.bridge(1), ipA, ipB)
	if ipA == ipB {
		t.Errorf("both pods have IP %s, want one each", ipA)
	}
	if got, want := running["hello-host"].GetStatus().GetPodIp(), node.GetStatus().GetAddresses()[0].GetAddress(); got != want {
		t.Errorf("hostNetwork pod's IP %q, want the node's %q", got, want)
	}
	for _, addr := range []string{
		net.JoinHostPort(ipA, "8080"),         // its own namespace, from the host
		net.JoinHostPort(ipB, "8080"),         // the same port, another namespace
		fmt.Sprintf("127.0.0.1:%d", hostPort), // hello-a's hostPort, through portmap
		hostNetAddr,                           // the host's namespace
	} {
		if body := getHello(t, "http://"+addr+"/"); !strings.Contains(body, "hello from kplane") {
			t.Errorf("GET http://%s/: got %q, want the hello server's greeting", addr, body)
		}
	}

	for name := range running {
		if err := pods.Delete(ctx, "default", name, client.DeleteOptions{}); err != nil {
			t.Errorf("delete pod %s: %v", name, err)
		}
	}
	for name := range running {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
			if _, err := pods.Get(ctx, "default", name); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s still there a minute after its deletion", name)
			}
		}
	}
	// The agent confirms a deletion only after StopPodSandbox, where
	// containerd calls CNI DEL and removes the namespace.
	if out := runHost(t, "ip", "-o", "link", "show", "master", pn.bridge(1)); strings.TrimSpace(out) != "" {
		t.Errorf("interfaces still on %s after the pods went:\n%s", pn.bridge(1), out)
	}
	nsDir := filepath.Join(env.Dir, "state", "netns")
	if ents, err := os.ReadDir(nsDir); err == nil && len(ents) > 0 {
		t.Errorf("network namespaces left in %s: %v", nsDir, ents)
	}
	nat := runHost(t, "iptables-save", "-t", "nat")
	for _, ip := range []string{ipA, ipB} {
		if strings.Contains(nat, ip+"/32") || strings.Contains(nat, ip+":8080") {
			t.Errorf("NAT rules for %s left after its pod went:\n%s", ip, nat)
		}
	}
}

// TestUpContainerdNodes runs `kplane up --runtime containerd` with two
// nodes on one host, each with its own containerd and CNI network (a
// bridge over its pod CIDR): a pod on each node gets an IP from its own
// node's pod CIDR, answers from the host, and each reaches the other
// across the nodes with its own address (no NAT between pods, as
// Kubernetes' network model wants). Root and containerd are needed
// (skipped otherwise; failed under CI=true).
func TestUpContainerdNodes(t *testing.T) {
	testutil.SkipShort(t, "builds kplane and runs a whole cluster on containerd")
	requireUpOnContainerd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp, envs, pn := upOnContainerd(ctx, t, 2)
	conn, err := cp.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pods := client.Must[*corev1.Pod](conn)

	grace := int64(1)
	nodes := []string{"node-1", "node-2"}
	cidrs := map[string]netip.Prefix{}
	for _, n := range nodes {
		node, err := client.Must[*corev1.Node](conn).Get(ctx, "", n)
		if err != nil {
			t.Fatal(err)
		}
		c, err := netip.ParsePrefix(node.GetSpec().GetPodCidr())
		if err != nil || !pn.cluster.Contains(c.Addr()) {
			t.Fatalf("%s's spec.podCIDR %q: want a subnet of %s (%v)", n, node.GetSpec().GetPodCidr(), pn.cluster, err)
		}
		cidrs[n] = c
		if _, err := pods.Create(ctx, &corev1.Pod{
			Metadata: &metav1.ObjectMeta{Name: "hello-" + n, Namespace: "default"},
			Spec: &corev1.PodSpec{
				NodeName:                      n,
				TerminationGracePeriodSeconds: &grace,
				Containers: []*corev1.Container{{
					Name:  "hello",
					Image: containerdtest.HelloImage,
					Env:   []*corev1.EnvVar{{Name: containerdtest.HelloAddrEnv, Value: ":8080"}},
				}},
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if cidrs["node-1"].Overlaps(cidrs["node-2"]) {
		t.Fatalf("the nodes' pod CIDRs %s and %s overlap", cidrs["node-1"], cidrs["node-2"])
	}
	ips, ctrs := map[string]string{}, map[string]string{}
	for _, n := range nodes {
		name := "hello-" + n
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
			p, err := pods.Get(ctx, "default", name)
			if err == nil && p.GetStatus().GetPhase() == "Running" {
				ips[n] = p.GetStatus().GetPodIp()
				ctrs[n] = strings.TrimPrefix(p.GetStatus().GetContainerStatuses()[0].GetContainerId(), "containerd://")
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s not Running within 2 minutes: %v %v", name, err, p.GetStatus())
			}
		}
		if a, err := netip.ParseAddr(ips[n]); err != nil || !cidrs[n].Contains(a) {
			t.Errorf("pod on %s has IP %q, want one in its pod CIDR %s", n, ips[n], cidrs[n])
		}
		if body := getHello(t, "http://"+net.JoinHostPort(ips[n], "8080")+"/"); !strings.Contains(body, "hello from kplane") {
			t.Errorf("GET the pod on %s from the host: got %q, want the greeting", n, body)
		}
	}
	t.Logf("pod CIDRs %v; pod IPs %v", cidrs, ips)
	// Each agent's masquerade rule spares the cluster's pod network.
	nat := runHost(t, "iptables-save", "-t", "nat")
	for _, n := range nodes {
		want := fmt.Sprintf("-A POSTROUTING -s %s ! -d %s -m comment --comment \"kplane %s: ", cidrs[n], pn.cluster, n)
		if !strings.Contains(nat, want) {
			t.Errorf("no masquerade rule of %s (%s...) in the nat table:\n%s", n, want, nat)
		}
	}
	for i, from := range nodes {
		to := nodes[1-i]
		rc, err := cri.New(cri.Config{Socket: envs[i].Socket})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		url := "http://" + net.JoinHostPort(ips[to], "8080") + "/remote"
		var resp *runtimeapi.ExecSyncResponse
		for range 20 {
			resp, err = rc.ExecSync(ctx, ctrs[from], []string{"/hello", "get", url}, 10*time.Second)
			if err == nil && resp.GetExitCode() == 0 {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		if err != nil || resp.GetExitCode() != 0 {
			t.Errorf("pod on %s GET %s: %v, exit %d: %s", from, url, err, resp.GetExitCode(), resp.GetStderr())
			continue
		}
		if got := strings.TrimSpace(string(resp.GetStdout())); !strings.HasPrefix(got, ips[from]+":") {
			t.Errorf("pod on %s seen by the pod on %s as %q, want its own address %s (no NAT between pods)", from, to, got, ips[from])
		}
	}
	for _, n := range nodes {
		if err := pods.Delete(ctx, "default", "hello-"+n, client.DeleteOptions{}); err != nil {
			t.Errorf("delete pod: %v", err)
		}
	}
	for i, n := range nodes {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
			if _, err := pods.Get(ctx, "default", "hello-"+n); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod on %s still there a minute after its deletion", n)
			}
		}
		if out := runHost(t, "ip", "-o", "link", "show", "master", pn.bridge(i+1)); strings.TrimSpace(out) != "" {
			t.Errorf("interfaces still on %s after the pods went:\n%s", pn.bridge(i+1), out)
		}
	}
}

// getHello GETs url, retrying while nothing answers (the server may still
// be starting), and returns the body.
func getHello(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	var last error
	for range 50 {
		resp, err := c.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(body)
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("GET %s: %v", url, last)
	return ""
}

// runHost runs a command and returns its output, failing the test if it fails.
func runHost(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// upOnContainerd starts n containerds for the test and `kplane up
// --runtime containerd` on them (node-i on the i-th), the nodes' pods on a
// network of the test's own (testPodNet), all stopped and removed when the
// test ends (kplane first, then the containerds, which remove what
// sandboxes are left, then the bridges and the NAT rules the CNI plugins
// and the agents made, and the Service proxy's nftables table); the node
// agents' and the proxy's logs are shown if the test failed.
func upOnContainerd(ctx context.Context, t *testing.T, n int) (*localcluster.ControlPlane, []*containerdtest.Env, testPodNet) {
	t.Helper()
	pn := newTestPodNet(t)
	cfg := localcluster.UpConfig{
		Runtime: "containerd", ClusterCIDR: pn.cluster.String(), NodeCIDRMaskSize: pn.cluster.Bits() + 2,
		ProxyTable: pn.proxyTable(),
	}
	var envs []*containerdtest.Env
	for i := range n {
		env, err := containerdtest.Start(ctx, containerdtest.Options{})
		if err != nil {
			t.Fatalf("start containerd: %v", err)
		}
		t.Cleanup(func() {
			if err := env.Close(); err != nil {
				t.Errorf("containerd clean-up: %v", err)
			}
		})
		envs = append(envs, env)
		// Node agent i writes node-i's network into its containerd's CNI
		// directory; containerd reports NetworkReady (and the node turns
		// Ready) once it has loaded it.
		cfg.CRISockets = append(cfg.CRISockets, env.Socket)
		cfg.CNIConfDirs = append(cfg.CNIConfDirs, filepath.Join(env.Dir, "cni", "net.d"))
		cfg.CNIBridges = append(cfg.CNIBridges, pn.bridge(i+1))
	}
	// Every node's cgroups under the first containerd's parent: its Close,
	// the last, removes them.
	cfg.CgroupParent = envs[0].CgroupParent

	dir := t.TempDir()
	cfg.Binary, cfg.DataDir = filepath.Join(dir, "kplane"), filepath.Join(dir, "up")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", cfg.Binary, "github.com/kplane/kplane/cmd/kplane").CombinedOutput(); err != nil {
		t.Fatalf("build kplane: %v\n%s", err, out)
	}
	agentLogs := func() string {
		logs, _ := filepath.Glob(filepath.Join(cfg.DataDir, "nodeagent*.log"))
		logs = append(logs, filepath.Join(cfg.DataDir, "proxy.log"))
		var b strings.Builder
		for _, l := range logs {
			data, _ := os.ReadFile(l)
			fmt.Fprintf(&b, "--- %s ---\n%s", filepath.Base(l), data)
		}
		return b.String()
	}
	cp, err := localcluster.Up(ctx, cfg)
	if err != nil {
		t.Fatalf("kplane up --runtime containerd: %v\n%s", err, agentLogs())
	}
	// Registered after the containerds' clean-up, so it runs first.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s", agentLogs())
		}
		cp.Stop()
		// The pods' tmpfs volumes outlive the agent, as the kubelet's.
		if err := containerdtest.UnmountAll(cfg.DataDir); err != nil {
			t.Errorf("unmount the pods' volumes: %v", err)
		}
	})
	return cp, envs, pn
}

// testPodNet is the pod network a test gives its nodes: bridges named
// kplt<x>-<node> and a 10.200.x.0/24 cluster CIDR (in /26s, one a node)
// that no interface or route of the host uses.
type testPodNet struct {
	prefix  string // of the bridges' names
	cluster netip.Prefix
}

// bridge is node-i's bridge.
func (pn testPodNet) bridge(i int) string { return pn.prefix + strconv.Itoa(i) }

// proxyTable is the nftables table of the cluster's Service proxy.
func (pn testPodNet) proxyTable() string { return "kplane-proxy-" + strings.TrimSuffix(pn.prefix, "-") }

// newTestPodNet picks a testPodNet and registers, to run after
// everything else the test cleans up, the removal of what the CNI plugins
// and the node agents leave on the host once every pod is gone: the
// bridges, the NAT chains and rules that were not there before, ip_forward
// (which the bridge plugin turns on) as it was, and libcni's cache
// directory if it was not there.
func newTestPodNet(t *testing.T) testPodNet {
	t.Helper()
	routes := runHost(t, "ip", "-4", "-o", "route", "show", "table", "all")
	links := runHost(t, "ip", "-o", "link", "show")
	var pn testPodNet
	for i := range 250 {
		x := (os.Getpid()+i)%250 + 1
		prefix := fmt.Sprintf("kplt%d-", x)
		subnet := fmt.Sprintf("10.200.%d.", x)
		if !strings.Contains(links, " "+prefix) && !strings.Contains(routes, subnet) {
			pn = testPodNet{prefix: prefix, cluster: netip.MustParsePrefix(subnet + "0/24")}
			break
		}
	}
	if pn.prefix == "" {
		t.Fatal("no free 10.200.x.0/24 for the test's pod network")
	}
	natBefore := runHost(t, "iptables-save", "-t", "nat")
	forward, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		t.Fatal(err)
	}
	// libcni's cache of results, which containerd keeps there.
	const cniCache = "/var/lib/cni"
	_, err = os.Stat(cniCache)
	cacheMade := errors.Is(err, os.ErrNotExist)
	t.Cleanup(func() {
		ifs, err := net.Interfaces()
		if err != nil {
			t.Error(err)
		}
		for _, i := range ifs {
			if strings.HasPrefix(i.Name, pn.prefix) {
				if out, err := exec.Command("ip", "link", "del", i.Name).CombinedOutput(); err != nil {
					t.Errorf("remove bridge %s: %v: %s", i.Name, err, out)
				}
			}
		}
		if err := removeNewNATRules(natBefore, strings.TrimSuffix(pn.cluster.Addr().String(), "0")); err != nil {
			t.Errorf("remove the CNI plugins' NAT chains: %v", err)
		}
		// The Service proxy leaves its table when stopped, as kube-proxy
		// leaves its rules.
		if tables, err := exec.Command("nft", "list", "tables").Output(); err == nil && strings.Contains(string(tables), " "+pn.proxyTable()+"\n") {
			if out, err := exec.Command("nft", "delete", "table", "ip", pn.proxyTable()).CombinedOutput(); err != nil {
				t.Errorf("delete the proxy's table: %v: %s", err, out)
			}
		}
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", forward, 0o644); err != nil {
			t.Errorf("restore ip_forward: %v", err)
		}
		if cacheMade {
			// Only empty directories go: the results of pods that are
			// gone are removed by their CNI DEL.
			os.Remove(filepath.Join(cniCache, "results"))
			os.Remove(cniCache)
		}
	})
	return pn
}

// removeNewNATRules deletes from the nat table the CNI plugins' chains
// (named CNI-...) that are not in before (an iptables-save of it), and
// the rules that jump to them (portmap's shared CNI-HOSTPORT-* chains,
// which outlive every pod), and the rules that were not there before and
// name an address starting with prefix (the node agent's masquerade rule
// for the test's pod CIDR).
func removeNewNATRules(before, prefix string) error {
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		return fmt.Errorf("iptables-save: %w", err)
	}
	had := map[string]bool{}
	for _, l := range strings.Split(before, "\n") {
		if strings.HasPrefix(l, ":") {
			had[strings.Fields(l[1:])[0]] = true
		}
	}
	var chains []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(strings.TrimPrefix(l, ":")); strings.HasPrefix(l, ":CNI-") && !had[f[0]] {
			chains = append(chains, f[0])
		}
	}
	var errs []error
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "-A" || slices.Contains(chains, f[1]) {
			continue
		}
		i := slices.Index(f, "-j")
		jumpsToNew := i >= 0 && i+1 < len(f) && slices.Contains(chains, f[i+1])
		if jumpsToNew || (strings.Contains(l, " "+prefix) && !strings.Contains(before, l)) {
			// iptables-save quotes comments; the rule is given back as
			// iptables reads its own output, through a shell-free split.
			args := append([]string{"-t", "nat", "-D"}, unquoteRule(l[len("-A "):])...)
			if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("iptables %v: %w: %s", args, err, out))
			}
		}
	}
	for _, op := range []string{"-F", "-X"} {
		for _, c := range chains {
			if out, err := exec.Command("iptables", "-t", "nat", op, c).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("iptables -t nat %s %s: %w: %s", op, c, err, out))
			}
		}
	}
	return errors.Join(errs...)
}

// unquoteRule splits an iptables-save rule into arguments, keeping a
// double-quoted string (a comment) as one.
func unquoteRule(rule string) []string {
	var args []string
	var cur strings.Builder
	quoted, inArg := false, false
	for _, r := range rule {
		switch {
		case r == '"':
			quoted, inArg = !quoted, true
		case r == ' ' && !quoted:
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args
}

// requireUpOnContainerd skips (fails under CI=true) a test of `kplane up
// --runtime containerd` without root, containerd's binaries, ip and
// iptables-save.
func requireUpOnContainerd(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t, "a real containerd runs as root")
	for _, b := range containerdtest.Binaries {
		testutil.RequireBinary(t, b, containerdtest.InstallHint)
	}
	testutil.RequireBinary(t, "ip", "apt-get install -y iproute2")
	testutil.RequireBinary(t, "iptables-save", "apt-get install -y iptables")
}
