// Package podgc is the pod garbage collector, as Kubernetes' pod-garbage-
// collector controller is: every check period it looks at all pods and
// force-deletes (grace period 0) those nobody else will remove: pods bound
// to a node that no longer exists (after a quarantine, and confirmed by a
// live read of the node), terminated pods beyond a threshold (oldest
// first), terminating pods never scheduled, and terminating pods on a
// NotReady node tainted node.kubernetes.io/out-of-service. A pod not yet
// Succeeded or Failed is first marked Failed (an orphan also gets the
// DisruptionTarget condition, reason DeletionByPodGC) so that whoever
// watches it sees why it went.
package podgc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/utils/clock"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// Defaults, as kube-controller-manager's.
const (
	// DefaultTerminatedPodThreshold is --terminated-pod-gc-threshold's
	// default.
	DefaultTerminatedPodThreshold = 12500
	// DefaultCheckPeriod is how often all pods are looked at.
	DefaultCheckPeriod = 20 * time.Second
	// DefaultQuarantine is how long a node must have been missing from
	// the cache before its pods are collected, so that a node being
	// (re)registered is not mistaken for a deleted one.
	DefaultQuarantine = 40 * time.Second
)

// OutOfServiceTaint marks a node an administrator has declared shut down:
// its terminating pods may be removed without waiting for its agent.
const OutOfServiceTaint = "node.kubernetes.io/out-of-service"

// Key is the one key of the controller's queue: a reconcile is a whole pass
// over all pods.
const Key = "podgc"

// PodClient reads and writes pods (*client.Client[*corev1.Pod]).
type PodClient interface {
	Get(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	UpdateStatus(ctx context.Context, obj *corev1.Pod) (*corev1.Pod, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// NodeGetter reads one node live (*client.Client[*corev1.Node]).
type NodeGetter interface {
	Get(ctx context.Context, namespace, name string) (*corev1.Node, error)
}

// Config wires a Controller.
type Config struct {
	Pods         PodClient
	Nodes        NodeGetter
	PodInformer  *client.Informer[*corev1.Pod]
	NodeInformer *client.Informer[*corev1.Node]
	// TerminatedPodThreshold is how many Succeeded or Failed pods may
	// exist before the oldest are deleted; 0 or less collects none of
	// them (as Kubernetes' --terminated-pod-gc-threshold=0).
	TerminatedPodThreshold int
	// CheckPeriod (default 20 s) and Quarantine (default 40 s) as
	// Kubernetes' gcCheckPeriod and quarantineTime.
	CheckPeriod, Quarantine time.Duration
	// Clock measures the quarantine and drives the period (default the
	// real clock).
	Clock  clock.WithTicker
	Logger *slog.Logger
	// TracerProvider records a span per pass (client.Trace); nil uses
	// the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the pod garbage collector.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue

	mu sync.Mutex
	// missing holds, per node name some pod is bound to but the cache
	// lacks, when that was first seen; a name is dropped once it is
	// checked live.
	missing map[string]time.Time
}

// New returns a controller. Config.TerminatedPodThreshold is taken as
// given (the caller applies the default).
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.CheckPeriod <= 0 {
		cfg.CheckPeriod = DefaultCheckPeriod
	}
	if cfg.Quarantine <= 0 {
		cfg.Quarantine = DefaultQuarantine
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Controller{cfg: cfg, log: log.With("controller", "podgc"), queue: client.NewQueue("podgc", time.Second, cfg.CheckPeriod), missing: map[string]time.Time{}}
}

// Run waits for the caches, then runs a pass at once and every check period
// until ctx ends. A failed pass is retried with back-off of at most a
// period.
func (c *Controller) Run(ctx context.Context) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.PodInformer, c.cfg.NodeInformer) {
		return
	}
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "podgc.reconcile"}
	go func() {
		tick := c.cfg.Clock.NewTicker(c.cfg.CheckPeriod)
		defer tick.Stop()
		c.queue.Add(Key)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C():
				c.queue.Add(Key)
			}
		}
	}()
	// RunWorkers shuts the queue down when ctx ends.
	client.RunWorkers(ctx, c.queue, 1, t.Reconciler(c.Reconcile), c.log)
}

// reason names why a pod is collected, in logs.
type reason string

const (
	terminated              reason = "PodGCReasonTerminated"
	terminatingOutOfService reason = "PodGCReasonTerminatingOutOfService"
	orphaned                reason = "PodGCReasonOrphaned"
	terminatingUnscheduled  reason = "PodGCReasonTerminatingUnscheduled"
)

// Reconcile makes one pass over the cached pods and nodes, in Kubernetes'
// order: terminated pods over the threshold, terminating pods on
// out-of-service nodes, pods of deleted nodes, unscheduled terminating
// pods. It returns the pass's errors joined (the pass is retried with
// back-off; the next period's pass comes anyway).
func (c *Controller) Reconcile(ctx context.Context, _ string) (client.Result, error) {
	pods := c.cfg.PodInformer.Store().List()
	nodes := map[string]*corev1.Node{}
	for _, n := range c.cfg.NodeInformer.Store().List() {
		nodes[n.GetMetadata().GetName()] = n
	}
	var errs []error
	if c.cfg.TerminatedPodThreshold > 0 {
		errs = append(errs, c.gcTerminated(ctx, pods))
	}
	errs = append(errs, c.gcOutOfService(ctx, pods, nodes))
	errs = append(errs, c.gcOrphaned(ctx, pods, nodes))
	errs = append(errs, c.gcUnscheduledTerminating(ctx, pods))
	return client.Result{}, errors.Join(errs...)
}

// gcTerminated deletes the terminated pods beyond the threshold: evicted
// ones first, then the oldest.
func (c *Controller) gcTerminated(ctx context.Context, pods []*corev1.Pod) error {
	var done []*corev1.Pod
	for _, p := range pods {
		if isTerminated(p) {
			done = append(done, p)
		}
	}
	n := len(done) - c.cfg.TerminatedPodThreshold
	if n <= 0 {
		return nil
	}
	c.log.InfoContext(ctx, "garbage collecting terminated pods", "count", n)
	sortForDeletion(done)
	return c.deleteAll(ctx, done[:n], terminated, nil)
}

// gcOutOfService deletes the terminating pods on NotReady nodes tainted
// out-of-service: their agent is known to be gone, so nobody else will
// finish the deletion.
func (c *Controller) gcOutOfService(ctx context.Context, pods []*corev1.Pod, nodes map[string]*corev1.Node) error {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.GetMetadata().GetDeletionTimestamp() == nil {
			continue
		}
		n, ok := nodes[p.GetSpec().GetNodeName()]
		if ok && !nodeReady(n) && hasTaint(n, OutOfServiceTaint) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil
	}
	sortForDeletion(out)
	return c.deleteAll(ctx, out, terminatingOutOfService, nil)
}

// gcOrphaned deletes the pods bound to nodes that have been missing from
// the cache for the quarantine and that a live read confirms are gone.
func (c *Controller) gcOrphaned(ctx context.Context, pods []*corev1.Pod, nodes map[string]*corev1.Node) error {
	now := c.cfg.Clock.Now()
	var due []string
	c.mu.Lock()
	for _, p := range pods {
		name := p.GetSpec().GetNodeName()
		if name == "" {
			continue
		}
		if _, ok := nodes[name]; ok {
			continue
		}
		if _, ok := c.missing[name]; !ok {
			c.missing[name] = now
		}
	}
	for name, since := range c.missing {
		if now.Sub(since) >= c.cfg.Quarantine {
			due = append(due, name)
			delete(c.missing, name)
		}
	}
	c.mu.Unlock()

	var errs []error
	deleted := map[string]bool{}
	for _, name := range due {
		if _, ok := c.cfg.NodeInformer.Store().Get(name); ok {
			continue
		}
		_, err := c.cfg.Nodes.Get(ctx, "", name)
		switch {
		case apierrors.IsNotFound(err):
			deleted[name] = true
		case err != nil:
			errs = append(errs, fmt.Errorf("podgc: get node %s: %w", name, err))
		}
	}
	if len(deleted) == 0 {
		return errors.Join(errs...)
	}
	var orphans []*corev1.Pod
	for _, p := range pods {
		if deleted[p.GetSpec().GetNodeName()] {
			orphans = append(orphans, p)
		}
	}
	cond := &corev1.PodCondition{Type: "DisruptionTarget", Status: "True", Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists"}
	errs = append(errs, c.deleteAll(ctx, orphans, orphaned, cond))
	return errors.Join(errs...)
}

// gcUnscheduledTerminating deletes terminating pods bound to no node: no
// node agent will ever confirm their end.
func (c *Controller) gcUnscheduledTerminating(ctx context.Context, pods []*corev1.Pod) error {
	var un []*corev1.Pod
	for _, p := range pods {
		if p.GetMetadata().GetDeletionTimestamp() != nil && p.GetSpec().GetNodeName() == "" {
			un = append(un, p)
		}
	}
	return c.deleteAll(ctx, un, terminatingUnscheduled, nil)
}

// deleteAll marks each pod Failed (with cond, if set) unless it already
// ended, then deletes it with grace period 0. A pod already gone is no
// error.
func (c *Controller) deleteAll(ctx context.Context, pods []*corev1.Pod, why reason, cond *corev1.PodCondition) error {
	var errs []error
	for _, p := range pods {
		if err := c.markFailedAndDelete(ctx, p, cond); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("podgc: %s/%s (%s): %w", p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), why, err))
			continue
		}
		c.log.InfoContext(ctx, "force deleted pod", "pod", p.GetMetadata().GetNamespace()+"/"+p.GetMetadata().GetName(), "reason", string(why))
	}
	return errors.Join(errs...)
}

func (c *Controller) markFailedAndDelete(ctx context.Context, p *corev1.Pod, cond *corev1.PodCondition) error {
	if err := c.markFailed(ctx, p, cond); err != nil {
		return fmt.Errorf("mark failed: %w", err)
	}
	zero := int64(0)
	if err := c.cfg.Pods.Delete(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}

// markAttempts bounds the status writes markFailed makes.
const markAttempts = 3

// markFailed sets the phase of p (unless it already ended) to Failed, with
// cond if set. Kubernetes sends a patch, which a concurrent status write
// does not make fail; the API service takes whole-status updates at a
// resourceVersion, so on a conflict the pod is read again and the change
// made again on what it holds now (the same pod: a pod recreated under the
// name is left alone, as Kubernetes' patch carries the uid).
func (c *Controller) markFailed(ctx context.Context, p *corev1.Pod, cond *corev1.PodCondition) error {
	cur := p
	for attempt := 1; ; attempt++ {
		if phase := cur.GetStatus().GetPhase(); phase == "Succeeded" || phase == "Failed" {
			return nil
		}
		u := proto.Clone(cur).(*corev1.Pod)
		if u.Status == nil {
			u.Status = &corev1.PodStatus{}
		}
		u.Status.Phase = "Failed"
		if cond != nil {
			setCondition(u.Status, cond, c.cfg.Clock.Now())
		}
		_, err := c.cfg.Pods.UpdateStatus(ctx, u)
		if err == nil || !apierrors.IsConflict(err) || attempt == markAttempts {
			return err
		}
		fresh, gerr := c.cfg.Pods.Get(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName())
		if gerr != nil {
			return gerr
		}
		if fresh.GetMetadata().GetUid() != p.GetMetadata().GetUid() {
			return err
		}
		cur = fresh
	}
}

// setCondition puts cond in st as Kubernetes' UpdatePodCondition does: the
// transition time moves only when the status changes.
func setCondition(st *corev1.PodStatus, cond *corev1.PodCondition, now time.Time) {
	c := proto.Clone(cond).(*corev1.PodCondition)
	c.LastTransitionTime = timestamppb.New(now.Truncate(time.Second))
	for i, old := range st.Conditions {
		if old.GetType() != c.GetType() {
			continue
		}
		if old.GetStatus() == c.GetStatus() && old.GetLastTransitionTime() != nil {
			c.LastTransitionTime = old.GetLastTransitionTime()
		}
		st.Conditions[i] = c
		return
	}
	st.Conditions = append(st.Conditions, c)
}

// isTerminated: the phase is neither Pending, Running nor Unknown (an empty
// phase counts as terminated, as in Kubernetes).
func isTerminated(p *corev1.Pod) bool {
	switch p.GetStatus().GetPhase() {
	case "Pending", "Running", "Unknown":
		return false
	}
	return true
}

// sortForDeletion orders pods as Kubernetes does: evicted pods first, then
// by creation time, then by name.
func sortForDeletion(pods []*corev1.Pod) {
	evicted := func(p *corev1.Pod) bool {
		return p.GetStatus().GetPhase() == "Failed" && p.GetStatus().GetReason() == "Evicted"
	}
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int {
		if ea, eb := evicted(a), evicted(b); ea != eb {
			if ea {
				return -1
			}
			return 1
		}
		ta, tb := a.GetMetadata().GetCreationTimestamp().AsTime(), b.GetMetadata().GetCreationTimestamp().AsTime()
		if c := ta.Compare(tb); c != 0 {
			return c
		}
		return cmp.Compare(a.GetMetadata().GetName(), b.GetMetadata().GetName())
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c.GetStatus() == "True"
		}
	}
	return false
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.GetSpec().GetTaints() {
		if t.GetKey() == key {
			return true
		}
	}
	return false
}
