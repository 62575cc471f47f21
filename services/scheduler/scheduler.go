// Package scheduler is kplane's scheduler: it watches pods with no
// spec.nodeName and binds each to the best node, talking only to the API
// service. Its shape is kube-scheduler's: informers for pods and nodes feed
// a scheduling queue and a node cache; one scheduling goroutine pops a pod,
// runs the framework's filters and scores over a snapshot of the cache,
// assumes the pod on the chosen node and hands the bind to a bounded pool
// of binding goroutines (the binding cycle), so the next pod is scheduled
// while the previous bind is in flight. With leader election, replicas
// keep warm caches and only the Lease holder schedules.
package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/proto/apierrors"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler/cache"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/plugins"
	"github.com/kplane/kplane/services/scheduler/plugins/interpodaffinity"
	"github.com/kplane/kplane/services/scheduler/queue"
)

// tracerName names the scheduler's spans: "schedule" per attempt (with
// "filter" and "score" inside) and "bind", linked to it, per binding.
const tracerName = "github.com/kplane/kplane/services/scheduler"

// DefaultSchedulerName is the spec.schedulerName this scheduler serves by
// default (pods with an empty schedulerName are served too).
const DefaultSchedulerName = "default-scheduler"

// LeaderElection configures leader election; nil in Config means this
// replica schedules without a lease.
type LeaderElection struct {
	Namespace, Name string // default kube-system / kube-scheduler
	Identity        string // default hostname_random
	LeaseDuration   time.Duration
	RenewDeadline   time.Duration
	RetryPeriod     time.Duration
}

// Config configures a Scheduler.
type Config struct {
	// Conn reaches the API service with the scheduler's credentials.
	Conn grpc.ClientConnInterface
	// SchedulerName is the spec.schedulerName served (default DefaultSchedulerName).
	SchedulerName string
	// Profile is the framework profile; empty Plugins means the defaults.
	Profile framework.Config
	// Registry is the plugins available (default plugins.Registry()).
	Registry framework.Registry
	Queue    queue.Config
	// BindParallelism bounds the binds in flight (default 256): binds wait
	// on the store's commits, not on CPU, so many may be in flight.
	BindParallelism int
	// ListPageSize pages the informers' lists (default 500).
	ListPageSize   int64
	LeaderElection *LeaderElection
	Logger         *slog.Logger
	// OnAttempt, if set, is called after every scheduling attempt with its
	// duration and result ("scheduled", "unschedulable", "error").
	OnAttempt func(pod string, d time.Duration, result string)
	// OnBound, if set, is called after every successful bind.
	OnBound func(pod, node string)
	// TracerProvider and MeterProvider record the scheduling spans (queue
	// wait, schedule, filter, score, bind) and metrics; nil uses the
	// global ones.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// Stats count what the scheduler did.
type Stats struct {
	Attempts, Scheduled, Unschedulable, Errors, Bound, BindFailures int64
	Events                                                          client.RecorderStats // the Scheduled/FailedScheduling events
}

// Scheduler is one scheduler replica.
type Scheduler struct {
	cfg      Config
	log      *slog.Logger
	identity string
	fwk      *framework.Framework
	cache    *cache.Cache
	snapshot *cache.Snapshot
	queue    *queue.Queue
	pods     *client.Client[*corev1.Pod]
	recorder *client.Recorder
	podInf   *client.Informer[*corev1.Pod]
	nodeInf  *client.Informer[*corev1.Node]
	// claimInf and volumeInf only move pods waiting for their claims, as
	// kube-scheduler's PersistentVolumeClaim and PersistentVolume events.
	claimInf  *client.Informer[*corev1.PersistentVolumeClaim]
	volumeInf *client.Informer[*corev1.PersistentVolume]
	// nsInf gives inter-pod affinity's namespaceSelector the namespaces'
	// labels (the framework.NamespaceLister this Handle implements).
	nsInf   *client.Informer[*corev1.Namespace]
	elector *client.LeaderElector
	tracer  trace.Tracer
	metrics *metrics

	bindSem   chan struct{}
	reportSem chan struct{}
	wg        sync.WaitGroup // binding and reporting goroutines

	reportedMu sync.Mutex
	reported   map[string]string // pod key → last FailedScheduling message

	nominated *nominator // pods preemption made room for

	led atomic.Bool

	attempts, scheduled, unschedulable, errs, bound, bindFailures atomic.Int64
}

var (
	_ framework.Handle          = (*Scheduler)(nil)
	_ framework.NamespaceLister = (*Scheduler)(nil)
)

// New builds a scheduler; Run starts it.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Conn == nil {
		return nil, errors.New("scheduler: Config.Conn is required")
	}
	if cfg.SchedulerName == "" {
		cfg.SchedulerName = DefaultSchedulerName
	}
	if cfg.Registry == nil {
		cfg.Registry = plugins.Registry()
	}
	if len(cfg.Profile.Plugins) == 0 {
		cfg.Profile.Plugins = plugins.DefaultPlugins()
	}
	if cfg.BindParallelism <= 0 {
		cfg.BindParallelism = 256
	}
	if cfg.ListPageSize <= 0 {
		cfg.ListPageSize = 500
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Scheduler{
		cfg:       cfg,
		log:       log.With("component", "scheduler"),
		cache:     cache.New(),
		snapshot:  cache.NewSnapshot(),
		queue:     queue.New(cfg.Queue),
		bindSem:   make(chan struct{}, cfg.BindParallelism),
		reportSem: make(chan struct{}, 8),
		reported:  map[string]string{},
		nominated: newNominator(),
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	s.cfg = cfg
	s.tracer = cfg.TracerProvider.Tracer(tracerName)
	var err error
	if s.metrics, err = s.newMetrics(cfg.MeterProvider); err != nil {
		return nil, err
	}
	if s.pods, err = client.New[*corev1.Pod](cfg.Conn); err != nil {
		return nil, err
	}
	events, err := client.New[*corev1.Event](cfg.Conn)
	if err != nil {
		return nil, err
	}
	nodes, err := client.New[*corev1.Node](cfg.Conn)
	if err != nil {
		return nil, err
	}
	s.podInf = client.NewInformer(client.ListWatch(s.pods, "", "", "", cfg.ListPageSize), client.InformerOptions[*corev1.Pod]{Logger: log})
	s.nodeInf = client.NewInformer(client.ListWatch(nodes, "", "", "", cfg.ListPageSize), client.InformerOptions[*corev1.Node]{Logger: log})
	s.podInf.AddEventHandler(client.Handler[*corev1.Pod]{OnAdd: s.onPodAdd, OnUpdate: s.onPodUpdate, OnDelete: s.onPodDelete})
	s.nodeInf.AddEventHandler(client.Handler[*corev1.Node]{OnAdd: s.onNodeAdd, OnUpdate: s.onNodeUpdate, OnDelete: s.onNodeDelete})
	claims, err := client.New[*corev1.PersistentVolumeClaim](cfg.Conn)
	if err != nil {
		return nil, err
	}
	volumes, err := client.New[*corev1.PersistentVolume](cfg.Conn)
	if err != nil {
		return nil, err
	}
	s.claimInf = client.NewInformer(client.ListWatch(claims, "", "", "", cfg.ListPageSize), client.InformerOptions[*corev1.PersistentVolumeClaim]{Logger: log})
	s.volumeInf = client.NewInformer(client.ListWatch(volumes, "", "", "", cfg.ListPageSize), client.InformerOptions[*corev1.PersistentVolume]{Logger: log})
	s.claimInf.AddEventHandler(client.Handler[*corev1.PersistentVolumeClaim]{
		OnAdd:    func(*corev1.PersistentVolumeClaim) { s.queue.MoveAllToActiveOrBackoff(EventClaimChange) },
		OnUpdate: func(_, _ *corev1.PersistentVolumeClaim) { s.queue.MoveAllToActiveOrBackoff(EventClaimChange) },
	})
	s.volumeInf.AddEventHandler(client.Handler[*corev1.PersistentVolume]{
		OnAdd:    func(*corev1.PersistentVolume) { s.queue.MoveAllToActiveOrBackoff(EventVolumeChange) },
		OnUpdate: func(_, _ *corev1.PersistentVolume) { s.queue.MoveAllToActiveOrBackoff(EventVolumeChange) },
	})
	namespaces, err := client.New[*corev1.Namespace](cfg.Conn)
	if err != nil {
		return nil, err
	}
	s.nsInf = client.NewInformer(client.ListWatch(namespaces, "", "", "", cfg.ListPageSize), client.InformerOptions[*corev1.Namespace]{Logger: log})
	s.nsInf.AddEventHandler(client.Handler[*corev1.Namespace]{
		OnAdd: func(*corev1.Namespace) { s.queue.MoveRejectedBy(EventNamespaceChange, interpodaffinity.Name) },
		OnUpdate: func(old, ns *corev1.Namespace) {
			if !maps.Equal(old.GetMetadata().GetLabels(), ns.GetMetadata().GetLabels()) {
				s.queue.MoveRejectedBy(EventNamespaceChange, interpodaffinity.Name)
			}
		},
	})

	s.identity = "scheduler"
	if le := cfg.LeaderElection; le != nil {
		s.identity = le.Identity
		if s.identity == "" {
			host, _ := os.Hostname()
			var b [4]byte
			_, _ = rand.Read(b[:])
			s.identity = host + "_" + hex.EncodeToString(b[:])
		}
		ns, name := le.Namespace, le.Name
		if ns == "" {
			ns = "kube-system"
		}
		if name == "" {
			name = "kube-scheduler"
		}
		leases, err := client.New[*coordv1.Lease](cfg.Conn)
		if err != nil {
			return nil, err
		}
		s.elector, err = client.NewLeaderElector(client.LeaderElectionConfig{
			Leases: leases, Namespace: ns, Name: name, Identity: s.identity,
			LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
			ReleaseOnCancel: true, Logger: log,
			Callbacks: client.LeaderCallbacks{OnStartedLeading: func(lctx context.Context) {
				s.led.Store(true)
				s.log.Info("leading: scheduling")
				s.loop(lctx)
			}},
		})
		if err != nil {
			return nil, err
		}
	}
	s.log = s.log.With("identity", s.identity)
	// One Scheduled event per bind: enough writers to keep up with the
	// binds (a quarter as many as binds in flight).
	s.recorder = client.NewRecorder(client.RecorderConfig{Sink: events, Component: cfg.SchedulerName, Host: s.identity, Logger: log,
		Writers: max(16, cfg.BindParallelism/4)})
	// Last: plugins may use the recorder through the Handle.
	if s.fwk, err = framework.New(cfg.Registry, cfg.Profile, s); err != nil {
		return nil, err
	}
	return s, nil
}

// RunFilterPlugins implements framework.Handle.
func (s *Scheduler) RunFilterPlugins(ctx context.Context, state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	return s.fwk.RunFilter(ctx, state, pod, node)
}

// NamespaceLabels implements framework.NamespaceLister.
func (s *Scheduler) NamespaceLabels(name string) map[string]string {
	ns, ok := s.nsInf.Store().Get(name)
	if !ok {
		return nil
	}
	return ns.GetMetadata().GetLabels()
}

// NamespacesMatching implements framework.NamespaceLister.
func (s *Scheduler) NamespacesMatching(sel labels.Selector) []string {
	var out []string
	for _, ns := range s.nsInf.Store().List() {
		if sel.Matches(labels.Set(ns.GetMetadata().GetLabels())) {
			out = append(out, ns.GetMetadata().GetName())
		}
	}
	return out
}

// EventRecorder implements framework.Handle.
func (s *Scheduler) EventRecorder() *client.Recorder { return s.recorder }

// Snapshot implements framework.Handle.
func (s *Scheduler) Snapshot() framework.NodeLister { return s.snapshot }

// ClientConn implements framework.Handle.
func (s *Scheduler) ClientConn() grpc.ClientConnInterface { return s.cfg.Conn }

// Identity is this replica's leader-election identity.
func (s *Scheduler) Identity() string { return s.identity }

// IsLeader reports whether this replica schedules now (always true
// without leader election once Run has synced).
func (s *Scheduler) IsLeader() bool { return s.elector == nil || s.elector.IsLeader() }

// Stats returns the counters.
func (s *Scheduler) Stats() Stats {
	return Stats{Attempts: s.attempts.Load(), Scheduled: s.scheduled.Load(), Unschedulable: s.unschedulable.Load(),
		Errors: s.errs.Load(), Bound: s.bound.Load(), BindFailures: s.bindFailures.Load(), Events: s.recorder.Stats()}
}

// FlushEvents waits until the events recorded so far are written (or
// dropped), or ctx ends; Run must be running.
func (s *Scheduler) FlushEvents(ctx context.Context) error { return s.recorder.Flush(ctx) }

// Run starts the informers, waits for their caches, then schedules (with
// leader election: while it holds the lease). It returns when ctx ends or
// — with leader election — when this replica stops leading, as
// kube-scheduler exits then; binds in flight are waited for.
func (s *Scheduler) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	bg.Add(7)
	go func() { defer bg.Done(); s.recorder.Run(ctx) }()
	go func() { defer bg.Done(); _ = s.podInf.Run(ctx) }()
	go func() { defer bg.Done(); _ = s.nodeInf.Run(ctx) }()
	go func() { defer bg.Done(); _ = s.claimInf.Run(ctx) }()
	go func() { defer bg.Done(); _ = s.volumeInf.Run(ctx) }()
	go func() { defer bg.Done(); _ = s.nsInf.Run(ctx) }()
	go func() { defer bg.Done(); s.queue.Run(ctx) }()
	if !client.WaitForCacheSync(ctx, s.podInf, s.nodeInf, s.claimInf, s.volumeInf, s.nsInf) {
		return ctx.Err()
	}
	s.log.Info("caches synced", "nodes", s.nodeInf.Store().Len(), "pods", s.podInf.Store().Len())
	if s.elector == nil {
		s.loop(ctx)
		return ctx.Err()
	}
	s.elector.Run(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if s.led.Load() {
		return errors.New("scheduler: lost the leader lease")
	}
	return ctx.Err()
}

// loop schedules pods one at a time until ctx ends, then waits for the
// binds it started.
func (s *Scheduler) loop(ctx context.Context) {
	defer s.wg.Wait()
	for {
		pi, cycle, err := s.queue.Pop(ctx)
		if err != nil {
			return
		}
		s.scheduleOne(ctx, pi, cycle)
	}
}

// responsible reports whether this scheduler serves pod.
func (s *Scheduler) responsible(pod *corev1.Pod) bool {
	n := pod.GetSpec().GetSchedulerName()
	return n == "" || n == s.cfg.SchedulerName
}

func terminal(pod *corev1.Pod) bool {
	p := pod.GetStatus().GetPhase()
	return p == "Succeeded" || p == "Failed"
}

// scheduleOne is one scheduling cycle for pi.
func (s *Scheduler) scheduleOne(ctx context.Context, pi *framework.PodInfo, cycle int64) {
	loopCtx := ctx
	// The pod may have been bound, deleted or replaced while queued.
	cur, ok := s.podInf.Store().Get(pi.Key)
	if !ok || cur.GetMetadata().GetUid() != pi.UID || cur.GetSpec().GetNodeName() != "" || s.cache.IsAssumed(pi.Key) {
		s.queue.Done(pi.Key)
		return
	}
	start := time.Now()
	s.attempts.Add(1)
	// The pod's trace continues here (see internal/telemetry): the time it
	// waited in the queue, then this attempt.
	attrs := trace.WithAttributes(attribute.String("k8s.pod", pi.Key))
	if !pi.Timestamp.IsZero() {
		_, qspan := telemetry.StartFromObject(ctx, s.tracer, "queue.wait", cur.GetMetadata().GetAnnotations(), attrs,
			trace.WithTimestamp(pi.Timestamp), trace.WithAttributes(attribute.Int("attempts", pi.Attempts)))
		qspan.End(trace.WithTimestamp(start))
	}
	ctx, span := telemetry.StartFromObject(ctx, s.tracer, "schedule", cur.GetMetadata().GetAnnotations(), attrs)
	defer span.End()
	s.cache.UpdateSnapshot(s.snapshot)
	state := framework.NewCycleState()
	state.Nominated = s.nominated.forPod(pi)
	res, err := s.fwk.Schedule(ctx, state, pi, s.snapshot.List())
	if err != nil {
		if ctx.Err() != nil {
			s.queue.AddBackoff(pi)
			return
		}
		var fit *framework.FitError
		if errors.As(err, &fit) {
			switch node, st := s.fwk.RunPostFilter(ctx, state, pi, fit.Statuses); {
			case st.IsSuccess():
				s.nominated.set(pi, node)
			case st.Code() == framework.Unschedulable:
				// Preemption found no node: the nomination, if any, is
				// cleared (an ineligible pod's, UnschedulableAndUnresolvable,
				// is kept: its victims are on their way out).
				s.nominated.remove(pi.Key)
			}
			pi.UnschedulablePlugins = fit.UnschedulablePlugins()
			s.unschedulable.Add(1)
			s.queue.AddUnschedulable(pi, cycle)
			s.observe(pi, start, "unschedulable")
			s.log.Debug("pod unschedulable", "pod", pi.Key, "reason", fit.Error())
			s.reportFailure(pi, "Unschedulable", fit.Error())
			return
		}
		s.errs.Add(1)
		s.queue.AddBackoff(pi)
		s.observe(pi, start, "error")
		s.log.Warn("scheduling attempt failed", "pod", pi.Key, "err", err)
		s.reportFailure(pi, "SchedulerError", err.Error())
		return
	}
	// Assume: the next cycles see the pod on its node at once.
	if err := s.cache.AssumePod(pi, res.Node); err != nil {
		s.errs.Add(1)
		s.queue.AddBackoff(pi)
		s.observe(pi, start, "error")
		return
	}
	// Placed: the cache counts it now, wherever it was nominated.
	s.nominated.remove(pi.Key)
	if st := s.fwk.RunReserve(ctx, state, pi, res.Node); !st.IsSuccess() {
		s.cache.ForgetPod(pi.Key)
		s.errs.Add(1)
		s.queue.AddBackoff(pi)
		s.observe(pi, start, "error")
		s.reportFailure(pi, "SchedulerError", st.Message())
		return
	}
	s.queue.Done(pi.Key)
	s.scheduled.Add(1)
	s.observe(pi, start, "scheduled")

	// The binding cycle, asynchronously, at most BindParallelism at once.
	select {
	case s.bindSem <- struct{}{}:
	case <-ctx.Done():
		s.fwk.RunUnreserve(ctx, state, pi, res.Node)
		s.cache.ForgetPod(pi.Key)
		return
	}
	span.SetAttributes(attribute.String("k8s.node.name", res.Node))
	bindCtx := trace.ContextWithSpanContext(loopCtx, span.SpanContext())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.bindSem }()
		ctx, span := s.tracer.Start(bindCtx, "bind", trace.WithAttributes(attribute.String("k8s.pod", pi.Key), attribute.String("k8s.node.name", res.Node)))
		defer span.End()
		s.bind(ctx, state, pi, res.Node)
	}()
}

func (s *Scheduler) observe(pi *framework.PodInfo, start time.Time, result string) {
	s.metrics.observe(time.Since(start), result)
	if s.cfg.OnAttempt != nil {
		s.cfg.OnAttempt(pi.Key, time.Since(start), result)
	}
}

// bind runs the bind plugins; on failure the assumption is undone and the
// pod retried, unless it is bound already (Conflict: another replica or
// an earlier attempt bound it) or gone.
func (s *Scheduler) bind(ctx context.Context, state *framework.CycleState, pi *framework.PodInfo, node string) {
	st := s.fwk.RunBind(ctx, state, pi, node)
	if st.IsSuccess() {
		s.bound.Add(1)
		s.clearReported(pi.Key)
		s.recorder.Eventf(pi.Pod, client.EventNormal, "Scheduled", "Successfully assigned %s to %s", pi.Key, node)
		if s.cfg.OnBound != nil {
			s.cfg.OnBound(pi.Key, node)
		}
		return
	}
	s.bindFailures.Add(1)
	s.fwk.RunUnreserve(context.WithoutCancel(ctx), state, pi, node)
	s.cache.ForgetPod(pi.Key)
	err := st.AsError()
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		s.log.Info("bind refused; not retrying", "pod", pi.Key, "node", node, "err", err)
		return
	}
	if ctx.Err() != nil {
		return
	}
	s.log.Warn("bind failed; retrying", "pod", pi.Key, "node", node, "err", err)
	s.queue.AddBackoff(pi)
	s.reportFailure(pi, "SchedulerError", fmt.Sprintf("Binding rejected: %v", err))
}

func (s *Scheduler) clearReported(key string) {
	s.reportedMu.Lock()
	delete(s.reported, key)
	s.reportedMu.Unlock()
}

// reportFailure records, asynchronously, a FailedScheduling Warning event
// (repeats aggregated by the recorder) and the PodScheduled=False
// condition, as kube-scheduler does. The condition is not written again
// while the message stays the same.
func (s *Scheduler) reportFailure(pi *framework.PodInfo, reason, msg string) {
	s.recorder.Eventf(pi.Pod, client.EventWarning, "FailedScheduling", "%s", msg)
	s.reportedMu.Lock()
	if s.reported[pi.Key] == msg {
		s.reportedMu.Unlock()
		return
	}
	s.reported[pi.Key] = msg
	s.reportedMu.Unlock()
	s.reportSem <- struct{}{}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.reportSem }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.setCondition(ctx, pi, reason, msg); err != nil {
			s.log.Warn("setting PodScheduled=False failed", "pod", pi.Key, "err", err)
		}
	}()
}
