// Benchmarks, run on demand (they take minutes and their figures depend on
// the machine; they are not pass/fail):
//
//	KPLANE_NODEAGENT_BENCH=1 go test -run 'TestBench' -v -timeout 30m ./nodeagent/
//	KPLANE_NODEAGENT_BENCH=1 KPLANE_BENCH_BIN=/tmp/kplane-a go test -run 'TestBenchManyNodes' -v ./nodeagent/
//
// TestBenchBindToRunning measures bind → Running (seen by a watch) on one
// node with the built-in runtime and, as root with containerd, on a real
// containerd. TestBenchManyNodes runs `kplane nodeagent --nodes 100` as its
// own process against an in-process API service, binds 30 pods to each
// node, and reports that process's CPU and memory.

package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/internal/containerdtest"
	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/apiserver/authn"
	"github.com/kplane/kplane/services/client"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func benchOnly(t *testing.T) {
	if os.Getenv("KPLANE_NODEAGENT_BENCH") == "" {
		t.Skip("set KPLANE_NODEAGENT_BENCH=1 to run the node agent benchmarks")
	}
}

// runningWatch records when each pod in "default" is first seen Running.
type runningWatch struct {
	mu      sync.Mutex
	running map[string]time.Time
}

func watchRunning(ctx context.Context, t *testing.T, pods *client.Client[*corev1.Pod]) *runningWatch {
	t.Helper()
	_, rv, err := pods.List(ctx, "default", client.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := pods.Watch(ctx, "default", client.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	rw := &runningWatch{running: map[string]time.Time{}}
	go func() {
		defer w.Close()
		for {
			ev, err := w.Next()
			if err != nil {
				return
			}
			if ev.Object.GetStatus().GetPhase() == PhaseRunning {
				rw.mu.Lock()
				if _, ok := rw.running[ev.Object.GetMetadata().GetName()]; !ok {
					rw.running[ev.Object.GetMetadata().GetName()] = time.Now()
				}
				rw.mu.Unlock()
			}
		}
	}()
	return rw
}

func (rw *runningWatch) count() int {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return len(rw.running)
}

// latencies are bind → Running per pod.
func (rw *runningWatch) latencies(bound map[string]time.Time) []time.Duration {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	var out []time.Duration
	for name, b := range bound {
		if r, ok := rw.running[name]; ok {
			out = append(out, r.Sub(b))
		}
	}
	slices.Sort(out)
	return out
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// bindAll creates and binds pods made by mk to nodes, with par binders, at
// most rate binds per second (0: as fast as possible); it returns the bind
// times.
func bindAll(ctx context.Context, t *testing.T, pods *client.Client[*corev1.Pod], n int, node func(i int) string, mk func(i int) *corev1.Pod, par int, rate float64) map[string]time.Time {
	t.Helper()
	for i := range n {
		if _, err := pods.Create(ctx, mk(i)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	bound := map[string]time.Time{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(par)
	start := time.Now()
	for i := range n {
		if rate > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		}
		g.Go(func() error {
			name := mk(i).Metadata.Name
			at := time.Now()
			if err := pods.Bind(gctx, "default", name, node(i)); err != nil {
				return err
			}
			mu.Lock()
			bound[name] = at
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return bound
}

func waitCount(t *testing.T, rw *runningWatch, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for rw.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pods Running after %v", rw.count(), n, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestBenchBindToRunning(t *testing.T) {
	benchOnly(t)
	const n = 100
	t.Run("built-in runtime", func(t *testing.T) {
		c := startCluster(t)
		startSimNode(t, c, "n1", func(cfg *Config) { cfg.Logger = nil })
		ctx := context.Background()
		rw := watchRunning(ctx, t, c.pods)
		bound := bindAll(ctx, t, c.pods, n, func(int) string { return "n1" }, func(i int) *corev1.Pod {
			return simPod(fmt.Sprintf("p%d", i), nil, nil)
		}, 1, 10)
		waitCount(t, rw, n, 5*time.Minute)
		l := rw.latencies(bound)
		t.Logf("BENCH built-in runtime: %d pods bound at 10/s to one node: bind→Running p50 %v p99 %v max %v", len(l), pct(l, 0.5), pct(l, 0.99), l[len(l)-1])
	})
	t.Run("containerd", func(t *testing.T) {
		testutil.RequireRoot(t, "a real containerd runs as root")
		for _, b := range containerdtest.Binaries {
			testutil.RequireBinary(t, b, containerdtest.InstallHint)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		env, err := containerdtest.Start(ctx, containerdtest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { env.Close() })
		c := startCluster(t)
		rc, err := cri.New(cri.Config{Socket: env.Socket})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		a, err := New(Config{NodeName: "real", Conn: c.env.DialCert(t, "system:node:real", "system:nodes"), Runtime: rc,
			LogDir: filepath.Join(shortDir(t), "logs"), CgroupParent: env.CgroupParent, HostNetwork: true,
			RelistInterval: time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(actx) }()
		t.Cleanup(func() {
			// Delete the pods so the agent stops the containers before containerd goes.
			zero := int64(0)
			pods, _, _ := c.pods.List(context.Background(), "default", client.ListOptions{})
			for _, p := range pods {
				c.pods.Delete(context.Background(), "default", p.Metadata.Name, client.DeleteOptions{GracePeriodSeconds: &zero})
			}
			time.Sleep(5 * time.Second)
			acancel()
			<-done
		})
		const m = 30
		rw := watchRunning(ctx, t, c.pods)
		bound := bindAll(ctx, t, c.pods, m, func(int) string { return "real" }, func(i int) *corev1.Pod {
			port := testutil.FreePort(t)
			return &corev1.Pod{
				Metadata: &metav1.ObjectMeta{Name: fmt.Sprintf("h%d", i), Namespace: "default"},
				Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "hello", Image: containerdtest.HelloImage,
					Env: []*corev1.EnvVar{{Name: containerdtest.HelloAddrEnv, Value: "127.0.0.1:" + strconv.Itoa(port)}}}}},
			}
		}, 1, 2)
		waitCount(t, rw, m, 5*time.Minute)
		l := rw.latencies(bound)
		t.Logf("BENCH containerd: %d pods bound at 2/s to one node: bind→Running p50 %v p99 %v max %v", len(l), pct(l, 0.5), pct(l, 0.99), l[len(l)-1])
	})
}

// procStat reads a process's CPU time (user+system) and resident memory.
func procStat(t *testing.T, pid int) (cpu time.Duration, rssKB, hwmKB int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	cpu = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Fields(line)
		if len(fs) >= 2 && fs[0] == "VmRSS:" {
			rssKB, _ = strconv.Atoi(fs[1])
		}
		if len(fs) >= 2 && fs[0] == "VmHWM:" {
			hwmKB, _ = strconv.Atoi(fs[1])
		}
	}
	return cpu, rssKB, hwmKB
}

func TestBenchManyNodes(t *testing.T) {
	benchOnly(t)
	const nodes, perNode = 100, 30
	dir := t.TempDir()
	// Tokens for the admin and every node, for an API service we configure.
	var csv strings.Builder
	csv.WriteString("bench-admin,admin,1,\"system:masters\"\n")
	for i := 1; i <= nodes; i++ {
		fmt.Fprintf(&csv, "node-%d-token,system:node:node-%d,%d,system:nodes\n", i, i, 100+i)
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(csv.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	env := apiservertest.Start(t, apiservertest.Options{Configure: func(cfg *apiserver.Config) {
		an, err := authn.New(authn.Config{TokenFile: tokens})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Authenticator = an
	}})
	pods := client.Must[*corev1.Pod](env.Dial(t, "bench-admin"))

	// KPLANE_BENCH_BIN runs a kplane built elsewhere (an A/B against
	// another commit); KPLANE_BENCH_AGENT_ARGS adds flags to the node agent
	// (e.g. "--gc-percent 200 --profiling-listen 127.0.0.1:6061").
	bin := os.Getenv("KPLANE_BENCH_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "kplane")
		build := exec.Command("go", "build", "-o", bin, "github.com/kplane/kplane/cmd/kplane")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			t.Fatalf("build kplane: %v", err)
		}
	}
	data, err := os.MkdirTemp("", "na-bench")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(data)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logAddr := lis.Addr().String()
	lis.Close()
	ctx, cancel := context.WithCancel(context.Background())
	args := []string{"nodeagent", "--nodes", strconv.Itoa(nodes), "--server", env.Addr,
		"--insecure-plaintext", "--token-file", tokens, "--data-dir", data, "--log-listen", logAddr,
		"--pods", "110", "--log-level", "warn"}
	cmd := exec.CommandContext(ctx, bin, append(args, strings.Fields(os.Getenv("KPLANE_BENCH_AGENT_ARGS"))...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		cmd.Wait()
	}()
	pid := cmd.Process.Pid

	time.Sleep(10 * time.Second) // registration
	cpu0, rss0, _ := procStat(t, pid)
	t.Logf("BENCH %d nodes registered, no pods: cpu %v, rss %d MiB", nodes, cpu0, rss0/1024)

	rw := watchRunning(context.Background(), t, pods)
	start := time.Now()
	bound := bindAll(context.Background(), t, pods, nodes*perNode, func(i int) string { return fmt.Sprintf("node-%d", i%nodes+1) },
		func(i int) *corev1.Pod { return simPod(fmt.Sprintf("p%d", i), nil, nil) }, 8, 0)
	waitCount(t, rw, nodes*perNode, 15*time.Minute)
	ramp := time.Since(start)
	cpu1, _, _ := procStat(t, pid)
	l := rw.latencies(bound)
	t.Logf("BENCH %d pods bound as fast as possible (8 binders) over %d nodes: all Running after %v; bind→Running p50 %v p99 %v; agent cpu during ramp %v (%.0f%% of a core)",
		len(l), nodes, ramp.Round(time.Millisecond), pct(l, 0.5), pct(l, 0.99), cpu1-cpu0, 100*float64(cpu1-cpu0)/float64(ramp))

	const steady = 60 * time.Second
	time.Sleep(steady)
	cpu2, rss2, hwm := procStat(t, pid)
	t.Logf("BENCH steady state, %d nodes × %d pods: agent cpu %.1f%% of a core over %v; rss %d MiB (peak %d MiB, %d MiB before pods)",
		nodes, perNode, 100*float64(cpu2-cpu1)/float64(steady), steady, rss2/1024, hwm/1024, rss0/1024)
}

// TestBenchAPICallsPerNode counts the API calls of 20 simulated nodes in
// process (default intervals: 30s resync, 10s node status, 40s Lease) over
// a minute of steady state, with five Deployment-like groups of pods each
// mounting its group's ConfigMap and Secret (and taking the ConfigMap in
// its environment) beside a kube-api-access-like projected volume (a
// token and the shared kube-root-ca.crt), once per change-detection
// strategy:
//
//	KPLANE_NODEAGENT_BENCH=1 go test -run 'TestBenchAPICallsPerNode' -v -timeout 20m ./nodeagent/
func TestBenchAPICallsPerNode(t *testing.T) {
	benchOnly(t)
	const nodes, groups = 20, 5
	for _, strategy := range []string{StrategyCache, StrategyWatch} {
		t.Run(strategy, func(t *testing.T) {
			c := startCluster(t)
			ctx := context.Background()
			cms := client.Must[*corev1.ConfigMap](c.admin)
			secrets := client.Must[*corev1.Secret](c.admin)
			if _, err := client.Must[*corev1.ServiceAccount](c.admin).Create(ctx, &corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Name: "default", Namespace: "default"}}); err != nil {
				t.Fatal(err)
			}
			if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: "default"}, Data: map[string]string{"ca.crt": "CA"}}); err != nil {
				t.Fatal(err)
			}
			for g := range groups {
				name := fmt.Sprintf("app-%d", g)
				if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string]string{"v": name}}); err != nil {
					t.Fatal(err)
				}
				if _, err := secrets.Create(ctx, &corev1.Secret{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string][]byte{"s": []byte(name)}}); err != nil {
					t.Fatal(err)
				}
			}
			var conns []*countingConn
			for i := 1; i <= nodes; i++ {
				startSimNode(t, c, fmt.Sprintf("n%d", i), func(cfg *Config) {
					cfg.ConfigMapAndSecretChangeDetectionStrategy = strategy
					cfg.LeaseDuration, cfg.StatusInterval, cfg.RelistInterval, cfg.ResyncInterval = 0, 0, 0, 0 // the defaults
					cfg.Logger = slog.New(slog.DiscardHandler)
					cc := newCountingConn(cfg.Conn)
					conns = append(conns, cc)
					cfg.Conn = cc
				})
			}
			exp := int64(3607)
			for i := 1; i <= nodes; i++ {
				for g := range groups {
					name := fmt.Sprintf("app-%d", g)
					p := simPod(fmt.Sprintf("%s-n%d", name, i), nil, func(s *corev1.PodSpec) {
						s.ServiceAccountName = "default"
						s.Volumes = []*corev1.Volume{
							{Name: "config", VolumeSource: &corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: &corev1.LocalObjectReference{Name: name}}}},
							{Name: "secret", VolumeSource: &corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}},
							{Name: "kube-api-access", VolumeSource: &corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
								{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
								{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: &corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
							}}}},
						}
						s.Containers[0].EnvFrom = []*corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: &corev1.LocalObjectReference{Name: name}}}}
					})
					c.runPod(t, p, fmt.Sprintf("n%d", i))
				}
			}
			for i := 1; i <= nodes; i++ {
				for g := range groups {
					c.waitPod(t, "default", fmt.Sprintf("app-%d-n%d", g, i), "Running", phaseIs(PhaseRunning))
				}
			}
			time.Sleep(5 * time.Second) // the last status writes of the start
			sum := func() map[string]int {
				total := map[string]int{}
				for _, cc := range conns {
					cc.mu.Lock()
					for m, n := range cc.calls {
						total[m] += n
					}
					cc.mu.Unlock()
				}
				return total
			}
			before := sum()
			const window = time.Minute
			time.Sleep(window)
			after := sum()
			perNodeMin := func(methods ...string) float64 {
				n := 0
				for _, m := range methods {
					n += after[m] - before[m]
				}
				return float64(n) / nodes / window.Minutes()
			}
			all := 0
			for m := range after {
				all += after[m] - before[m]
			}
			t.Logf("BENCH strategy %s, %d nodes × %d pods, steady minute: per node per minute %.1f ConfigMap/Secret gets, %.1f lists, %.1f watch opens; %.1f TokenRequests; %.1f pod status writes; %.1f API calls in all",
				strategy, nodes, groups, perNodeMin("GetConfigMap", "GetSecret"), perNodeMin("ListConfigMaps", "ListSecrets"), perNodeMin("WatchConfigMaps", "WatchSecrets"),
				perNodeMin("CreateServiceAccountToken"), perNodeMin("UpdatePodStatus"), float64(all)/nodes/window.Minutes())
			for m := range after {
				if d := after[m] - before[m]; d > 0 {
					t.Logf("  %s: %d", m, d)
				}
			}
		})
	}
}
