// This file holds the node agent's tests against a real API service on the
// built-in runtime: registration and the Lease, pod phases, probes,
// back-offs, graceful deletion, logs, and an agent that restarts and adopts
// its pods.

package nodeagent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/simruntime"
	"github.com/kplane/kplane/proto/apierrors"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

// testBackoff is short so crash loops and pull back-offs show in seconds.
var testBackoff = Backoff{Base: 200 * time.Millisecond, Max: 2 * time.Second}

// cluster is an API service and an admin client for the tests.
type cluster struct {
	env   *apiservertest.Env
	admin grpc.ClientConnInterface
	pods  *client.Client[*corev1.Pod]
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	env := apiservertest.Start(t, apiservertest.Options{TLS: true})
	admin := env.Dial(t, apiservertest.AdminToken)
	return &cluster{env: env, admin: admin, pods: client.Must[*corev1.Pod](admin)}
}

// shortDir is a temp dir with a path short enough for unix sockets.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "na")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// simNode is a node agent on a built-in runtime.
type simNode struct {
	name  string
	dir   string
	agent *Agent
	rt    *simruntime.Runtime
	cri   *cri.Client
	logs  string // LogServer URL
}

// startSimNode runs a built-in runtime and an agent for node name,
// authenticated by a client certificate as system:node:<name>.
func startSimNode(t *testing.T, c *cluster, name string, mod func(*Config)) *simNode {
	t.Helper()
	n := startSimRuntime(t, name)
	n.startAgent(t, c, mod)
	return n
}

// startSimRuntime runs a built-in runtime until the test ends, called in
// process as `kplane nodeagent` calls its own (the socket path is
// nodeagent/cri's lifecycle tests').
func startSimRuntime(t *testing.T, name string) *simNode {
	t.Helper()
	dir := shortDir(t)
	rt, err := simruntime.New(simruntime.Config{Name: name, Images: []string{"kplane.test/web:1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() }) // ends the scripted containers' shells, after the client below
	cc, err := cri.New(cri.Config{Server: rt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &simNode{name: name, dir: dir, rt: rt, cri: cc}
}

// startAgent runs an agent on n's runtime until the test ends or the
// returned stop is called.
func (n *simNode) startAgent(t *testing.T, c *cluster, mod func(*Config)) (stop func()) {
	t.Helper()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		NodeName:       n.name,
		Conn:           c.env.DialCert(t, "system:node:"+n.name, "system:nodes"),
		Runtime:        n.cri,
		Capacity:       map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"},
		PodCIDR:        "10.244.1.0/24",
		LogDir:         filepath.Join(n.dir, "logs"),
		LogPort:        int32(hl.Addr().(*net.TCPAddr).Port),
		LeaseDuration:  4 * time.Second,
		StatusInterval: time.Second,
		RelistInterval: 100 * time.Millisecond,
		ResyncInterval: 2 * time.Second,
		Backoff:        testBackoff,
		Logger:         slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: NewLogServer(a)}
	go srv.Serve(hl)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			srv.Close()
			if err := <-done; err != nil {
				t.Errorf("agent Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	n.agent, n.logs = a, "http://"+hl.Addr().String()
	return stop
}

// testWriter sends logs to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// runPod creates pod in "default" and binds it to node.
func (c *cluster) runPod(t *testing.T, pod *corev1.Pod, node string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if pod.Metadata.Namespace == "" {
		pod.Metadata.Namespace = "default"
	}
	got, err := c.pods.Create(ctx, pod)
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if err := c.pods.Bind(ctx, got.Metadata.Namespace, got.Metadata.Name, node); err != nil {
		t.Fatalf("bind pod: %v", err)
	}
	return got
}

// waitPod polls the pod until ok says so (60s at most) and returns it.
func (c *cluster) waitPod(t *testing.T, ns, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last *corev1.Pod
	for time.Now().Before(deadline) {
		p, err := c.pods.Get(context.Background(), ns, name)
		if err == nil {
			last = p
			if ok(p) {
				return p
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s: %s did not happen in 60s; last status: %v", ns, name, what, last.GetStatus())
	return nil
}

func simPod(name string, env map[string]string, mod func(*corev1.PodSpec)) *corev1.Pod {
	c := &corev1.Container{Name: "main", Image: "kplane.test/web:1"}
	for k, v := range env {
		c.Env = append(c.Env, &corev1.EnvVar{Name: k, Value: v})
	}
	p := &corev1.Pod{
		Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:     &corev1.PodSpec{Containers: []*corev1.Container{c}},
	}
	if mod != nil {
		mod(p.Spec)
	}
	return p
}

func phaseIs(ph string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == ph }
}

func condTrue(p *corev1.Pod, typ string) bool {
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == typ {
			return c.GetStatus() == "True"
		}
	}
	return false
}

// TestNodeRegistration: the Node carries capacity, labels (the simulated
// runtime's), addresses, node info, the Ready condition and the log port;
// the Lease in kube-node-lease is renewed.
func TestNodeRegistration(t *testing.T) {
	c := startCluster(t)
	n := startSimNode(t, c, "n1", func(cfg *Config) {
		cfg.Labels = map[string]string{"tier": "sim"}
		cfg.Taints = []*corev1.Taint{{Key: "dedicated", Value: "sim", Effect: "NoSchedule"}}
	})
	nodes := client.Must[*corev1.Node](c.admin)
	leases := client.Must[*coordv1.Lease](c.admin)
	ctx := context.Background()
	var node *corev1.Node
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		node, err = nodes.Get(ctx, "", "n1")
		if err == nil && len(node.GetStatus().GetConditions()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not registered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"capacity cpu", node.GetStatus().GetCapacity()["cpu"], "4"},
		{"allocatable pods", node.GetStatus().GetAllocatable()["pods"], "110"},
		{"ephemeral-storage reported", node.GetStatus().GetAllocatable()["ephemeral-storage"] != "", true},
		{"simulated label", node.GetMetadata().GetLabels()[LabelSimulated], "true"},
		{"user label", node.GetMetadata().GetLabels()["tier"], "sim"},
		{"hostname label", node.GetMetadata().GetLabels()["kubernetes.io/hostname"], "n1"},
		{"taint", node.GetSpec().GetTaints()[0].GetKey(), "dedicated"},
		{"pod CIDR", node.GetSpec().GetPodCidr(), "10.244.1.0/24"},
		{"runtime", node.GetStatus().GetNodeInfo().GetContainerRuntimeVersion(), "kplane-sim://0.0.0-dev"},
		{"address", node.GetStatus().GetAddresses()[0].GetAddress(), "127.0.0.1"},
		{"log port", node.GetStatus().GetDaemonEndpoints().GetKubeletEndpoint().GetPort(), n.agent.cfg.LogPort},
		{"images", len(node.GetStatus().GetImages()) > 0, true},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	ready := false
	for _, cond := range node.GetStatus().GetConditions() {
		if cond.GetType() == "Ready" && cond.GetStatus() == "True" {
			ready = true
		}
	}
	if !ready {
		t.Errorf("node conditions: got %v, want Ready True", node.GetStatus().GetConditions())
	}
	// The Lease is renewed (every LeaseDuration/4 = 1s here).
	var first *coordv1.Lease
	for time.Now().Before(deadline) {
		l, err := leases.Get(ctx, NodeLeaseNamespace, "n1")
		if err == nil {
			if first == nil {
				first = l
			} else if l.GetSpec().GetRenewTime().AsTime().After(first.GetSpec().GetRenewTime().AsTime()) {
				if l.GetSpec().GetHolderIdentity() != "n1" {
					t.Errorf("lease holder: got %q, want n1", l.GetSpec().GetHolderIdentity())
				}
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the lease was not renewed")
}

// TestNodeStatusKeepsExtendedResources: an extended resource a client put
// in the node's capacity and allocatable (as Kubernetes' e2e tests do with
// a status patch) survives the agent's next status write, even one based
// on a Node read before the patch; removed from capacity, it leaves
// allocatable too.
func TestNodeStatusKeepsExtendedResources(t *testing.T) {
	c := startCluster(t)
	n := startSimNode(t, c, "n1", nil)
	nodes := client.Must[*corev1.Node](c.admin)
	ctx := context.Background()
	var stale *corev1.Node
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		stale, err = nodes.Get(ctx, "", "n1")
		if err == nil && len(stale.GetStatus().GetConditions()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not registered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	const fake = "example.com/fakecpu"
	patched := proto.Clone(stale).(*corev1.Node)
	patched.Status.Capacity[fake] = "1000"
	patched.Status.Allocatable[fake] = "1000"
	if _, err := nodes.UpdateStatus(ctx, patched); err != nil {
		t.Fatal(err)
	}
	got, err := n.agent.updateNodeStatus(ctx, stale, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, a := got.GetStatus().GetCapacity()[fake], got.GetStatus().GetAllocatable()[fake]; c != "1000" || a != "1000" {
		t.Errorf("after the agent's write: got capacity %q allocatable %q, want 1000 and 1000", c, a)
	}
	if got.GetStatus().GetCapacity()["cpu"] != "4" {
		t.Errorf("capacity cpu: got %q, want 4", got.GetStatus().GetCapacity()["cpu"])
	}
	removed := proto.Clone(got).(*corev1.Node)
	delete(removed.Status.Capacity, fake)
	if removed, err = nodes.UpdateStatus(ctx, removed); err != nil {
		t.Fatal(err)
	}
	got, err = n.agent.updateNodeStatus(ctx, removed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.GetStatus().GetAllocatable()[fake]; ok {
		t.Errorf("allocatable after removal from capacity: got %v, want no %s", got.GetStatus().GetAllocatable(), fake)
	}
}

// TestForeignPodConditionsKept: a condition the agent does not own (here
// DisruptionTarget, as preemption and eviction set it) survives the
// agent's status writes: it is on the pod before the pod is bound, and
// still there once the agent has written the pod Running.
func TestForeignPodConditionsKept(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	ctx := context.Background()
	created, err := c.pods.Create(ctx, simPod("marked", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	created.Status = &corev1.PodStatus{Phase: "Pending", Conditions: []*corev1.PodCondition{{Type: "DisruptionTarget", Status: "True",
		Reason: "PreemptionByScheduler", Message: "default-scheduler: preempting to accommodate a higher priority pod"}}}
	if _, err := c.pods.UpdateStatus(ctx, created); err != nil {
		t.Fatal(err)
	}
	if err := c.pods.Bind(ctx, "default", "marked", "n1"); err != nil {
		t.Fatal(err)
	}
	got := c.waitPod(t, "default", "marked", "running", phaseIs(PhaseRunning))
	var found bool
	for _, cond := range got.GetStatus().GetConditions() {
		if cond.GetType() == "DisruptionTarget" {
			found = cond.GetStatus() == "True" && cond.GetReason() == "PreemptionByScheduler"
		}
	}
	if !found {
		t.Errorf("conditions after the agent's writes: got %v, want DisruptionTarget True PreemptionByScheduler kept", got.GetStatus().GetConditions())
	}
}

// TestPodPhases: pods reach the phase their simulation rules say, with
// the container state, exit code and conditions to match.
func TestPodPhases(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	never := func(s *corev1.PodSpec) { s.RestartPolicy = RestartNever }
	tests := []struct {
		name  string
		pod   *corev1.Pod
		phase string
		check func(t *testing.T, p *corev1.Pod)
	}{
		{
			name:  "runs until stopped",
			pod:   simPod("runs", nil, nil),
			phase: PhaseRunning,
			check: func(t *testing.T, p *corev1.Pod) {
				cs := p.GetStatus().GetContainerStatuses()[0]
				if cs.GetState().GetRunning() == nil || cs.GetContainerId() == "" || cs.GetImageId() == "" {
					t.Errorf("container status: got %v, want running with IDs", cs)
				}
				if !strings.HasPrefix(p.GetStatus().GetPodIp(), "10.244.1.") {
					t.Errorf("pod IP: got %q, want one from 10.244.1.0/24", p.GetStatus().GetPodIp())
				}
				if p.GetStatus().GetHostIp() != "127.0.0.1" || p.GetStatus().GetStartTime() == nil {
					t.Errorf("hostIP %q startTime %v", p.GetStatus().GetHostIp(), p.GetStatus().GetStartTime())
				}
			},
		},
		{
			name:  "exits zero",
			pod:   simPod("zero", map[string]string{simruntime.EnvRunSeconds: "0.3"}, never),
			phase: PhaseSucceeded,
			check: func(t *testing.T, p *corev1.Pod) {
				term := p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated()
				if term.GetExitCode() != 0 || term.GetReason() != "Completed" {
					t.Errorf("terminated: got %v, want exit 0 Completed", term)
				}
			},
		},
		{
			name:  "exits non-zero",
			pod:   simPod("nonzero", map[string]string{simruntime.EnvRunSeconds: "0.3", simruntime.EnvExitCode: "3"}, never),
			phase: PhaseFailed,
			check: func(t *testing.T, p *corev1.Pod) {
				term := p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated()
				if term.GetExitCode() != 3 || term.GetReason() != "Error" {
					t.Errorf("terminated: got %v, want exit 3 Error", term)
				}
			},
		},
		{
			name:  "on failure, exits zero",
			pod:   simPod("onfailure", map[string]string{simruntime.EnvRunSeconds: "0.2"}, func(s *corev1.PodSpec) { s.RestartPolicy = RestartOnFailure }),
			phase: PhaseSucceeded,
		},
		{
			name: "init containers run first, in order",
			pod: simPod("init", nil, func(s *corev1.PodSpec) {
				for _, n := range []string{"init-a", "init-b"} {
					s.InitContainers = append(s.InitContainers, &corev1.Container{Name: n, Image: "kplane.test/web:1",
						Env: []*corev1.EnvVar{{Name: simruntime.EnvRunSeconds, Value: "0.2"}}})
				}
			}),
			phase: PhaseRunning,
			check: func(t *testing.T, p *corev1.Pod) {
				ics := p.GetStatus().GetInitContainerStatuses()
				a, b := ics[0].GetState().GetTerminated(), ics[1].GetState().GetTerminated()
				if a.GetReason() != "Completed" || b.GetReason() != "Completed" {
					t.Fatalf("init statuses: got %v", ics)
				}
				if b.GetStartedAt().AsTime().Before(a.GetFinishedAt().AsTime()) {
					t.Errorf("init-b started %v before init-a finished %v", b.GetStartedAt().AsTime(), a.GetFinishedAt().AsTime())
				}
				if !condTrue(p, "Initialized") {
					t.Errorf("Initialized: got false, want true")
				}
			},
		},
		{
			name: "failing init container with restartPolicy Never",
			pod: simPod("initfail", nil, func(s *corev1.PodSpec) {
				s.RestartPolicy = RestartNever
				s.InitContainers = []*corev1.Container{{Name: "init", Image: "kplane.test/web:1",
					Env: []*corev1.EnvVar{{Name: simruntime.EnvExitCode, Value: "1"}}}}
			}),
			phase: PhaseFailed,
			check: func(t *testing.T, p *corev1.Pod) {
				if w := p.GetStatus().GetContainerStatuses()[0].GetState().GetWaiting(); w.GetReason() != ReasonPodInitializing {
					t.Errorf("main container: got %v, want waiting PodInitializing", w)
				}
			},
		},
		{
			name:  "active deadline",
			pod:   simPod("deadline", nil, func(s *corev1.PodSpec) { s.ActiveDeadlineSeconds = proto.Int64(1) }),
			phase: PhaseFailed,
			check: func(t *testing.T, p *corev1.Pod) {
				if p.GetStatus().GetReason() != "DeadlineExceeded" {
					t.Errorf("reason: got %q, want DeadlineExceeded", p.GetStatus().GetReason())
				}
				if term := p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated(); term == nil {
					t.Errorf("container: got %v, want terminated", p.GetStatus().GetContainerStatuses()[0].GetState())
				}
			},
		},
		{
			name: "readiness probe passes after a while",
			pod: simPod("ready", map[string]string{simruntime.EnvReadyAfterSeconds: "0.5"}, func(s *corev1.PodSpec) {
				s.Containers[0].ReadinessProbe = &corev1.Probe{
					ProbeHandler:  &corev1.ProbeHandler{HttpGet: &corev1.HTTPGetAction{Path: "/healthz", Port: &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 8080}}}},
					PeriodSeconds: 1,
				}
			}),
			phase: PhaseRunning,
			check: func(t *testing.T, p *corev1.Pod) {
				p = waitReady(t, c, p, true)
				if !p.GetStatus().GetContainerStatuses()[0].GetReady() {
					t.Errorf("container ready: got false, want true")
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := c.runPod(t, tt.pod, "n1")
			got := c.waitPod(t, "default", p.Metadata.Name, "phase "+tt.phase, phaseIs(tt.phase))
			if !condTrue(got, "PodScheduled") {
				t.Errorf("PodScheduled: got false, want true")
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

func waitReady(t *testing.T, c *cluster, p *corev1.Pod, want bool) *corev1.Pod {
	t.Helper()
	return c.waitPod(t, p.Metadata.Namespace, p.Metadata.Name, fmt.Sprintf("Ready=%v", want), func(p *corev1.Pod) bool {
		return condTrue(p, "Ready") == want && condTrue(p, "ContainersReady") == want
	})
}

// TestReadinessFailing: a failing readiness probe keeps the pod Running but
// not Ready, and records Unhealthy events.
func TestReadinessFailing(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	p := c.runPod(t, simPod("unready", map[string]string{simruntime.EnvExecExitCode: "1"}, func(s *corev1.PodSpec) {
		s.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"check"}}}, PeriodSeconds: 1}
	}), "n1")
	c.waitPod(t, "default", p.Metadata.Name, "Running", phaseIs(PhaseRunning))
	waitEvent(t, c, p, "Unhealthy", "Readiness probe failed")
	got, err := c.pods.Get(context.Background(), "default", p.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	if condTrue(got, "Ready") {
		t.Errorf("Ready: got true, want false")
	}
}

// waitEvent waits for an event about p with reason and a message containing msg.
func waitEvent(t *testing.T, c *cluster, p *corev1.Pod, reason, msg string) *corev1.Event {
	t.Helper()
	events := client.Must[*corev1.Event](c.admin)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		evs, _, err := events.List(context.Background(), p.Metadata.Namespace, client.ListOptions{})
		if err == nil {
			for _, e := range evs {
				if e.GetInvolvedObject().GetUid() == p.Metadata.Uid && e.GetReason() == reason && strings.Contains(e.GetMessage(), msg) {
					return e
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no event %s %q about pod %s", reason, msg, p.Metadata.Name)
	return nil
}

// TestCrashLoopBackOff: a container that keeps failing is restarted with
// growing back-off (200ms, 400ms, 800ms... in this test), shown as
// CrashLoopBackOff with its last terminated state, and BackOff events.
func TestCrashLoopBackOff(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	p := c.runPod(t, simPod("crash", map[string]string{simruntime.EnvExitCode: "2", simruntime.EnvLog: "crashing"}, nil), "n1")
	var delays []string
	c.waitPod(t, "default", p.Metadata.Name, "restartCount 4", func(p *corev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		if len(cs) == 0 {
			return false
		}
		if w := cs[0].GetState().GetWaiting(); w.GetReason() == ReasonCrashLoopBackOff {
			d := strings.Fields(w.GetMessage())[1]
			if len(delays) == 0 || delays[len(delays)-1] != d {
				delays = append(delays, d)
			}
			if cs[0].GetLastTerminationState().GetTerminated().GetExitCode() != 2 {
				t.Errorf("lastState: got %v, want terminated with exit 2", cs[0].GetLastTerminationState())
			}
		}
		return cs[0].GetRestartCount() >= 4
	})
	got := c.waitPod(t, "default", p.Metadata.Name, "Running phase", phaseIs(PhaseRunning))
	_ = got
	// The back-off grows: every delay seen is longer than the one before.
	var prev time.Duration
	for _, s := range delays {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("back-off %q: %v", s, err)
		}
		if d <= prev {
			t.Errorf("back-off delays: got %v, want growing", delays)
		}
		prev = d
	}
	if len(delays) < 2 {
		t.Errorf("back-off delays seen: got %v, want at least 2", delays)
	}
	ev := waitEvent(t, c, p, "BackOff", "Back-off restarting failed container main")
	if ev.GetType() != client.EventWarning {
		t.Errorf("BackOff event type: got %s, want Warning", ev.GetType())
	}
	waitEvent(t, c, p, "Started", "Started container main")
}

// TestImagePullBackOff: an image that is not found is ErrImagePull (its
// Failed event says so), then ImagePullBackOff, with a BackOff event. The
// ErrImagePull status itself may never be written: as with the kubelet, a
// status write carries the latest state, and on a busy machine the
// back-off can come before the write.
func TestImagePullBackOff(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	pod := simPod("nopull", nil, nil)
	pod.Spec.Containers[0].Image = "example.com/notfound/web:1"
	p := c.runPod(t, pod, "n1")
	c.waitPod(t, "default", p.Metadata.Name, ReasonImagePullBackOff, func(p *corev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) > 0 && cs[0].GetState().GetWaiting().GetReason() == ReasonImagePullBackOff
	})
	waitEvent(t, c, p, "Failed", "Failed to pull image")
	waitEvent(t, c, p, "Failed", "Error: "+ReasonErrImagePull)
	waitEvent(t, c, p, "BackOff", "Back-off pulling image")
	ev := waitEvent(t, c, p, "Pulling", "Pulling image")
	// Pulls are retried (and the event deduplicated into a count).
	deadline := time.Now().Add(60 * time.Second)
	for ev.GetCount() < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		ev = waitEvent(t, c, p, "Pulling", "Pulling image")
	}
	if ev.GetCount() < 2 {
		t.Errorf("Pulling event count: got %d, want >= 2 (retries, deduplicated)", ev.GetCount())
	}
}

// TestSandboxFailure: a sandbox that cannot be created leaves the pod
// Pending with FailedCreatePodSandBox events.
func TestSandboxFailure(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	pod := simPod("nosandbox", nil, nil)
	pod.Metadata.Annotations = map[string]string{simruntime.AnnotationSandboxError: "no IP addresses available"}
	p := c.runPod(t, pod, "n1")
	waitEvent(t, c, p, "FailedCreatePodSandBox", "no IP addresses available")
	got, err := c.pods.Get(context.Background(), "default", p.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus().GetPhase() != PhasePending {
		t.Errorf("phase: got %q, want Pending", got.GetStatus().GetPhase())
	}
}

// TestGracefulDeletion: a container that ignores SIGTERM holds a deleted
// pod for its grace period; then the agent removes the sandbox and
// confirms the deletion, and the pod is gone.
func TestGracefulDeletion(t *testing.T) {
	c := startCluster(t)
	n := startSimNode(t, c, "n1", nil)
	p := c.runPod(t, simPod("slow", map[string]string{simruntime.EnvIgnoreSIGTERM: "true"}, func(s *corev1.PodSpec) {
		s.TerminationGracePeriodSeconds = proto.Int64(2)
	}), "n1")
	c.waitPod(t, "default", p.Metadata.Name, "Running", phaseIs(PhaseRunning))
	ctx := context.Background()
	start := time.Now()
	if err := c.pods.Delete(ctx, "default", p.Metadata.Name, client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := c.pods.Get(ctx, "default", p.Metadata.Name)
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pod not deleted in 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if el := time.Since(start); el < 2*time.Second {
		t.Errorf("deletion took %v, want at least the 2s grace period", el)
	}
	sbs, err := n.cri.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 0 {
		t.Errorf("sandboxes left: got %d, want 0", len(sbs))
	}
	waitEvent(t, c, p, "Killing", "Stopping container main")
}

// TestLogs: the log server serves a container's log, with tail, and the
// previous instance's.
func TestLogs(t *testing.T) {
	c := startCluster(t)
	n := startSimNode(t, c, "n1", nil)
	p := c.runPod(t, simPod("logs", map[string]string{simruntime.EnvLog: "one\ntwo\nthree", simruntime.EnvRunSeconds: "0.3"}, nil), "n1")
	c.waitPod(t, "default", p.Metadata.Name, "a restart", func(p *corev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) > 0 && cs[0].GetRestartCount() >= 1
	})
	get := func(query string) (int, string) {
		resp, err := http.Get(n.logs + "/containerLogs/default/logs/main" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name, query, want string
		code              int
	}{
		{"all", "", "one\ntwo\nthree\n", 200},
		{"tail", "?tailLines=1", "three\n", 200},
		{"previous", "?previous=true", "one\ntwo\nthree\n", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(tt.query)
			if code != tt.code || body != tt.want {
				t.Errorf("GET %s: got %d %q, want %d %q", tt.query, code, body, tt.code, tt.want)
			}
		})
	}
	resp, err := http.Get(n.logs + "/containerLogs/default/nosuchpod/main")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown pod: got %d, want 404", resp.StatusCode)
	}
}

// TestLivenessRestarts: a failing liveness probe kills the container
// (Killing event) and the restart policy restarts it.
func TestLivenessRestarts(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	p := c.runPod(t, simPod("unlive", map[string]string{simruntime.EnvExecExitCode: "1"}, func(s *corev1.PodSpec) {
		s.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"alive"}}}, PeriodSeconds: 1, FailureThreshold: 1}
	}), "n1")
	c.waitPod(t, "default", p.Metadata.Name, "a restart", func(p *corev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) > 0 && cs[0].GetRestartCount() >= 1
	})
	waitEvent(t, c, p, "Unhealthy", "Liveness probe failed")
	waitEvent(t, c, p, "Killing", "Container main failed liveness probe, will be restarted")
}

// TestStartupGates: until the startup probe passes, liveness and readiness
// are not run (so a liveness probe that would fail early does not kill
// the container); then the pod becomes Ready without restarts.
func TestStartupGates(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	exec := &corev1.ExecAction{Command: []string{"check"}}
	p := c.runPod(t, simPod("startup", map[string]string{simruntime.EnvReadyAfterSeconds: "1.5"}, func(s *corev1.PodSpec) {
		s.Containers[0].StartupProbe = &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{Exec: exec}, PeriodSeconds: 1, FailureThreshold: 30}
		s.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{Exec: exec}, PeriodSeconds: 1, FailureThreshold: 1}
		s.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{Exec: exec}, PeriodSeconds: 1}
	}), "n1")
	sawUnstarted := false
	got := c.waitPod(t, "default", p.Metadata.Name, "Ready", func(p *corev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		if len(cs) > 0 && cs[0].GetState().GetRunning() != nil && !cs[0].GetStarted() {
			sawUnstarted = true
		}
		return condTrue(p, "Ready")
	})
	if !sawUnstarted {
		t.Errorf("never saw the running container not yet started")
	}
	cs := got.GetStatus().GetContainerStatuses()[0]
	if cs.GetRestartCount() != 0 || !cs.GetStarted() {
		t.Errorf("container: got restartCount %d started %v, want 0 and true", cs.GetRestartCount(), cs.GetStarted())
	}
}

// TestNodesShareConnection: two nodes in one process share one connection
// to the API service, each with its own identity (bearer tokens of
// system:node:n1 and system:node:n2); each sees and runs only its pods.
func TestNodesShareConnection(t *testing.T) {
	c := startCluster(t)
	shared := c.env.Dial(t, "")
	for _, n := range []struct{ name, token string }{{"n1", apiservertest.Node1Token}, {"n2", apiservertest.Node2Token}} {
		startSimNode(t, c, n.name, func(cfg *Config) { cfg.Conn = WithToken(shared, n.token) })
	}
	p1 := c.runPod(t, simPod("on-n1", nil, nil), "n1")
	p2 := c.runPod(t, simPod("on-n2", nil, nil), "n2")
	for _, p := range []*corev1.Pod{p1, p2} {
		c.waitPod(t, "default", p.Metadata.Name, "Running", phaseIs(PhaseRunning))
	}
	// Node n1's identity may not write n2's pod status (NodeRestriction).
	pods := client.Must[*corev1.Pod](WithToken(shared, apiservertest.Node1Token))
	got, err := pods.Get(context.Background(), "default", "on-n2")
	if err != nil {
		t.Fatal(err)
	}
	got.Status.Message = "hijacked"
	if _, err := pods.UpdateStatus(context.Background(), got); !apierrors.IsForbidden(err) {
		t.Errorf("n1 writing n2's pod status: got %v, want Forbidden", err)
	}
}

// TestAgentRestartAdopts: a restarted agent takes back the sandboxes and
// containers its predecessor made (no second sandbox, no restart), and
// removes those of pods deleted while it was down, with their volume
// directories.
func TestAgentRestartAdopts(t *testing.T) {
	c := startCluster(t)
	n := startSimRuntime(t, "n1")
	root := filepath.Join(n.dir, "root")
	withRoot := func(cfg *Config) { cfg.RootDir = root }
	stop := n.startAgent(t, c, withRoot)
	scratch := func(s *corev1.PodSpec) {
		s.Volumes = []*corev1.Volume{{Name: "scratch", VolumeSource: &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	keep := c.runPod(t, simPod("keep", nil, scratch), "n1")
	gone := c.runPod(t, simPod("gone", nil, scratch), "n1")
	before := c.waitPod(t, "default", keep.Metadata.Name, "Running", phaseIs(PhaseRunning))
	c.waitPod(t, "default", gone.Metadata.Name, "Running", phaseIs(PhaseRunning))
	stop()

	// While the agent is down, "gone" is force-deleted.
	zero := int64(0)
	if err := c.pods.Delete(context.Background(), "default", "gone", client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	n.startAgent(t, c, withRoot)
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for {
		sbs, err := n.cri.ListPodSandbox(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, goneDir := os.Stat(filepath.Join(root, "pods", gone.Metadata.Uid))
		if len(sbs) == 1 && sbs[0].GetMetadata().GetName() == "keep" && os.IsNotExist(goneDir) {
			if _, err := os.Stat(filepath.Join(root, "pods", keep.Metadata.Uid, "volumes", pluginEmptyDir, "scratch")); err != nil {
				t.Errorf("the kept pod's volume: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandboxes: got %d (%v), want only keep's; gone's directory: %v", len(sbs), sbs, goneDir)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A status update from the new agent (it changes nothing, so make one:
	// the pod's readiness is recomputed from scratch and equal).
	after, err := c.pods.Get(ctx, "default", "keep")
	if err != nil {
		t.Fatal(err)
	}
	b, a := before.GetStatus().GetContainerStatuses()[0], after.GetStatus().GetContainerStatuses()[0]
	if a.GetContainerId() != b.GetContainerId() || a.GetRestartCount() != 0 || after.GetStatus().GetPodIp() != before.GetStatus().GetPodIp() {
		t.Errorf("after restart: got container %s restarts %d IP %s, want %s 0 %s",
			a.GetContainerId(), a.GetRestartCount(), after.GetStatus().GetPodIp(), b.GetContainerId(), before.GetStatus().GetPodIp())
	}
	// The adopted pod is still managed: deleting it works.
	if err := c.pods.Delete(ctx, "default", "keep", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := c.pods.Get(ctx, "default", "keep")
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("adopted pod not deleted")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runtimeCalls is a runtime that counts the agent's probes (ExecSync) and
// relists (ListContainers).
type runtimeCalls struct {
	cri.Server
	execs, lists atomic.Int64
}

func (r *runtimeCalls) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	r.execs.Add(1)
	return r.Server.ExecSync(ctx, req)
}

func (r *runtimeCalls) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	r.lists.Add(1)
	return r.Server.ListContainers(ctx, req)
}

// TestStatusWrittenOnlyOnChange: a pod that stays the same (running, ready,
// probed every second) gets no further status writes.
func TestStatusWrittenOnlyOnChange(t *testing.T) {
	c := startCluster(t)
	n := startSimRuntime(t, "n1")
	calls := &runtimeCalls{Server: n.rt}
	cc, err := cri.New(cri.Config{Server: calls})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	n.cri = cc
	n.startAgent(t, c, nil)
	p := c.runPod(t, simPod("stable", nil, func(s *corev1.PodSpec) {
		s.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"ok"}}}, PeriodSeconds: 1}
	}), "n1")
	before := waitReady(t, c, p, true)
	// Wait until the agent has probed the pod and relisted the runtime
	// three more times: each was a chance to write the status.
	probes, relists := calls.execs.Load(), calls.lists.Load()
	testutil.EventuallyWithin(t, time.Minute, "three more probes and relists", func() (bool, string) {
		e, l := calls.execs.Load()-probes, calls.lists.Load()-relists
		return e >= 3 && l >= 3, fmt.Sprintf("%d probes, %d relists", e, l)
	})
	after, err := c.pods.Get(context.Background(), "default", "stable")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := after.GetMetadata().GetResourceVersion(), before.GetMetadata().GetResourceVersion(); a != b {
		t.Errorf("resourceVersion: got %s, want %s (no writes while nothing changes); status now %v", a, b, after.GetStatus())
	}
}

// TestLogsFollow: a follower gets the log and its stream ends when the
// container exits.
func TestLogsFollow(t *testing.T) {
	c := startCluster(t)
	n := startSimNode(t, c, "n1", nil)
	p := c.runPod(t, simPod("follow", map[string]string{simruntime.EnvLog: "a\nb", simruntime.EnvRunSeconds: "1.5"},
		func(s *corev1.PodSpec) { s.RestartPolicy = RestartNever }), "n1")
	c.waitPod(t, "default", p.Metadata.Name, "Running", phaseIs(PhaseRunning))
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get(n.logs + "/containerLogs/default/follow/main?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body) // returns when the server ends the stream
	if err != nil {
		t.Fatalf("follow: %v (got %q)", err, b)
	}
	if string(b) != "a\nb\n" {
		t.Errorf("follow: got %q, want %q", b, "a\nb\n")
	}
}

// TestSandboxRecreated: a sandbox stopped behind the agent's back is
// replaced (SandboxChanged) and the container restarted in the new one.
func TestSandboxRecreated(t *testing.T) {
	c := startCluster(t)
	n := startSimNode(t, c, "n1", nil)
	p := c.runPod(t, simPod("resandbox", nil, nil), "n1")
	c.waitPod(t, "default", p.Metadata.Name, "Running", phaseIs(PhaseRunning))
	ctx := context.Background()
	sbs, err := n.cri.ListPodSandbox(ctx, nil)
	if err != nil || len(sbs) != 1 {
		t.Fatalf("sandboxes: got %v (%v), want 1", sbs, err)
	}
	if err := n.cri.StopPodSandbox(ctx, sbs[0].GetId()); err != nil {
		t.Fatal(err)
	}
	got := c.waitPod(t, "default", p.Metadata.Name, "running again after a restart", func(p *corev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) > 0 && cs[0].GetRestartCount() >= 1 && cs[0].GetState().GetRunning() != nil
	})
	waitEvent(t, c, p, "SandboxChanged", "Pod sandbox changed")
	sbs, err = n.cri.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 1 || sbs[0].GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandboxes after: got %v, want one ready", sbs)
	}
	if got.GetStatus().GetPodIp() == "" {
		t.Errorf("pod IP: got none")
	}
}

// TestRelistNoticesExit: with no resync to fall back on, a container that
// exits on its own (nothing the agent did) is noticed by the relist, and
// the pod's status says so.
func TestRelistNoticesExit(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", func(cfg *Config) { cfg.ResyncInterval = time.Hour })
	p := c.runPod(t, simPod("exits", map[string]string{simruntime.EnvRunSeconds: "0.5"},
		func(s *corev1.PodSpec) { s.RestartPolicy = RestartNever }), "n1")
	got := c.waitPod(t, "default", p.Metadata.Name, "phase "+PhaseSucceeded, phaseIs(PhaseSucceeded))
	if term := got.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated(); term.GetReason() != "Completed" {
		t.Errorf("container: got %v, want terminated Completed", got.GetStatus().GetContainerStatuses()[0].GetState())
	}
}
