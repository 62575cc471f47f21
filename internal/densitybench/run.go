// This file holds one density run: create the pods, watch them reach
// Running, and gather the startup times and the processes' resource use into
// a Result.

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
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
	kubeconfig string
	label      string
	namespace  string
	nodes      int
	kwokNodes  int
	replicas   int
	// workload is what is measured (workload.go); maxUnavailable is the
	// DaemonSet's rolling-update setting.
	workload       string
	maxUnavailable string
	procs          string
	kplaneStat     string
	out            string
	timeout        time.Duration
}

// Result is one run's figures. Durations are in seconds.
type Result struct {
	Label string `json:"label"`
	// Workload is what was measured: deployment, statefulset, daemonset
	// or jobs (empty in files written before workloads existed: deployment).
	Workload string    `json:"workload,omitempty"`
	Date     time.Time `json:"date"`
	Nodes    int       `json:"nodes"`
	Replicas int       `json:"replicas"`
	// Load is /proc/loadavg's 1, 5 and 15 minute averages at the end.
	Load string `json:"load"`
	// CreateSeconds: from the Deployment's create call until the last pod
	// was first seen; RunningSeconds: until the last pod was seen Running.
	CreateSeconds  float64 `json:"createSeconds"`
	RunningSeconds float64 `json:"runningSeconds"`
	// DoneSeconds: from the timed action until the workload's done
	// condition held (deployment: all Running; statefulset: all Ready;
	// daemonset: the rolling update's pods all updated and available;
	// jobs: all Complete).
	DoneSeconds float64 `json:"doneSeconds,omitempty"`
	CreateRate  float64 `json:"createRate"` // pods/s
	Throughput  float64 `json:"throughput"` // pods/s to all Running
	// Startup is first seen (the watch's ADDED) -> seen Running.
	Startup Summary `json:"startup"`
	// StartupFromCreation is creationTimestamp -> seen Running; the
	// timestamp has a resolution of one second (it is truncated), so this
	// overstates by up to 1 s.
	StartupFromCreation Summary `json:"startupFromCreation"`
	// Scheduling is first seen -> seen bound to a node.
	Scheduling Summary `json:"scheduling"`
	// Starting is seen bound -> seen Running: the node agent's (kubelet's)
	// part, plus its status write and the watch back to the client.
	Starting Summary `json:"starting"`
	// Events is how many Event objects the namespace holds at the end (the
	// scheduler's, the controllers' and the node agent's): each is a store
	// write of its own.
	Events int `json:"events"`
	// Procs are the measured processes: peak RSS over the process's life,
	// CPU seconds (user+sys) during the run and over the process's life.
	Procs []ProcUsage `json:"procs"`
}

// podTimes is what the watch saw of one pod.
type podTimes struct {
	created   time.Time // creationTimestamp
	seen      time.Time
	scheduled time.Time
	running   time.Time
}

// tracker records, from informer events, when each pod was first seen,
// bound and Running.
type tracker struct {
	mu      sync.Mutex
	pods    map[string]*podTimes
	running int
	changed chan struct{} // closed and replaced on each new Running pod
}

func newTracker() *tracker {
	return &tracker{pods: make(map[string]*podTimes), changed: make(chan struct{})}
}

func (t *tracker) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	pt := t.pods[string(pod.UID)]
	if pt == nil {
		pt = &podTimes{created: pod.CreationTimestamp.Time, seen: now}
		t.pods[string(pod.UID)] = pt
	}
	if pt.scheduled.IsZero() && pod.Spec.NodeName != "" {
		pt.scheduled = now
	}
	// A Job's pod may be first seen Succeeded: it ran.
	if pt.running.IsZero() && (pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodSucceeded) {
		pt.running = now
		if pt.scheduled.IsZero() {
			pt.scheduled = now
		}
		t.running++
		close(t.changed)
		t.changed = make(chan struct{})
	}
}

// waitRunning waits until n pods have been seen Running.
func (t *tracker) waitRunning(ctx context.Context, logger *slog.Logger, n int) error {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		t.mu.Lock()
		running, seen, ch := t.running, len(t.pods), t.changed
		t.mu.Unlock()
		if running >= n {
			return nil
		}
		select {
		case <-ch:
		case <-tick.C:
			logger.Info("progress", "seen", seen, "running", running, "want", n)
		case <-ctx.Done():
			return fmt.Errorf("%d of %d pods Running (%d seen): %w", running, n, seen, ctx.Err())
		}
	}
}

func run(ctx context.Context, logger *slog.Logger, cfg config) (*Result, error) {
	if cfg.kubeconfig == "" {
		return nil, fmt.Errorf("%w: -kubeconfig is required", errUsage)
	}
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
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	// The measuring client must not be the bottleneck.
	rc.QPS, rc.Burst = 1000, 2000
	rc.UserAgent = "densitybench"
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
	if err := ensureNamespace(ctx, logger, cs, cfg.namespace); err != nil {
		return nil, err
	}

	tr := newTracker()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithNamespace(cfg.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=density" }))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    tr.observe,
		UpdateFunc: func(_, obj any) { tr.observe(obj) },
	}); err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	infCtx, stopInf := context.WithCancel(ctx)
	defer stopInf()
	factory.Start(infCtx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("pod informer did not sync: %w", ctx.Err())
	}

	w, err := newWorkload(logger, cs, cfg, tr)
	if err != nil {
		return nil, err
	}
	if err := w.prepare(infCtx); err != nil {
		return nil, err
	}
	before := sampleProcs(logger, procs)
	start := time.Now()
	if err := w.act(infCtx); err != nil {
		return nil, err
	}
	logger.Info("started", "label", cfg.label, "workload", cfg.workload, "replicas", cfg.replicas, "nodes", cfg.nodes)
	if err := w.done(infCtx); err != nil {
		return nil, err
	}
	done := time.Now()
	after := sampleProcs(logger, procs)
	stopInf()

	res := &Result{Label: cfg.label, Workload: cfg.workload, Date: start.UTC(), Nodes: cfg.nodes, Replicas: cfg.replicas,
		Load: loadavg(), DoneSeconds: done.Sub(start).Seconds()}
	if cfg.workload == workloadDaemonSet {
		res.Replicas = cfg.nodes
	}
	tr.mu.Lock()
	var startup, fromCreation, scheduling, starting []time.Duration
	var lastSeen, lastRunning time.Time
	for _, pt := range tr.pods {
		// Only pods of the timed part: a DaemonSet's first rollout is not.
		if pt.running.IsZero() || pt.seen.Before(start) {
			continue
		}
		startup = append(startup, pt.running.Sub(pt.seen))
		fromCreation = append(fromCreation, pt.running.Sub(pt.created))
		scheduling = append(scheduling, pt.scheduled.Sub(pt.seen))
		starting = append(starting, pt.running.Sub(pt.scheduled))
		if pt.seen.After(lastSeen) {
			lastSeen = pt.seen
		}
		if pt.running.After(lastRunning) {
			lastRunning = pt.running
		}
	}
	tr.mu.Unlock()
	n := float64(len(startup))
	res.CreateSeconds = lastSeen.Sub(start).Seconds()
	res.RunningSeconds = lastRunning.Sub(start).Seconds()
	if n > 0 {
		res.CreateRate = n / res.CreateSeconds
		res.Throughput = n / res.RunningSeconds
	}
	res.Startup = summarize(startup)
	res.StartupFromCreation = summarize(fromCreation)
	res.Scheduling = summarize(scheduling)
	res.Starting = summarize(starting)
	res.Procs = usage(procs, before, after)
	if n, err := countEvents(ctx, cs, cfg.namespace); err != nil {
		logger.Warn("list events", "err", err)
	} else {
		res.Events = n
	}
	return res, nil
}

// countEvents counts the namespace's Event objects, listed in pages (at
// 3,000 pods one list is larger than a gRPC message may be).
func countEvents(ctx context.Context, cs kubernetes.Interface, ns string) (int, error) {
	n, cont := 0, ""
	for {
		l, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return n, err
		}
		n += len(l.Items)
		if cont = l.Continue; cont == "" {
			return n, nil
		}
	}
}

func deployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "density"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "density", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
					// KWOK's nodes carry its NoSchedule taint; kplane's do not.
					Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				},
			},
		},
	}
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
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
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

// ensureNamespace creates the namespace and its default ServiceAccount (on
// Kubernetes, the ServiceAccount admission plugin refuses pods until it
// exists; creating it here keeps the service account controller's delay
// out of the measurement). A cluster without ServiceAccounts is told in the
// log and the run goes on.
func ensureNamespace(ctx context.Context, logger *slog.Logger, cs kubernetes.Interface, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		logger.Warn("default ServiceAccount not created; going on", "namespace", ns, "err", err)
	}
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
