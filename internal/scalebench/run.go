// This file holds one step of the scale benchmark: wait for the nodes, put
// the load on while watching the pods and listing them, then gather the
// SLO figures and the processes' resource use into a Result.

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

type config struct {
	kubeconfig        string
	label             string
	nodes             int
	kwokNodes         int
	podsPerNode       int
	nodesPerNamespace int
	qps               float64
	podRate           float64
	duration          time.Duration
	listEvery         time.Duration
	procs             string
	kplaneStat        string
	storeDirs         string
	out               string
	timeout           time.Duration
	// The overload benchmark (overload.go), run instead of the scale load
	// when overload > 0.
	overload         time.Duration
	baseline         time.Duration
	floodClients     int
	floodObjects     int
	floodObjectBytes int
}

// Result is one step's figures. Durations are in seconds.
type Result struct {
	Label       string    `json:"label"`
	Date        time.Time `json:"date"`
	Nodes       int       `json:"nodes"`
	PodsPerNode int       `json:"podsPerNode"`
	Pods        int       `json:"pods"`
	Namespaces  int       `json:"namespaces"`
	Deployments int       `json:"deployments"`
	// Load is /proc/loadavg's 1, 5 and 15 minute averages at the end.
	Load string `json:"load"`
	// Error is where the step broke ("" if it ran to the end).
	Error string `json:"error,omitempty"`
	// CreateSeconds: from the first creation until every pod was seen
	// Running.
	CreateSeconds float64 `json:"createSeconds"`
	ChurnActions  int     `json:"churnActions"`
	ChurnSeconds  float64 `json:"churnSeconds"`
	// DeleteSeconds: from the first deletion until no pod of the load was
	// left, or the wait gave up (PodsLeft > 0).
	DeleteSeconds float64 `json:"deleteSeconds"`
	PodsLeft      int     `json:"podsLeft"`
	// CallErrors counts the load's API calls that failed.
	CallErrors int `json:"callErrors"`
	// APICalls are the SLO's series from apiserver_request_duration_seconds
	// on the API endpoint and, for kplane, from its API services' gRPC
	// histogram (its controllers, schedulers and node agents call those
	// directly), worst first.
	APICalls []APICall `json:"apiCalls"`
	// Startup is creationTimestamp → seen Running (ClusterLoader2's pod
	// startup latency; the timestamp has one second's resolution);
	// StartupSeen is first seen by the watch → seen Running.
	Startup     Summary `json:"startup"`
	StartupSeen Summary `json:"startupSeen"`
	// ClusterList and NamespaceList are this client's lists of pods, paged
	// by 500 as kubectl and client-go's reflectors page them: the whole
	// list's time.
	ClusterList   Summary `json:"clusterList"`
	NamespaceList Summary `json:"namespaceList"`
	ListErrors    int     `json:"listErrors"`
	// UnpagedList is one cluster-wide list of all pods in one call once
	// everything runs (UnpagedListError if it failed).
	UnpagedList      float64     `json:"unpagedList"`
	UnpagedListError string      `json:"unpagedListError,omitempty"`
	Procs            []ProcUsage `json:"procs"`
	// StoreBytes is the store's data directories' size at the end (each
	// member's for kplane).
	StoreBytes []int64 `json:"storeBytes"`
}

// podTimes is what the watch saw of one pod.
type podTimes struct {
	created time.Time
	seen    time.Time
	running time.Time
}

// tracker records, from informer events, when each pod of the load was
// first seen and seen Running, and how many are Running now.
type tracker struct {
	mu      sync.Mutex
	pods    map[string]*podTimes
	live    map[string]bool // uid → Running now
	running int
	total   int
}

func newTracker() *tracker {
	return &tracker{pods: map[string]*podTimes{}, live: map[string]bool{}}
}

func (t *tracker) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	uid := string(pod.UID)
	t.mu.Lock()
	defer t.mu.Unlock()
	pt := t.pods[uid]
	if pt == nil {
		pt = &podTimes{created: pod.CreationTimestamp.Time, seen: now}
		t.pods[uid] = pt
		t.live[uid] = false
		t.total++
	}
	running := pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil
	if running && pt.running.IsZero() {
		pt.running = now
	}
	if was, ok := t.live[uid]; ok && was != running {
		t.live[uid] = running
		if running {
			t.running++
		} else {
			t.running--
		}
	}
}

func (t *tracker) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if was, ok := t.live[string(pod.UID)]; ok {
		if was {
			t.running--
		}
		delete(t.live, string(pod.UID))
	}
}

// waitFor polls until cond(running now, present now) holds.
func (t *tracker) waitFor(ctx context.Context, logger *slog.Logger, what string, cond func(running, present int) bool) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		t.mu.Lock()
		running, present := t.running, len(t.live)
		t.mu.Unlock()
		if cond(running, present) {
			return nil
		}
		if time.Since(last) > 10*time.Second {
			logger.Info("waiting", "for", what, "running", running, "present", present)
			last = time.Now()
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("%s: %d pods Running, %d present: %w", what, running, present, ctx.Err())
		}
	}
}

// lister lists pods every listEvery, cluster-wide and in one namespace in
// turn, and keeps how long each whole (paged) list took.
type lister struct {
	cs             kubernetes.Interface
	namespaces     []string
	mu             sync.Mutex
	cluster, perNS []time.Duration
	errors         int
}

func (l *lister) run(ctx context.Context, logger *slog.Logger, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, ns := range []string{"", l.namespaces[i%len(l.namespaces)]} {
			start := time.Now()
			_, err := listPods(ctx, l.cs, ns, 500)
			d := time.Since(start)
			l.mu.Lock()
			switch {
			case err != nil:
				if ctx.Err() != nil {
					l.mu.Unlock()
					return
				}
				l.errors++
				logger.Warn("list pods", "namespace", ns, "err", err)
			case ns == "":
				l.cluster = append(l.cluster, d)
			default:
				l.perNS = append(l.perNS, d)
			}
			l.mu.Unlock()
		}
	}
}

// listPods lists the namespace's pods (all namespaces for "") in pages of
// limit (0: one call) and returns how many there were.
func listPods(ctx context.Context, cs kubernetes.Interface, ns string, limit int64) (int, error) {
	n, cont := 0, ""
	for {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: limit, Continue: cont})
		if err != nil {
			return n, err
		}
		n += len(l.Items)
		if cont = l.Continue; cont == "" {
			return n, nil
		}
	}
}

func run(ctx context.Context, logger *slog.Logger, cfg config) (*Result, error) {
	if cfg.kubeconfig == "" {
		return nil, fmt.Errorf("%w: -kubeconfig is required", errUsage)
	}
	var grpcURLs []string
	procs, err := parseProcs(cfg.procs)
	if err != nil {
		return nil, err
	}
	if cfg.kplaneStat != "" {
		kp, err := procsFromKplaneStatus(cfg.kplaneStat)
		if err != nil {
			return nil, err
		}
		procs = append(procs, kp...)
		if grpcURLs, err = apiserverMetricsURLs(cfg.kplaneStat); err != nil {
			return nil, err
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	// The load is paced by its own limiters; client-go's must not pace it.
	rc.QPS, rc.Burst = 1000, 2000
	rc.UserAgent = "scalebench"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if cfg.kwokNodes > 0 {
		if err := createKWOKNodes(ctx, cs, cfg.kwokNodes); err != nil {
			return nil, err
		}
	}
	if err := waitNodes(ctx, logger, cs, cfg.nodes); err != nil {
		return nil, err
	}

	namespaces, deps := plan(cfg.nodes, cfg.podsPerNode, cfg.nodesPerNamespace)
	res := &Result{Label: cfg.label, Date: time.Now().UTC(), Nodes: cfg.nodes, PodsPerNode: cfg.podsPerNode,
		Pods: cfg.nodes * cfg.podsPerNode, Namespaces: len(namespaces), Deployments: len(deps)}

	tr := newTracker()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = podLabel + "=true" }))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    tr.observe,
		UpdateFunc: func(_, obj any) { tr.observe(obj) },
		DeleteFunc: tr.forget,
	}); err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	bgCtx, stopBg := context.WithCancel(ctx)
	defer stopBg()
	factory.Start(bgCtx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("pod informer did not sync: %w", ctx.Err())
	}

	before, err := scrape(ctx, cs)
	if err != nil {
		return nil, err
	}
	var grpcBefore map[seriesKey]*histogram
	if len(grpcURLs) > 0 {
		if grpcBefore, err = scrapeGRPC(ctx, grpcURLs); err != nil {
			return nil, err
		}
	}
	startSamples := sampleProcs(logger, procs)
	peaks := make([]uint64, len(procs))
	var peaksMu sync.Mutex
	notePeaks := func(s []sample) {
		peaksMu.Lock()
		defer peaksMu.Unlock()
		for i := range s {
			if !s[i].dead {
				peaks[i] = max(peaks[i], s[i].hwm)
			}
		}
	}
	notePeaks(startSamples)
	var bg sync.WaitGroup
	bg.Add(2)
	go func() {
		defer bg.Done()
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-bgCtx.Done():
				return
			case <-tick.C:
				notePeaks(sampleProcs(slog.New(slog.DiscardHandler), procs))
			}
		}
	}()
	ls := &lister{cs: cs, namespaces: namespaces}
	go func() {
		defer bg.Done()
		ls.run(bgCtx, logger, cfg.listEvery)
	}()

	loadErr := load(ctx, logger, cfg, cs, tr, namespaces, deps, res)
	if loadErr != nil {
		res.Error = loadErr.Error()
	}

	// What follows must be gathered even after the load broke or timed out.
	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	endSamples := sampleProcs(logger, procs)
	notePeaks(endSamples)
	stopBg()
	bg.Wait()
	res.Procs = usage(procs, startSamples, endSamples, peaks)
	res.Load = loadavg()
	if after, err := scrape(endCtx, cs); err != nil {
		logger.Warn("metrics after the load", "err", err)
		res.Error = strings.TrimPrefix(res.Error+"; "+err.Error(), "; ")
	} else {
		res.APICalls = apiCalls("endpoint", delta(before, after))
	}
	if len(grpcURLs) > 0 {
		if after, err := scrapeGRPC(endCtx, grpcURLs); err != nil {
			logger.Warn("API services' metrics after the load", "err", err)
			res.Error = strings.TrimPrefix(res.Error+"; "+err.Error(), "; ")
		} else {
			res.APICalls = append(res.APICalls, apiCalls("grpc", delta(grpcBefore, after))...)
			sortCalls(res.APICalls)
		}
	}
	tr.mu.Lock()
	var startup, seen []time.Duration
	for _, pt := range tr.pods {
		if !pt.running.IsZero() {
			startup = append(startup, pt.running.Sub(pt.created))
			seen = append(seen, pt.running.Sub(pt.seen))
		}
	}
	tr.mu.Unlock()
	res.Startup, res.StartupSeen = summarize(startup), summarize(seen)
	ls.mu.Lock()
	res.ClusterList, res.NamespaceList, res.ListErrors = summarize(ls.cluster), summarize(ls.perNS), ls.errors
	ls.mu.Unlock()
	for _, d := range strings.Split(cfg.storeDirs, ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		n, err := dirSize(d)
		if err != nil {
			logger.Warn("store size", "dir", d, "err", err)
		}
		res.StoreBytes = append(res.StoreBytes, n)
	}
	return res, loadErr
}

// load runs the phases: create everything and wait for every pod to run,
// one unpaged list, churn for cfg.duration, delete everything and wait
// (at most 3 minutes) for the pods to go.
func load(ctx context.Context, logger *slog.Logger, cfg config, cs kubernetes.Interface, tr *tracker,
	namespaces []string, deps []deploymentPlan, res *Result) error {
	ld := &loader{cs: cs, log: logger, limit: rate.NewLimiter(rate.Limit(cfg.qps), 1)}
	defer func() { res.CallErrors = ld.errors }()

	start := time.Now()
	logger.Info("creating", "label", cfg.label, "namespaces", len(namespaces), "deployments", len(deps), "pods", res.Pods)
	if err := ld.createAll(ctx, namespaces, deps); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if err := tr.waitFor(ctx, logger, "all pods Running", func(running, _ int) bool { return running >= res.Pods }); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	res.CreateSeconds = time.Since(start).Seconds()
	logger.Info("all pods Running", "label", cfg.label, "pods", res.Pods, "after", time.Since(start).Round(time.Millisecond))

	lstart := time.Now()
	if _, err := listPods(ctx, cs, "", 0); err != nil {
		res.UnpagedListError = err.Error()
		logger.Warn("unpaged list of all pods", "err", err)
	}
	res.UnpagedList = time.Since(lstart).Seconds()

	cstart := time.Now()
	n, err := ld.churn(ctx, deps, cfg.podRate, cstart.Add(cfg.duration))
	res.ChurnActions, res.ChurnSeconds = n, time.Since(cstart).Seconds()
	if err != nil {
		return fmt.Errorf("churn: %w", err)
	}
	logger.Info("churned", "label", cfg.label, "actions", n)

	dstart := time.Now()
	if err := ld.deleteAll(ctx, deps); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err = tr.waitFor(wctx, logger, "all pods gone", func(_, present int) bool { return present == 0 })
	res.DeleteSeconds = time.Since(dstart).Seconds()
	tr.mu.Lock()
	res.PodsLeft = len(tr.live)
	tr.mu.Unlock()
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}

// createKWOKNodes creates n nodes that KWOK (started with
// --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake) makes
// Ready and keeps alive; capacity as kplane's simulated nodes.
func createKWOKNodes(ctx context.Context, cs kubernetes.Interface, n int) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	for i := 1; i <= n; i++ {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        fmt.Sprintf("kwok-node-%d", i),
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": fmt.Sprintf("kwok-node-%d", i)},
			},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
				NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "fake", OperatingSystem: "linux", Architecture: "amd64"}},
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", node.Name, err)
		}
	}
	return nil
}

func waitNodes(ctx context.Context, logger *slog.Logger, cs kubernetes.Interface, n int) error {
	start := time.Now()
	var ready int
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			logger.Warn("list nodes", "err", err)
			return false, nil
		}
		ready = 0
		for _, node := range l.Items {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= n, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d nodes Ready: %w", ready, n, err)
	}
	logger.Info("nodes Ready", "ready", ready, "after", time.Since(start).Round(time.Millisecond))
	return nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
