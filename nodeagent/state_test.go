// This file holds the tests of back-off delays, the pod state machine over
// CRI outcomes, probe thresholds and actions, and image pull policies.

package nodeagent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func TestBackoffDelay(t *testing.T) {
	tests := []struct {
		name string
		b    Backoff
		n    int
		want time.Duration
	}{
		{"first", DefaultBackoff, 0, 10 * time.Second},
		{"second", DefaultBackoff, 1, 20 * time.Second},
		{"fifth", DefaultBackoff, 4, 160 * time.Second},
		{"capped", DefaultBackoff, 5, 5 * time.Minute},
		{"far past the cap", DefaultBackoff, 100, 5 * time.Minute},
		{"negative is the first", DefaultBackoff, -1, 10 * time.Second},
		{"short", Backoff{Base: 200 * time.Millisecond, Max: time.Second}, 2, 800 * time.Millisecond},
		{"short capped", Backoff{Base: 200 * time.Millisecond, Max: time.Second}, 3, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.Delay(tt.n); got != tt.want {
				t.Errorf("Delay(%d): got %v, want %v", tt.n, got, tt.want)
			}
		})
	}
}

// cri statuses for the state machine tests.
var t0 = time.Unix(1_700_000_000, 0)

func running(id string) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{Id: id, State: runtimeapi.ContainerState_CONTAINER_RUNNING, StartedAt: t0.UnixNano()}
}

func exited(id string, code int32) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{Id: id, State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: code,
		StartedAt: t0.UnixNano(), FinishedAt: t0.Add(time.Second).UnixNano()}
}

func created(id string) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{Id: id, State: runtimeapi.ContainerState_CONTAINER_CREATED}
}

// TestStateMachine drives the pod state machine (observe → computePlan →
// podPhase → container status) over CRI outcomes.
func TestStateMachine(t *testing.T) {
	b := Backoff{Base: 10 * time.Second, Max: 5 * time.Minute}
	type obs struct {
		ctr string
		st  *runtimeapi.ContainerStatus // nil: no instance
	}
	tests := []struct {
		name      string
		policy    string
		inits     []string
		ctrs      []string
		observed  []obs
		restarts  int32         // prior restarts of "main"
		now       time.Duration // after t0
		wantStart []string
		wantWait  time.Duration
		wantPhase string
		wantState string // of "main": running, waiting:<reason>, terminated:<reason>
	}{
		{name: "nothing yet: start the container", ctrs: []string{"main"},
			wantStart: []string{"main"}, wantPhase: PhasePending, wantState: "waiting:ContainerCreating"},
		{name: "running", ctrs: []string{"main"}, observed: []obs{{"main", running("c1")}},
			wantPhase: PhaseRunning, wantState: "running"},
		{name: "created, not started yet", ctrs: []string{"main"}, observed: []obs{{"main", created("c1")}},
			wantPhase: PhasePending, wantState: "waiting:ContainerCreating"},
		{name: "exit 0, Always: restart after the back-off", ctrs: []string{"main"}, observed: []obs{{"main", exited("c1", 0)}},
			now: 2 * time.Second, wantWait: 9 * time.Second, wantPhase: PhaseRunning, wantState: "waiting:CrashLoopBackOff"},
		{name: "exit 1, Always: back-off over, restart", ctrs: []string{"main"}, observed: []obs{{"main", exited("c1", 1)}},
			now: 12 * time.Second, wantStart: []string{"main"}, wantPhase: PhaseRunning, wantState: "waiting:CrashLoopBackOff"},
		{name: "back-off doubles with restarts", ctrs: []string{"main"}, observed: []obs{{"main", exited("c1", 1)}}, restarts: 2,
			now: 12 * time.Second, wantWait: 29 * time.Second, wantPhase: PhaseRunning, wantState: "waiting:CrashLoopBackOff"},
		{name: "exit 0, Never: Succeeded", policy: RestartNever, ctrs: []string{"main"}, observed: []obs{{"main", exited("c1", 0)}},
			wantPhase: PhaseSucceeded, wantState: "terminated:Completed"},
		{name: "exit 2, Never: Failed", policy: RestartNever, ctrs: []string{"main"}, observed: []obs{{"main", exited("c1", 2)}},
			wantPhase: PhaseFailed, wantState: "terminated:Error"},
		{name: "exit 0, OnFailure: Succeeded", policy: RestartOnFailure, ctrs: []string{"main"}, observed: []obs{{"main", exited("c1", 0)}},
			wantPhase: PhaseSucceeded, wantState: "terminated:Completed"},
		{name: "exit 1, OnFailure: restarting", policy: RestartOnFailure, ctrs: []string{"main"}, observed: []obs{{"main", exited("c1", 1)}},
			now: 2 * time.Second, wantWait: 9 * time.Second, wantPhase: PhaseRunning, wantState: "waiting:CrashLoopBackOff"},
		{name: "one of two still running, Never", policy: RestartNever, ctrs: []string{"main", "side"},
			observed: []obs{{"main", exited("c1", 1)}, {"side", running("c2")}}, wantPhase: PhaseRunning, wantState: "terminated:Error"},
		{name: "init containers first", inits: []string{"i1", "i2"}, ctrs: []string{"main"},
			wantStart: []string{"i1"}, wantPhase: PhasePending, wantState: "waiting:PodInitializing"},
		{name: "second init after the first completed", inits: []string{"i1", "i2"}, ctrs: []string{"main"},
			observed: []obs{{"i1", exited("c1", 0)}}, wantStart: []string{"i2"}, wantPhase: PhasePending, wantState: "waiting:PodInitializing"},
		{name: "init running: wait for it", inits: []string{"i1"}, ctrs: []string{"main"},
			observed: []obs{{"i1", running("c1")}}, wantPhase: PhasePending, wantState: "waiting:PodInitializing"},
		{name: "inits done: start the containers", inits: []string{"i1"}, ctrs: []string{"main", "side"},
			observed: []obs{{"i1", exited("c1", 0)}}, wantStart: []string{"main", "side"}, wantPhase: PhasePending, wantState: "waiting:ContainerCreating"},
		{name: "init failed, Never: Failed", policy: RestartNever, inits: []string{"i1"}, ctrs: []string{"main"},
			observed: []obs{{"i1", exited("c1", 1)}}, wantPhase: PhaseFailed, wantState: "waiting:PodInitializing"},
		{name: "init failed, Always: back-off", inits: []string{"i1"}, ctrs: []string{"main"},
			observed: []obs{{"i1", exited("c1", 1)}}, now: 2 * time.Second, wantWait: 9 * time.Second, wantPhase: PhasePending, wantState: "waiting:PodInitializing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &corev1.PodSpec{RestartPolicy: tt.policy}
			ctrs := map[string]*ctrState{}
			for _, n := range tt.inits {
				spec.InitContainers = append(spec.InitContainers, &corev1.Container{Name: n})
				ctrs[n] = &ctrState{name: n, init: true}
			}
			for _, n := range tt.ctrs {
				spec.Containers = append(spec.Containers, &corev1.Container{Name: n})
				ctrs[n] = &ctrState{name: n}
			}
			ctrs["main"].restarts = tt.restarts
			policy := tt.policy
			if policy == "" {
				policy = RestartAlways
			}
			for _, o := range tt.observed {
				c := ctrs[o.ctr]
				c.id = o.st.GetId()
				p := policy
				if c.init && p == RestartAlways {
					p = RestartOnFailure
				}
				c.observe(o.st, p, b)
			}
			p := computePlan(spec, ctrs, t0.Add(tt.now))
			var started []string
			for _, c := range p.start {
				started = append(started, c.name)
			}
			if fmt.Sprint(started) != fmt.Sprint(tt.wantStart) {
				t.Errorf("start: got %v, want %v", started, tt.wantStart)
			}
			if p.wait != tt.wantWait {
				t.Errorf("wait: got %v, want %v", p.wait, tt.wantWait)
			}
			if got := podPhase(spec, ctrs, p); got != tt.wantPhase {
				t.Errorf("phase: got %s, want %s", got, tt.wantPhase)
			}
			cs := containerStatus(spec.Containers[0], ctrs["main"], "sim", p.initialized)
			var got string
			switch s := cs.GetState(); {
			case s.GetRunning() != nil:
				got = "running"
			case s.GetWaiting() != nil:
				got = "waiting:" + s.GetWaiting().GetReason()
			case s.GetTerminated() != nil:
				got = "terminated:" + s.GetTerminated().GetReason()
			}
			if got != tt.wantState {
				t.Errorf("main state: got %s, want %s", got, tt.wantState)
			}
		})
	}
}

// TestProbeThresholds: results flip only after successThreshold successes
// or failureThreshold failures in a row.
func TestProbeThresholds(t *testing.T) {
	tests := []struct {
		name             string
		success, failure int32
		results          []bool
		want, wantHas    bool
	}{
		{"no results", 1, 3, nil, false, false},
		{"one success", 1, 3, []bool{true}, true, true},
		{"two failures are not enough", 1, 3, []bool{true, false, false}, true, true},
		{"three failures", 1, 3, []bool{true, false, false, false}, false, true},
		{"failures interrupted", 1, 3, []bool{true, false, false, true, false, false}, true, true},
		{"success threshold 2", 2, 1, []bool{false, true}, false, true},
		{"success threshold 2 met", 2, 1, []bool{false, true, true}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st probeState
			for _, r := range tt.results {
				st.record(r, tt.success, tt.failure)
			}
			if st.result != tt.want || st.hasResults != tt.wantHas {
				t.Errorf("got result %v (has %v), want %v (has %v)", st.result, st.hasResults, tt.want, tt.wantHas)
			}
		})
	}
}

// execProber answers exec probes with a fixed exit code and records them.
type execProber struct {
	ok   bool
	cmds [][]string
}

func (e *execProber) exec(_ context.Context, _ string, cmd []string, _ time.Duration) (bool, string, error) {
	e.cmds = append(e.cmds, cmd)
	return e.ok, "exit 1", nil
}

// TestRunProbe: exec goes to the runtime; httpGet and tcpSocket go over the
// network, or — simulated — to the runtime as an exec.
func TestRunProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	host, portS, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portS)
	ios := func(p int) *metav1.IntOrString {
		return &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: int32(p)}}
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	tests := []struct {
		name      string
		probe     *corev1.Probe
		simulated bool
		execOK    bool
		want      bool
		wantExecs int
	}{
		{"exec passes", &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}, false, true, true, 1},
		{"exec fails", &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"false"}}}}, false, false, false, 1},
		{"http 200", &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{HttpGet: &corev1.HTTPGetAction{Path: "/", Port: ios(port)}}}, false, false, true, 0},
		{"http 503", &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{HttpGet: &corev1.HTTPGetAction{Path: "/bad", Port: ios(port)}}}, false, true, false, 0},
		{"http refused", &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{HttpGet: &corev1.HTTPGetAction{Path: "/", Port: ios(closedPort)}}}, false, true, false, 0},
		{"tcp open", &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{TcpSocket: &corev1.TCPSocketAction{Port: ios(port)}}}, false, false, true, 0},
		{"tcp refused", &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{TcpSocket: &corev1.TCPSocketAction{Port: ios(closedPort)}}}, false, true, false, 0},
		{"simulated http is an exec", &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{HttpGet: &corev1.HTTPGetAction{Path: "/bad", Port: ios(port)}}}, true, true, true, 1},
		{"simulated tcp is an exec", &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{TcpSocket: &corev1.TCPSocketAction{Port: ios(port)}}}, true, false, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pr := &execProber{ok: tt.execOK}
			got, _, err := runProbe(context.Background(), pr, tt.simulated, nil, "c1", host, tt.probe, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || len(pr.cmds) != tt.wantExecs {
				t.Errorf("got %v with %d execs, want %v with %d", got, len(pr.cmds), tt.want, tt.wantExecs)
			}
		})
	}
}

func TestPullPolicy(t *testing.T) {
	tests := []struct{ name, image, policy, want string }{
		{"tagged", "nginx:1.25", "", "IfNotPresent"},
		{"latest", "nginx:latest", "", "Always"},
		{"untagged", "example.com:5000/nginx", "", "Always"},
		{"digest", "nginx@sha256:abc", "", "IfNotPresent"},
		{"explicit", "nginx:1.25", "Never", "Never"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pullPolicy(&corev1.Container{Image: tt.image, ImagePullPolicy: tt.policy}); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
