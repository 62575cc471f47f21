// Command bench drives a running API service over gRPC and prints
// throughput and latency. scripts/bench-apiserver.sh starts the store and
// `kplane apiserver` and runs it.
//
//	bench -addr 127.0.0.1:6443 -token T -mode create -clients 20 -rate 0 -duration 20s
//
// -rate 0 is closed loop: every client sends its next request as soon as
// the last one answers (how the kube-apiserver anchor was measured). A
// positive -rate is an open loop at that many requests per second in total:
// requests are scheduled in advance and latency counts from the scheduled
// time, so a slow server cannot hide its queueing (no coordinated
// omission).
//
// -mode watch opens -watchers watches on pods and has one writer create pods
// at -rate per second; it reports the delivery latency (write acknowledged
// → event received, per watcher) and, with -server-pid, the service's
// resident memory per watcher.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6443", "API service address")
	token := flag.String("token", "", "bearer token")
	mode := flag.String("mode", "create", "create, get, list, update or watch")
	clients := flag.Int("clients", 20, "concurrent clients (one gRPC connection each)")
	rate := flag.Float64("rate", 0, "offered requests per second in total; 0 = closed loop")
	duration := flag.Duration("duration", 20*time.Second, "how long to run")
	watchers := flag.Int("watchers", 10000, "watchers (mode watch)")
	conns := flag.Int("conns", 20, "connections the watchers share (mode watch)")
	client := flag.String("client", "h2", "mode watch: h2 reads every connection's watches from one goroutine (golang.org/x/net/http2); grpc runs a grpc-go stream and goroutine per watcher")
	serverPID := flag.Int("server-pid", 0, "the API service's pid, to report its memory (mode watch)")
	ns := flag.String("namespace", "default", "namespace")
	cpuProfile := flag.String("cpuprofile", "", "write the driver's own CPU profile here")
	serverPprof := flag.String("server-pprof", "", "the service's pprof address: with -profile-dir, its CPU and block profiles of the writer's phase are saved (mode watch)")
	profileDir := flag.String("profile-dir", "", "where -server-pprof's profiles go")
	flag.Parse()
	if *cpuProfile != "" && *mode != "watch" {
		defer startCPUProfile(*cpuProfile)()
	}

	ctx := context.Background()
	if *token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*token)
	}
	dial := func() *grpc.ClientConn {
		c, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fail(err)
		}
		return c
	}
	// Pods need their ServiceAccount (the ServiceAccount admission plugin
	// refuses a pod whose account is missing); with only the API service
	// running, no controller creates the namespace's default one.
	if _, err := corev1.NewServiceAccountServiceClient(dial()).CreateServiceAccount(ctx, &corev1.CreateServiceAccountRequest{Namespace: *ns,
		ServiceAccount: &corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Namespace: *ns, Name: "default"}}}); err != nil && !apierrors.IsAlreadyExists(err) {
		fail(fmt.Errorf("the default ServiceAccount: %w", err))
	}
	if *mode == "watch" {
		// Profiles of the writer's phase only, not of opening the watches.
		prof := func(d time.Duration) func() {
			stop := func() {}
			if *cpuProfile != "" {
				stop = startCPUProfile(*cpuProfile)
			}
			wait := func() {}
			if *serverPprof != "" && *profileDir != "" {
				wait = serverProfiles(*serverPprof, *profileDir, d)
			}
			return func() { stop(); wait() }
		}
		watchBench(ctx, dial, watchConfig{addr: *addr, token: *token, ns: *ns, watchers: *watchers, conns: *conns, client: *client,
			rate: *rate, d: *duration, pid: *serverPID, prof: prof})
		return
	}
	podsC := make([]corev1.PodServiceClient, *clients)
	for i := range podsC {
		podsC[i] = corev1.NewPodServiceClient(dial())
	}
	run := fmt.Sprintf("b%d", time.Now().UnixNano()%1e6)
	// Objects for get/update/list.
	var seeded []*corev1.Pod
	if *mode != "create" {
		for i := range 100 {
			r, err := podsC[0].CreatePod(ctx, &corev1.CreatePodRequest{Namespace: *ns, Pod: benchPod(*ns, fmt.Sprintf("%s-seed-%d", run, i))})
			if err != nil {
				fail(err)
			}
			seeded = append(seeded, r.GetPod())
		}
	}
	var seq atomic.Int64
	op := func(client int) error {
		c := podsC[client]
		n := seq.Add(1)
		switch *mode {
		case "create":
			_, err := c.CreatePod(ctx, &corev1.CreatePodRequest{Namespace: *ns, Pod: benchPod(*ns, fmt.Sprintf("%s-%d", run, n))})
			return err
		case "get":
			_, err := c.GetPod(ctx, &corev1.GetPodRequest{Namespace: *ns, Name: seeded[n%int64(len(seeded))].GetMetadata().GetName()})
			return err
		case "list":
			_, err := c.ListPods(ctx, &corev1.ListPodsRequest{Namespace: *ns, LabelSelector: "bench=" + run, Limit: 500})
			return err
		case "update":
			// Each client owns its objects, so conflicts come only from
			// itself: read-modify-write with the current resourceVersion.
			name := seeded[(int(n)*len(podsC)+client)%len(seeded)].GetMetadata().GetName()
			g, err := c.GetPod(ctx, &corev1.GetPodRequest{Namespace: *ns, Name: name})
			if err != nil {
				return err
			}
			p := g.GetPod()
			p.Metadata.Annotations = map[string]string{"n": strconv.FormatInt(n, 10)}
			_, err = c.UpdatePod(ctx, &corev1.UpdatePodRequest{Namespace: *ns, Name: name, Pod: p})
			return err
		}
		return fmt.Errorf("unknown mode %q", *mode)
	}
	lat, errs, elapsed := drive(*clients, *rate, *duration, op)
	report(*mode, *clients, *rate, lat, errs, elapsed)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

func benchPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"bench": strings.SplitN(name, "-", 2)[0], "app": "bench"}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{
			Name: "app", Image: "registry.example.com/app:1.0",
			Ports:     []*corev1.ContainerPort{{ContainerPort: 8080}},
			Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "100m", "memory": "64Mi"}, Limits: map[string]string{"memory": "128Mi"}},
		}}},
	}
}

// drive runs op from clients goroutines, closed loop (rate 0) or open loop.
func drive(clients int, rate float64, d time.Duration, op func(client int) error) ([]time.Duration, int, time.Duration) {
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs int
		wg   sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	record := func(l time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs++
			if errs <= 3 {
				fmt.Fprintln(os.Stderr, "error:", err)
			}
			return
		}
		lat = append(lat, l)
	}
	if rate <= 0 {
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					t0 := time.Now()
					err := op(c)
					record(time.Since(t0), err)
				}
			}()
		}
	} else {
		// Open loop: a schedule of start times shared by the clients.
		interval := time.Duration(float64(time.Second) / rate)
		total := int(d / interval)
		var next atomic.Int64
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if int(i) >= total {
						return
					}
					due := start.Add(time.Duration(i) * interval)
					if w := time.Until(due); w > 0 {
						time.Sleep(w)
					}
					err := op(c)
					record(time.Since(due), err)
				}
			}()
		}
	}
	wg.Wait()
	return lat, errs, time.Since(start)
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

func report(mode string, clients int, rate float64, lat []time.Duration, errs int, elapsed time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	offered := "closed loop"
	if rate > 0 {
		offered = fmt.Sprintf("%.0f/s offered", rate)
	}
	fmt.Printf("%-7s clients=%d %-15s ok=%d errors=%d throughput=%.0f/s p50=%s p99=%s max=%s\n",
		mode, clients, offered, len(lat), errs, float64(len(lat))/elapsed.Seconds(),
		pct(lat, 0.50).Round(100*time.Microsecond), pct(lat, 0.99).Round(100*time.Microsecond), pct(lat, 1).Round(100*time.Microsecond))
}

// selfCPU is the user plus system CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user plus system CPU time process pid has used (from
// /proc/pid/stat, in clock ticks of 1/100 s on Linux).
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command (which may hold spaces) in parentheses.
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return 0
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

func rssKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}

// startCPUProfile starts this process's CPU profile into path and returns
// the function that stops it.
func startCPUProfile(path string) func() {
	f, err := os.Create(path)
	if err != nil {
		fail(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fail(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// serverProfiles starts a CPU profile and an allocation profile of d on
// the service at addr and returns a function that waits for them and then
// saves the block profile, all into dir.
func serverProfiles(addr, dir string, d time.Duration) func() {
	get := func(path, file string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "profile:", err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			fmt.Fprintln(os.Stderr, "profile:", err)
			return
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil {
			fmt.Fprintln(os.Stderr, "profile:", err)
		}
	}
	secs := max(1, int(d.Seconds()))
	var wg sync.WaitGroup
	wg.Go(func() { get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), "apiserver.cpu") })
	wg.Go(func() { get(fmt.Sprintf("/debug/pprof/allocs?seconds=%d", secs), "apiserver.allocs") })
	return func() {
		wg.Wait()
		get("/debug/pprof/block", "apiserver.block")
	}
}

// watchConfig is what watch mode runs.
type watchConfig struct {
	addr, token, ns string
	watchers, conns int
	client          string // "h2" or "grpc"
	rate            float64
	d               time.Duration
	pid             int
	prof            func(time.Duration) func()
}

// sentTimes holds when the writer sent each create, by the pod's number;
// receivers look an event's pod up without allocating.
type sentTimes struct {
	prefix string
	at     []atomic.Int64 // UnixNano; 0 until sent
}

// lookup returns when the pod named name was sent.
func (s *sentTimes) lookup(name []byte) (time.Time, bool) {
	rest, ok := bytes.CutPrefix(name, []byte(s.prefix))
	if !ok || len(rest) == 0 {
		return time.Time{}, false
	}
	i := 0
	for _, c := range rest {
		if c < '0' || c > '9' || i > len(s.at) {
			return time.Time{}, false
		}
		i = 10*i + int(c-'0')
	}
	if i >= len(s.at) {
		return time.Time{}, false
	}
	t := s.at[i].Load()
	return time.Unix(0, t), t != 0
}

// receiver counts one watcher's (or one connection's) events.
type receiver struct {
	lat        []time.Duration
	unexpected int
}

func (r *receiver) event(sent *sentTimes, typ, name []byte, at time.Time) {
	if t0, ok := sent.lookup(name); ok && string(typ) == "ADDED" {
		r.lat = append(r.lat, at.Sub(t0))
		return
	}
	r.unexpected++
}

func watchBench(ctx context.Context, dial func() *grpc.ClientConn, cfg watchConfig) {
	rate, d, watchers, conns, ns := cfg.rate, cfg.d, cfg.watchers, cfg.conns, cfg.ns
	if rate <= 0 {
		rate = 20
	}
	interval := time.Duration(float64(time.Second) / rate)
	n := int(d / interval)
	run := fmt.Sprintf("w%d", time.Now().UnixNano()%1e6)
	sent := &sentTimes{prefix: run + "-", at: make([]atomic.Int64, n)}
	req := &corev1.WatchPodsRequest{Namespace: ns, LabelSelector: "bench=" + run, ResourceVersion: "", SendInitialEvents: new(bool)}
	rssBefore := rssKB(cfg.pid)
	var (
		mu       sync.Mutex
		total    receiver
		failures []string
		ready    sync.WaitGroup
		finish   func()
	)
	collect := func(r *receiver, fails ...string) {
		mu.Lock()
		defer mu.Unlock()
		total.lat = append(total.lat, r.lat...)
		total.unexpected += r.unexpected
		for _, f := range fails {
			if len(failures) < 3 {
				failures = append(failures, f)
			}
		}
	}
	switch cfg.client {
	case "h2":
		b, err := proto.Marshal(req)
		if err != nil {
			fail(err)
		}
		var hdrs [][2]string
		if cfg.token != "" {
			hdrs = append(hdrs, [2]string{"authorization", "Bearer " + cfg.token})
		}
		var ws []*h2Watches
		recv := make([]*receiver, conns)
		for i := range conns {
			k := watchers/conns + btoi(i < watchers%conns)
			ready.Add(k)
			r := &receiver{}
			recv[i] = r
			w, err := dialH2Watches(cfg.addr, k, hdrs, b, ready.Done, func(typ, name []byte, at time.Time) { r.event(sent, typ, name, at) })
			if err != nil {
				fail(err)
			}
			ws = append(ws, w)
		}
		finish = func() {
			for i, w := range ws {
				f := w.close()
				collect(recv[i], f...)
			}
		}
	case "grpc":
		cc := make([]corev1.PodServiceClient, conns)
		for i := range cc {
			cc[i] = corev1.NewPodServiceClient(dial())
		}
		var done sync.WaitGroup
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for i := range watchers {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				st, err := cc[i%conns].WatchPods(wctx, req, grpc.ForceCodecV2(eventNameCodec{}))
				if err != nil {
					ready.Done()
					collect(&receiver{}, "watch: "+err.Error())
					return
				}
				// The stream is registered once the server sent headers.
				if _, err := st.Header(); err != nil {
					ready.Done()
					collect(&receiver{}, "watch: "+err.Error())
					return
				}
				ready.Done()
				var r receiver
				for {
					ev, err := st.Recv()
					if err != nil {
						break
					}
					r.event(sent, []byte(ev.GetType()), []byte(ev.GetObject().GetMetadata().GetName()), time.Now())
				}
				collect(&r)
			}()
		}
		finish = func() { cancel(); done.Wait() }
	default:
		fail(fmt.Errorf("unknown -client %q", cfg.client))
	}
	ready.Wait()
	time.Sleep(2 * time.Second) // let every watch register in the cache
	rssWatching := rssKB(cfg.pid)
	writer := corev1.NewPodServiceClient(dial())
	cpuBefore, srvBefore := selfCPU(), procCPU(cfg.pid)
	profDone := cfg.prof(d)
	start := time.Now()
	for i := range n {
		if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
			time.Sleep(w)
		}
		name := fmt.Sprintf("%s%d", sent.prefix, i)
		// Record before sending: the event may arrive before the reply.
		sent.at[i].Store(time.Now().UnixNano())
		if _, err := writer.CreatePod(ctx, &corev1.CreatePodRequest{Namespace: ns, Pod: benchPod(ns, name)}); err != nil {
			fail(err)
		}
	}
	writing := time.Since(start)
	time.Sleep(5 * time.Second) // drain
	cpuDriver, cpuServer := selfCPU()-cpuBefore, procCPU(cfg.pid)-srvBefore
	profDone()
	finish()
	lat := total.lat
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	want := n * watchers
	fmt.Printf("watch   client=%s watchers=%d conns=%d events=%d (written in %s) delivered=%d/%d unexpected=%d p50=%s p99=%s max=%s\n",
		cfg.client, watchers, conns, n, writing.Round(100*time.Millisecond), len(lat), want, total.unexpected,
		pct(lat, 0.5).Round(100*time.Microsecond), pct(lat, 0.99).Round(100*time.Microsecond), pct(lat, 1).Round(100*time.Microsecond))
	for _, f := range failures {
		fmt.Fprintln(os.Stderr, "watch failure:", f)
	}
	if cfg.pid > 0 {
		fmt.Printf("watch   server RSS before=%d KiB with watchers=%d KiB → %.1f KiB per watcher\n", rssBefore, rssWatching, float64(rssWatching-rssBefore)/float64(watchers))
	}
	// CPU time spent from the first create to the end of the drain, per
	// delivered event: what decides the tail when both sides share the
	// cores, and (unlike latency) hardly changes with the machine's load.
	if len(lat) > 0 {
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(len(lat)) }
		fmt.Printf("watch   cpu driver=%s (%.1f µs per delivered event)", cpuDriver.Round(10*time.Millisecond), per(cpuDriver))
		if cfg.pid > 0 {
			fmt.Printf(" server=%s (%.1f µs per delivered event)", cpuServer.Round(10*time.Millisecond), per(cpuServer))
		}
		fmt.Println()
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// eventNameCodec decodes of a watch event only what the driver measures
// with: the event type and the object's name. The driver shares the cores
// with the service; decoding 10,000 whole pods per event would take CPU
// the service then lacks, and the figure would measure the driver.
type eventNameCodec struct{}

func (eventNameCodec) Name() string { return "proto" }

func (eventNameCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (eventNameCodec) Unmarshal(data mem.BufferSlice, v any) error {
	ev, ok := v.(*corev1.WatchPodsResponse)
	if !ok {
		return proto.Unmarshal(data.Materialize(), v.(proto.Message))
	}
	b := data.Materialize()
	typ, obj := fieldBytes(b, 1), fieldBytes(b, 2)
	ev.Type = string(typ)
	name := fieldBytes(fieldBytes(obj, 3), 1) // Pod.metadata, ObjectMeta.name
	ev.Object = &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: string(name)}}
	return nil
}

// fieldBytes returns the first length-delimited field num of a message.
func fieldBytes(b []byte, num protowire.Number) []byte {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			return v
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return nil
		}
		b = b[l:]
	}
	return nil
}
