// One kubectl apply, one trace: the whole control plane in this process —
// a store member, the API service, the gateway (with the real kubectl in
// front), the scheduler, the controllers and a node agent on the built-in
// runtime — each with its own tracer provider (its own service.name) and all
// of them recording into one in-memory span recorder.

package telemetry_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/nodeagent"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/simruntime"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/raftstore"
	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
	"github.com/kplane/kplane/services/scheduler"
)

const tokens = `admin-token,admin,1,"system:masters"
scheduler-token,system:kube-scheduler,2
controllers-token,system:kube-controller-manager,3
n1-token,system:node:n1,4,system:nodes
n2-token,system:node:n2,5,system:nodes
`

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// plane is the in-process control plane.
type plane struct {
	rec        *tracetest.SpanRecorder
	tels       map[string]*telemetry.Telemetry
	admin      *grpc.ClientConn // untraced
	kubeconfig string
	dir        string
}

func startPlane(t *testing.T) *plane {
	t.Helper()
	dir := t.TempDir()
	// Every request traced, as `kplane up --jaeger` has it (the default
	// samples a tenth of new traces).
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "1")
	rec := tracetest.NewSpanRecorder()
	tels := map[string]*telemetry.Telemetry{}
	ctx, cancel := context.WithCancel(context.Background())
	var stops []func()
	t.Cleanup(func() {
		cancel()
		slices.Reverse(stops)
		for _, s := range stops {
			s()
		}
	})
	run := func(name string, f func(context.Context) error) {
		done := make(chan error, 1)
		go func() { done <- f(ctx) }()
		stops = append(stops, func() {
			select {
			case err := <-done:
				if err != nil && ctx.Err() == nil {
					t.Errorf("%s: %v", name, err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("%s did not stop", name)
			}
		})
	}
	tel := func(service string, followOnly bool) *telemetry.Telemetry {
		tl, err := telemetry.New(ctx, telemetry.Config{Service: service, Instance: service + "-0", FollowOnly: followOnly, SpanProcessor: rec})
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, func() { _ = tl.Close(context.Background()) })
		tels[service] = tl
		return tl
	}
	log := slog.New(slog.DiscardHandler)

	// Store: one member.
	st := tel("store", true)
	if err := st.BridgeRaftMetrics(); err != nil {
		t.Fatal(err)
	}
	ports := testutil.FreePorts(t, 2)
	cport, pport := ports[0], ports[1]
	curl, purl := "http://127.0.0.1:"+strconv.Itoa(cport), "http://127.0.0.1:"+strconv.Itoa(pport)
	store, err := raftstore.New(raftstore.Config{Name: "s0", DataDir: filepath.Join(dir, "s0"),
		ListenClientURLs: []string{curl}, ListenPeerURL: purl, InitialCluster: "s0=" + purl,
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond,
		Logger: log, TracerProvider: st.TracerProvider(), MeterProvider: st.MeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	run("store", store.Run)

	// API service.
	as := tel("apiserver", false)
	tokFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokFile, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	// The standard API service without the ServiceAccount and
	// DefaultTolerationSeconds plugins: the spans below are the webhook
	// and RBAC path's.
	api, err := apiserver.NewStandard(context.Background(), apiserver.Options{
		Config: apiserver.Config{StoreEndpoints: []string{curl}, Listen: "127.0.0.1:0", Logger: log,
			SecurePort: apiserver.DefaultSecurePort, RequestTimeout: apiserver.DefaultRequestTimeout,
			TracerProvider: as.TracerProvider(), MeterProvider: as.MeterProvider()},
		InsecurePlaintext: true, TokenAuthFile: tokFile,
		DisabledAdmission: []string{"ServiceAccount", "DefaultTolerationSeconds"},
	})
	if err != nil {
		t.Fatal(err)
	}
	run("apiserver", api.Run)
	select {
	case <-api.Ready():
	case <-time.After(60 * time.Second):
		t.Fatal("API service not ready")
	}
	dial := func(tl *telemetry.Telemetry, token string) *grpc.ClientConn {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if tl != nil {
			opts = append(opts, tl.DialOption())
		}
		if token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
		}
		c, err := grpc.NewClient(api.Addr(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, func() { c.Close() })
		return c
	}

	// Gateway, forwarding kubectl's bearer token.
	gt := tel("gateway", false)
	gw, err := gateway.New(gateway.Config{Conn: dial(gt, ""), Logger: log, TracerProvider: gt.TracerProvider(), MeterProvider: gt.MeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(gw)
	stops = append(stops, srv.Close)

	// Scheduler and controllers.
	sc := tel("scheduler", true)
	sched, err := scheduler.New(scheduler.Config{Conn: dial(sc, "scheduler-token"), Logger: log,
		TracerProvider: sc.TracerProvider(), MeterProvider: sc.MeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	run("scheduler", sched.Run)
	ct := tel("controllers", true)
	mgr, err := controllers.New(controllers.Config{Conn: dial(ct, "controllers-token"), Logger: log,
		Controllers: []string{controllers.Deployment, controllers.ReplicaSet, controllers.GarbageCollector,
			controllers.Endpoints, controllers.Namespace, controllers.NodeLifecycle},
		TracerProvider: ct.TracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	run("controllers", mgr.Run)

	// Two node agents on the built-in runtime (with one node the scheduler
	// has nothing to score).
	na := tel("nodeagent", true)
	sockDir, err := os.MkdirTemp("", "kplane-trace-") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	stops = append(stops, func() { os.RemoveAll(sockDir) })
	for i, node := range []string{"n1", "n2"} {
		rt, err := simruntime.New(simruntime.Config{Name: node})
		if err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(sockDir, node+".sock")
		lis, err := simruntime.Listen(sock)
		if err != nil {
			t.Fatal(err)
		}
		run("runtime "+node, func(ctx context.Context) error { return rt.ServeListener(ctx, lis) })
		rc, err := cri.New(cri.Config{Socket: sock, TracerProvider: na.TracerProvider(), MeterProvider: na.MeterProvider()})
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, func() { rc.Close() })
		agent, err := nodeagent.New(nodeagent.Config{NodeName: node, Conn: dial(na, node+"-token"), Runtime: rc,
			Capacity: map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"}, PodCIDR: fmt.Sprintf("10.244.%d.0/24", i+1),
			LogDir: filepath.Join(dir, node), RootDir: filepath.Join(dir, node+"-root"), Logger: log, TracerProvider: na.TracerProvider()})
		if err != nil {
			t.Fatal(err)
		}
		run("nodeagent "+node, agent.Run)
	}

	kc := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kplane
  cluster: {server: %s, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: admin-token}
contexts:
- name: kplane
  context: {cluster: kplane, user: admin, namespace: default}
current-context: kplane
`, srv.URL)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return &plane{rec: rec, tels: tels, admin: dial(nil, "admin-token"), kubeconfig: kc, dir: dir}
}

func (p *plane) kubectl(t *testing.T, bin string, stdin string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+p.kubeconfig, "KUBECACHEDIR="+filepath.Join(p.dir, "cache"), "HOME="+p.dir)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// runningPod waits until a pod matching ok is Running and returns it.
func (p *plane) runningPod(t *testing.T, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	pods := client.Must[*corev1.Pod](p.admin)
	deadline := time.Now().Add(60 * time.Second)
	for {
		list, _, err := pods.List(context.Background(), "default", client.ListOptions{})
		if err == nil {
			for _, pod := range list {
				if ok(pod) && pod.GetStatus().GetPhase() == "Running" {
					return pod
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Running pod after 60s (last error %v, pods %v)", err, list)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// traceOf waits until the trace recorded on obj's annotations holds a span
// of every name in want (each from its service) and every span's parent is
// in the trace, then returns its spans.
func (p *plane) traceOf(t *testing.T, annotations map[string]string, want map[string]string) []sdktrace.ReadOnlySpan {
	t.Helper()
	sc := telemetry.ObjectSpanContext(annotations)
	if !sc.IsValid() {
		t.Fatalf("object has no %s annotation: %v", telemetry.Annotation, annotations)
	}
	return p.traceByID(t, sc.TraceID(), want)
}

// reconcileSpan waits for a span named name with attribute k8s.object
// object and returns it.
func (p *plane) reconcileSpan(t *testing.T, name, object string) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range p.rec.Ended() {
			if s.Name() == name && slices.Contains(s.Attributes(), attribute.String("k8s.object", object)) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s span for %s after 30s", name, object)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// traceByID is traceOf for the trace id.
func (p *plane) traceByID(t *testing.T, id trace.TraceID, want map[string]string) []sdktrace.ReadOnlySpan {
	t.Helper()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: id})
	deadline := time.Now().Add(30 * time.Second)
	for {
		var spans []sdktrace.ReadOnlySpan
		ids := map[trace.SpanID]bool{}
		for _, s := range p.rec.Ended() {
			if s.SpanContext().TraceID() == sc.TraceID() {
				spans = append(spans, s)
				ids[s.SpanContext().SpanID()] = true
			}
		}
		var missing []string
		for name, svc := range want {
			if !slices.ContainsFunc(spans, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == name && service(s) == svc }) {
				missing = append(missing, svc+"/"+name)
			}
		}
		roots := 0
		for _, s := range spans {
			if !s.Parent().IsValid() {
				roots++
			} else if !ids[s.Parent().SpanID()] {
				missing = append(missing, "parent of "+s.Name())
			}
		}
		if len(missing) == 0 && roots == 1 {
			slices.SortFunc(spans, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s after 30s: %d spans, %d roots, missing %v\n%s", sc.TraceID(), len(spans), roots, missing, dump(spans))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func service(s sdktrace.ReadOnlySpan) string {
	for _, kv := range s.Resource().Attributes() {
		if kv.Key == "service.name" {
			return kv.Value.AsString()
		}
	}
	return ""
}

func dump(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %-12s %s\n", s.StartTime().Format("15:04:05.000000"), service(s), s.Name())
	}
	return b.String()
}

// firstStart is the start of the first span named name from service svc.
func firstStart(t *testing.T, spans []sdktrace.ReadOnlySpan, svc, name string) time.Time {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name && service(s) == svc {
			return s.StartTime()
		}
	}
	t.Fatalf("no %s span from %s", name, svc)
	return time.Time{}
}

// ancestors reports whether span s descends from a span satisfying root.
func descends(spans []sdktrace.ReadOnlySpan, s sdktrace.ReadOnlySpan, root func(sdktrace.ReadOnlySpan) bool) bool {
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, x := range spans {
		byID[x.SpanContext().SpanID()] = x
	}
	for cur, ok := s, true; ok; cur, ok = byID[cur.Parent().SpanID()] {
		if root(cur) {
			return true
		}
	}
	return false
}

// hop is one hop of docs/design.md's "One pod, hop by hop", as a span.
type hop struct{ service, name string }

var podHops = []hop{
	{"gateway", "HTTP POST"},                                   // 01
	{"apiserver", "authn"},                                     // 02
	{"apiserver", "authz"},                                     // 02
	{"apiserver", "admission.mutate"},                          // 02
	{"apiserver", "validate"},                                  // 02
	{"apiserver", "admission.validate"},                        // 02
	{"apiserver", "store.Txn"},                                 // 03
	{"store", "raft.apply"},                                    // 04
	{"apiserver", "watch.deliver"},                             // 06
	{"scheduler", "queue.wait"},                                // 07
	{"scheduler", "schedule"},                                  // 07
	{"scheduler", "filter"},                                    // 07
	{"scheduler", "score"},                                     // 07
	{"scheduler", "bind"},                                      // 08
	{"nodeagent", "nodeagent.syncPod"},                         // 09-10
	{"nodeagent", "runtime.v1.RuntimeService/RunPodSandbox"},   // 10
	{"nodeagent", "runtime.v1.ImageService/PullImage"},         // 10
	{"nodeagent", "runtime.v1.RuntimeService/CreateContainer"}, // 10
	{"nodeagent", "runtime.v1.RuntimeService/StartContainer"},  // 10
	{"nodeagent", "status.update"},                             // 11
}

func wantOf(hops []hop) map[string]string {
	m := map[string]string{}
	for _, h := range hops {
		m[h.name] = h.service
	}
	return m
}

// checkOrder asserts each hop's first span starts no earlier than the
// previous hop's.
func checkOrder(t *testing.T, spans []sdktrace.ReadOnlySpan, hops []hop) {
	t.Helper()
	var prev time.Time
	for i, h := range hops {
		at := firstStart(t, spans, h.service, h.name)
		if i > 0 && at.Before(prev) {
			t.Errorf("%s/%s starts %v before %s/%s\n%s", h.service, h.name, prev.Sub(at), hops[i-1].service, hops[i-1].name, dump(spans))
		}
		prev = at
	}
}

// scrape returns what a component's /metrics handler serves.
func (p *plane) scrape(t *testing.T, service string) string {
	t.Helper()
	srv := httptest.NewServer(p.tels[service].Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestOneTracePerPod(t *testing.T) {
	bin := testutil.RequireBinary(t, "kubectl", "kubectl (the Google Cloud SDK component, or a release binary)")
	p := startPlane(t)

	t.Run("pod", func(t *testing.T) {
		p.kubectl(t, bin, `apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers: [{name: web, image: kplane.test/web:1}]
`, "apply", "-f", "-")
		pod := p.runningPod(t, func(pod *corev1.Pod) bool { return pod.GetMetadata().GetName() == "web" })
		spans := p.traceOf(t, pod.GetMetadata().GetAnnotations(), wantOf(podHops))
		t.Logf("the pod's trace:\n%s", dump(spans))
		if root := spans[0]; root.Name() != "HTTP POST" || service(root) != "gateway" {
			t.Errorf("trace root: got %s/%s, want gateway/HTTP POST", service(root), root.Name())
		}
		checkOrder(t, spans, podHops)
	})

	t.Run("deployment", func(t *testing.T) {
		p.kubectl(t, bin, `apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: kplane.test/api:1}]
`, "apply", "-f", "-")
		pod := p.runningPod(t, func(pod *corev1.Pod) bool { return pod.GetMetadata().GetLabels()["app"] == "api" })
		hops := append([]hop{
			{"gateway", "HTTP POST"},
			{"apiserver", "store.Txn"},
			{"controllers", "deployment.reconcile"},
			{"controllers", "replicaset.reconcile"},
		}, podHops[9:]...)
		spans := p.traceOf(t, pod.GetMetadata().GetAnnotations(), wantOf(hops))
		checkOrder(t, spans, hops)
		// The pod's creation is the ReplicaSet controller's doing, in the
		// Deployment's trace.
		for _, s := range spans {
			if s.Name() == "schedule" && !descends(spans, s, func(x sdktrace.ReadOnlySpan) bool { return x.Name() == "replicaset.reconcile" }) {
				t.Errorf("schedule does not descend from replicaset.reconcile\n%s", dump(spans))
			}
		}
	})

	// The Endpoints controller continues the Service's trace and links
	// to the traces of the pod changes that caused a reconcile: here the
	// pod a scale-up creates.
	t.Run("endpoints", func(t *testing.T) {
		p.kubectl(t, bin, `apiVersion: v1
kind: Service
metadata: {name: api}
spec:
  selector: {app: api}
  ports: [{port: 80}]
`, "apply", "-f", "-")
		svc, err := client.Must[*corev1.Service](p.admin).Get(context.Background(), "default", "api")
		if err != nil {
			t.Fatal(err)
		}
		svcTrace := telemetry.ObjectSpanContext(svc.GetMetadata().GetAnnotations()).TraceID()
		first := p.reconcileSpan(t, "endpoints.reconcile", "default/api")
		if got, want := first.SpanContext().TraceID(), svcTrace; got != want {
			t.Errorf("endpoints.reconcile in trace %s, want the Service's %s", got, want)
		}
		old := p.runningPod(t, func(pod *corev1.Pod) bool { return pod.GetMetadata().GetLabels()["app"] == "api" })
		p.kubectl(t, bin, "", "scale", "deployment/api", "--replicas=2")
		pod := p.runningPod(t, func(pod *corev1.Pod) bool {
			return pod.GetMetadata().GetLabels()["app"] == "api" && pod.GetMetadata().GetName() != old.GetMetadata().GetName()
		})
		podTrace := telemetry.ObjectSpanContext(pod.GetMetadata().GetAnnotations()).TraceID()
		deadline := time.Now().Add(30 * time.Second)
		for {
			linked := slices.ContainsFunc(p.rec.Ended(), func(s sdktrace.ReadOnlySpan) bool {
				return s.Name() == "endpoints.reconcile" && s.SpanContext().TraceID() == svcTrace &&
					slices.ContainsFunc(s.Links(), func(l sdktrace.Link) bool { return l.SpanContext.TraceID() == podTrace })
			})
			if linked {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no endpoints.reconcile in the Service's trace linked to the new pod's trace %s", podTrace)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	// A foreground delete marks the Deployment, so its trace annotation
	// becomes the delete's; the garbage collector's reconciles of the
	// Deployment and of its ReplicaSet continue that trace.
	t.Run("garbagecollector", func(t *testing.T) {
		p.kubectl(t, bin, "", "delete", "deployment/api", "--cascade=foreground", "--wait=false")
		s := p.reconcileSpan(t, "garbagecollector.reconcile", "Deployment.apps/default/api")
		spans := p.traceByID(t, s.SpanContext().TraceID(), map[string]string{"HTTP DELETE": "gateway", "garbagecollector.reconcile": "controllers"})
		if root := spans[0]; root.Name() != "HTTP DELETE" || service(root) != "gateway" {
			t.Errorf("trace root: got %s/%s, want gateway/HTTP DELETE\n%s", service(root), root.Name(), dump(spans))
		}
		deadline := time.Now().Add(30 * time.Second)
		for !slices.ContainsFunc(p.rec.Ended(), func(x sdktrace.ReadOnlySpan) bool {
			return x.Name() == "garbagecollector.reconcile" && x.SpanContext().TraceID() == s.SpanContext().TraceID() &&
				slices.ContainsFunc(x.Attributes(), func(kv attribute.KeyValue) bool {
					return kv.Key == "k8s.object" && strings.HasPrefix(kv.Value.AsString(), "ReplicaSet.apps/default/api-")
				})
		}) {
			if time.Now().After(deadline) {
				t.Fatalf("no garbagecollector.reconcile of the ReplicaSet in the delete's trace\n%s", dump(spans))
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	// Deleting a namespace marks it Terminating; the namespace controller
	// empties and finalizes it in the delete's trace.
	t.Run("namespace", func(t *testing.T) {
		p.kubectl(t, bin, "", "create", "namespace", "scratch")
		p.kubectl(t, bin, "", "delete", "namespace", "scratch", "--wait=false")
		s := p.reconcileSpan(t, "namespace.reconcile", "scratch")
		spans := p.traceByID(t, s.SpanContext().TraceID(), map[string]string{"HTTP DELETE": "gateway", "namespace.reconcile": "controllers"})
		if root := spans[0]; root.Name() != "HTTP DELETE" || service(root) != "gateway" {
			t.Errorf("trace root: got %s/%s, want gateway/HTTP DELETE\n%s", service(root), root.Name(), dump(spans))
		}
	})

	// A traced change of a node is continued by the node lifecycle
	// controller; its periodic checks, caused by no change, record nothing.
	t.Run("nodelifecycle", func(t *testing.T) {
		p.kubectl(t, bin, "", "label", "node", "n1", "kplane.test/traced=yes")
		s := p.reconcileSpan(t, "nodelifecycle.reconcile", "n1")
		spans := p.traceByID(t, s.SpanContext().TraceID(), map[string]string{"HTTP PATCH": "gateway", "nodelifecycle.reconcile": "controllers"})
		if root := spans[0]; root.Name() != "HTTP PATCH" || service(root) != "gateway" {
			t.Errorf("trace root: got %s/%s, want gateway/HTTP PATCH\n%s", service(root), root.Name(), dump(spans))
		}
		for _, x := range p.rec.Ended() {
			if x.Name() == "nodelifecycle.reconcile" && !x.Parent().IsValid() {
				t.Errorf("a nodelifecycle.reconcile span with no parent (a periodic check) was recorded")
			}
		}
	})

	// Each component's /metrics, after that traffic.
	t.Run("metrics", func(t *testing.T) {
		for svc, names := range map[string][]string{
			"store": {"kplane_raft_term", "kplane_raft_commit_index", "kplane_raft_applied_index", `kplane_raft_state{state="Leader"} 1`,
				"raft_commitTime", "rpc_server_call_duration_seconds_bucket", "etcdserverpb.KV"},
			"apiserver":   {`kplane_apiserver_watchers{resource="pods"}`, "kplane_apiserver_watch_cache_objects", "rpc_server_call_duration_seconds_count", "rpc_client_call_duration_seconds_count"},
			"gateway":     {"http_server_request_duration_seconds_count"},
			"scheduler":   {`kplane_scheduler_schedule_attempts_total{result="scheduled"}`, "kplane_scheduler_scheduling_attempt_duration_seconds_bucket", `kplane_scheduler_pending_pods{queue="active"}`},
			"controllers": {"rpc_client_call_duration_seconds_count"},
			"nodeagent":   {"RunPodSandbox", "rpc_client_call_duration_seconds_bucket"},
		} {
			body := p.scrape(t, svc)
			for _, n := range names {
				if !strings.Contains(body, n) {
					t.Errorf("%s /metrics lacks %s", svc, n)
				}
			}
		}
	})
}
