// Command bench measures the scheduler against a running API service: it
// creates N nodes (objects only, no agents) and M pending pods, then runs
// a scheduler in this process until every pod is bound, and reports pods/s
// from the first to the last bind and the scheduling-attempt latency
// percentiles. scripts/bench-scheduler.sh starts the store and the API
// service and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler"
)

type token string

func (t token) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}
func (token) RequireTransportSecurity() bool { return false }

func main() {
	addr := flag.String("addr", "127.0.0.1:6443", "API service address")
	tok := flag.String("token", "", "bearer token (needs to create nodes and pods, and to schedule)")
	nodes := flag.Int("nodes", 5000, "nodes to create")
	pods := flag.Int("pods", 10000, "pending pods to create")
	owners := flag.Int("owners", 100, "pods are spread over this many owner ReplicaSets")
	workers := flag.Int("workers", 32, "concurrent creates")
	bindPar := flag.Int("bind-parallelism", 256, "scheduler binds in flight")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the scheduling phase here")
	serverPIDs := flag.String("server-pids", "", "comma-separated pids (API service, store) whose CPU time is reported for the scheduling phase")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	affinity := flag.String("affinity", "none", "what the pods ask for: none; anti (required anti-affinity by hostname against the pods of the same owner: one replica per node); spread (a DoNotSchedule topology spread constraint by zone, maxSkew 1, over the pods of the same owner)")
	flag.Parse()
	if *affinity != "none" && *affinity != "anti" && *affinity != "spread" {
		fmt.Fprintf(os.Stderr, "bench: -affinity %q: want none, anti or spread\n", *affinity)
		os.Exit(2)
	}
	if err := run(*addr, *tok, *nodes, *pods, *owners, *workers, *bindPar, *cpuProfile, *serverPIDs, *affinity, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(addr, tok string, numNodes, numPods, owners, workers, bindPar int, cpuProfile, serverPIDs, affinity string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(token(tok)))
	if err != nil {
		return err
	}
	defer conn.Close()
	nodeC := client.Must[*corev1.Node](conn)
	podC := client.Must[*corev1.Pod](conn)

	start := time.Now()
	res := map[string]string{"cpu": "32", "memory": "128Gi", "pods": "110"}
	if err := parallel(ctx, workers, numNodes, func(i int) error {
		n, err := nodeC.Create(ctx, &corev1.Node{Metadata: &metav1.ObjectMeta{Name: fmt.Sprintf("node-%05d", i),
			Labels: map[string]string{"zone": fmt.Sprintf("zone-%d", i%3), "kubernetes.io/hostname": fmt.Sprintf("node-%05d", i)}}})
		if err != nil {
			return fmt.Errorf("create node: %w", err)
		}
		n.Status = &corev1.NodeStatus{Capacity: res, Allocatable: res, Conditions: []*corev1.NodeCondition{{Type: "Ready", Status: "True"}},
			Images: []*corev1.ContainerImage{{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 300_000}}}
		if _, err := nodeC.UpdateStatus(ctx, n); err != nil {
			return fmt.Errorf("node status: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Printf("created %d nodes in %v\n", numNodes, time.Since(start).Round(time.Millisecond))
	// Pod admission needs the namespace's default ServiceAccount, which no
	// controller creates here.
	sa := &corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "default"}}
	if _, err := client.Must[*corev1.ServiceAccount](conn).Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service account: %w", err)
	}
	start = time.Now()
	if err := parallel(ctx, workers, numPods, func(i int) error {
		owner := i % max(owners, 1)
		p := &corev1.Pod{
			Metadata: &metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("pod-%05d", i),
				OwnerReferences: []*metav1.OwnerReference{{ApiVersion: "apps/v1", Kind: "ReplicaSet", Name: fmt.Sprintf("rs-%d", owner),
					Uid: fmt.Sprintf("rs-uid-%d", owner), Controller: new(true)}}},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "100m", "memory": "128Mi"}}}}},
		}
		withAffinity(p, affinity, fmt.Sprintf("rs-%d", owner))
		_, err := podC.Create(ctx, p)
		if err != nil {
			return fmt.Errorf("create pod: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Printf("created %d pending pods in %v\n", numPods, time.Since(start).Round(time.Millisecond))

	var mu sync.Mutex
	lat := make([]time.Duration, 0, numPods)
	var first, last atomic.Int64
	var bound atomic.Int64
	done := make(chan struct{})
	s, err := scheduler.New(scheduler.Config{
		Conn: conn, BindParallelism: bindPar,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnAttempt: func(_ string, d time.Duration, _ string) {
			mu.Lock()
			lat = append(lat, d)
			mu.Unlock()
		},
		OnBound: func(string, string) {
			now := time.Now().UnixNano()
			first.CompareAndSwap(0, now)
			last.Store(now)
			if bound.Add(1) == int64(numPods) {
				close(done)
			}
		},
	})
	if err != nil {
		return err
	}
	pids := parsePIDs(serverPIDs)
	cpuBefore := cpuTimes(pids)
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	sctx, scancel := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	schedStart := time.Now()
	go func() { runDone <- s.Run(sctx) }()
	select {
	case <-done:
	case <-ctx.Done():
		scancel()
		<-runDone
		return fmt.Errorf("timed out: %d of %d pods bound; stats %+v", bound.Load(), numPods, s.Stats())
	}
	wall := time.Since(schedStart)
	cpuAfter := cpuTimes(pids)
	lastBind := time.Now()
	fctx, fcancel := context.WithTimeout(ctx, 2*time.Minute)
	flushErr := s.FlushEvents(fctx)
	fcancel()
	flushed := time.Since(lastBind)
	scancel()
	<-runDone

	span := time.Duration(last.Load() - first.Load())
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	st := s.Stats()
	fmt.Printf("scheduler: %d nodes, %d pods; from start (list+sync included) to last bind %v\n", numNodes, numPods, wall.Round(time.Millisecond))
	fmt.Printf("throughput: %.0f pods/s (first to last bind, %v)\n", float64(numPods-1)/span.Seconds(), span.Round(time.Millisecond))
	fmt.Printf("attempt latency: p50 %v  p99 %v  max %v  (%d attempts, %d unschedulable, %d errors, %d bind failures)\n",
		pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), pct(1).Round(time.Microsecond),
		st.Attempts, st.Unschedulable, st.Errors, st.BindFailures)
	ev := st.Events
	fmt.Printf("events: %d recorded, %d written, %d dropped, %d failed; the last written %v after the last bind",
		ev.Recorded, ev.Written, ev.Dropped, ev.Failed, flushed.Round(time.Millisecond))
	if flushErr != nil {
		fmt.Printf(" (%v)", flushErr)
	}
	fmt.Println()
	if n, err := countEvents(ctx, conn, "Scheduled"); err != nil {
		fmt.Printf("counting Scheduled events in the store: %v\n", err)
	} else {
		fmt.Printf("store: %d Scheduled events (counts summed)\n", n)
	}
	for i, pid := range pids {
		fmt.Printf("server pid %d: %.1f CPU-seconds during scheduling (%.0f%% of one core)\n", pid, cpuAfter[i]-cpuBefore[i], 100*(cpuAfter[i]-cpuBefore[i])/wall.Seconds())
	}
	return nil
}

// countEvents sums the counts of the events with this reason in default.
func countEvents(ctx context.Context, conn grpc.ClientConnInterface, reason string) (int64, error) {
	events := client.Must[*corev1.Event](conn)
	var n int64
	cont := ""
	for {
		items, _, next, err := events.ListPage(ctx, "default", client.ListOptions{FieldSelector: "reason=" + reason, Limit: 2000, Continue: cont})
		if err != nil {
			return 0, err
		}
		for _, e := range items {
			n += int64(e.GetCount())
		}
		if next == "" {
			return n, nil
		}
		cont = next
	}
}

// parallel runs f(0..n-1) on workers goroutines, stopping at the first error.
func parallel(ctx context.Context, workers, n int, f func(i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	var next atomic.Int64
	for range workers {
		g.Go(func() error {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return nil
				}
				if err := f(i); err != nil {
					return err
				}
			}
			return ctx.Err()
		})
	}
	return g.Wait()
}

func parsePIDs(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if p, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// cpuTimes reads utime+stime of each pid from /proc (Linux), in seconds.
func cpuTimes(pids []int) []float64 {
	out := make([]float64, len(pids))
	for i, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(fields) < 13 {
			continue
		}
		ut, _ := strconv.ParseFloat(fields[11], 64)
		stt, _ := strconv.ParseFloat(fields[12], 64)
		out[i] = (ut + stt) / 100 // USER_HZ
	}
	return out
}

// withAffinity gives p, of owner rs, what -affinity asks for.
func withAffinity(p *corev1.Pod, affinity, rs string) {
	if affinity == "none" {
		return
	}
	sel := map[string]string{"rs": rs}
	p.Metadata.Labels = sel
	switch affinity {
	case "anti":
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{{
			TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: sel}}}}}
	case "spread":
		p.Spec.TopologySpreadConstraints = []*corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone",
			WhenUnsatisfiable: "DoNotSchedule", LabelSelector: &metav1.LabelSelector{MatchLabels: sel}}}
	}
}
