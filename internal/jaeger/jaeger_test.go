// A real Jaeger behind the whole control plane as separate processes (what
// `kplane up` starts), and `kplane trace` reading it back.

package jaeger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/jaeger"
	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/internal/testutil"
)

// requireJaeger returns the jaeger binary, or skips (fails under CI).
func requireJaeger(t *testing.T) string {
	t.Helper()
	bin, err := jaeger.Binary()
	if err == nil {
		return bin
	}
	if testutil.InCI() {
		t.Fatalf("Jaeger is required under CI (scripts/install-deps.sh builds it): %v", err)
	}
	t.Skipf("%v", err)
	return ""
}

// TestDeploymentTraceInJaeger applies a Deployment to a control plane whose
// every process exports to a real Jaeger, finds the pod's trace in Jaeger's
// query API with spans from every service, and prints it with kplane trace.
func TestDeploymentTraceInJaeger(t *testing.T) {
	testutil.SkipShort(t, "builds and runs the kplane binary")
	kubectl := testutil.RequireBinary(t, "kubectl", "kubectl (the Google Cloud SDK component, or a release binary)")
	jbin := requireJaeger(t)
	dir := t.TempDir()
	kplane := filepath.Join(dir, "kplane")
	if out, err := exec.Command("go", "build", "-o", kplane, "github.com/kplane/kplane/cmd/kplane").CombinedOutput(); err != nil {
		t.Fatalf("build kplane: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	j, err := jaeger.Start(ctx, jaeger.Config{Binary: jbin, Dir: filepath.Join(dir, "jaeger")})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Stop()
	// The control plane's processes inherit the test's environment.
	for _, kv := range j.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "200") // export within 200 ms

	data := filepath.Join(dir, "up")
	cp, err := localcluster.Up(ctx, localcluster.UpConfig{Binary: kplane, DataDir: data,
		StoreMembers: 3, APIServers: 1, Schedulers: 1, ControllerManagers: 1, Nodes: 2,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	defer cp.Stop()
	kc := filepath.Join(data, "kubeconfig")
	run := func(stdin string, args ...string) string {
		t.Helper()
		c := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kc}, args...)...)
		c.Env = append(os.Environ(), "HOME="+dir)
		c.Stdin = strings.NewReader(stdin)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(`apiVersion: apps/v1
kind: Deployment
metadata: {name: traced}
spec:
  replicas: 1
  selector: {matchLabels: {app: traced}}
  template:
    metadata: {labels: {app: traced}}
    spec:
      containers: [{name: web, image: kplane.test/web:1}]
`, "apply", "-f", "-")

	// The pod, once Running.
	var pod struct {
		Metadata struct {
			Name        string            `json:"name"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Status struct {
			Phase string `json:"phase"`
		} `json:"status"`
	}
	for deadline := time.Now().Add(90 * time.Second); ; {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		out := run("", "get", "pods", "-l", "app=traced", "-o", "json")
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("kubectl get pods: %v\n%s", err, out)
		}
		if len(list.Items) == 1 {
			if err := json.Unmarshal(list.Items[0], &pod); err != nil {
				t.Fatal(err)
			}
			if pod.Status.Phase == "Running" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Running pod within 90s:\n%s", out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	sc := telemetry.ObjectSpanContext(pod.Metadata.Annotations)
	if !sc.IsValid() {
		t.Fatalf("pod %s has no %s annotation: %v", pod.Metadata.Name, telemetry.Annotation, pod.Metadata.Annotations)
	}

	// Jaeger's query API: the trace, with spans from every service and
	// every hop the waterfall below is checked for. Each process exports
	// on its own schedule, and some hops end after the pod is Running (the
	// node agent's syncPod after the status it writes; the scheduler's
	// bind after the Scheduled event it records), so a trace read as soon
	// as every service shows up can still lack them.
	want := []string{"gateway", "apiserver", "store", "scheduler", "controllers", "nodeagent"}
	wantHops := []string{"HTTP POST", "deployment.reconcile", "replicaset.reconcile", "schedule", "bind", "nodeagent.syncPod", "status.update"}
	var tr *jaeger.Trace
	for deadline := time.Now().Add(30 * time.Second); ; {
		tr, err = jaeger.GetTrace(ctx, nil, j.QueryURL, sc.TraceID().String())
		if err != nil && !errors.Is(err, jaeger.ErrNotFound) {
			t.Fatal(err)
		}
		var missing []string
		for _, svc := range want {
			if tr == nil || !slices.ContainsFunc(tr.Spans, func(s jaeger.Span) bool { return s.Service == svc }) {
				missing = append(missing, svc)
			}
		}
		for _, hop := range wantHops {
			if tr == nil || !slices.ContainsFunc(tr.Spans, func(s jaeger.Span) bool { return s.Name == hop }) {
				missing = append(missing, hop)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s in Jaeger after 30s lacks spans of (services or hops) %v (log %s)", sc.TraceID(), missing, j.LogPath)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if tr.ID != sc.TraceID().String() {
		t.Errorf("got trace %s, want %s", tr.ID, sc.TraceID())
	}

	// kplane trace: the waterfall lists the hops in causal order, and every
	// hop lies within the trace's extent.
	var out, errb bytes.Buffer
	c := exec.CommandContext(ctx, kplane, "trace", "pod/"+pod.Metadata.Name, "--kubeconfig", kc, "--jaeger-url", j.QueryURL)
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		t.Fatalf("kplane trace: %v\n%s", err, errb.String())
	}
	t.Logf("kplane trace pod/%s:\n%s", pod.Metadata.Name, out.String())
	checkWaterfall(t, out.String(), wantHops)
}

var (
	headerRE = regexp.MustCompile(`^trace ([0-9a-f]{32}): (\d+) spans from (\d+) services over (\S+)$`)
	rowRE    = regexp.MustCompile(`^\s*(\S+)\s+(\S+)\s+(\S+)\s+[ =]{40} (\s*)(.+?)(   <== slowest.*)?$`)
)

// checkWaterfall parses kplane trace's output: the first line of each hop
// in hops must come in that order, every row's start + duration must lie
// within the trace's extent, and exactly one row is marked slowest.
func checkWaterfall(t *testing.T, out string, hops []string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	m := headerRE.FindStringSubmatch(lines[0])
	if m == nil {
		t.Fatalf("first line %q is not the trace header", lines[0])
	}
	total, err := parseDur(m[4])
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]int{}
	slowest := 0
	rows := 0
	for i, l := range lines[3:] {
		r := rowRE.FindStringSubmatch(l)
		if r == nil {
			t.Fatalf("row %q does not parse", l)
		}
		rows++
		start, err1 := parseDur(r[1])
		d, err2 := parseDur(r[2])
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		// Rounded to the microsecond in print.
		if start+d > total+2*time.Microsecond {
			t.Errorf("row %q ends at %v, after the trace's extent %v", l, start+d, total)
		}
		if _, ok := first[r[5]]; !ok {
			first[r[5]] = i
		}
		if r[6] != "" {
			slowest++
		}
	}
	if got := fmt.Sprint(rows); got != m[2] {
		t.Errorf("got %d rows, header says %s spans", rows, m[2])
	}
	if slowest != 1 {
		t.Errorf("got %d rows marked slowest, want 1", slowest)
	}
	prev := -1
	for _, h := range hops {
		i, ok := first[h]
		if !ok {
			t.Errorf("no %s row in the waterfall", h)
			continue
		}
		if i < prev {
			t.Errorf("%s comes before the hop listed before it", h)
		}
		prev = i
	}
}

func parseDur(s string) (time.Duration, error) {
	if v, ok := strings.CutSuffix(s, "ms"); ok {
		return time.ParseDuration(v + "ms")
	}
	return time.ParseDuration(s)
}
