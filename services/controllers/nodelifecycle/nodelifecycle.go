// Package nodelifecycle is the node lifecycle controller: a node whose
// Lease in kube-node-lease has not been renewed for GracePeriod gets
// Ready=Unknown (reason NodeStatusUnknown) and the
// node.kubernetes.io/unreachable:NoExecute taint. When the Lease is renewed
// again the taint is removed (the node agent sets Ready itself).
//
// It is also Kubernetes' taint eviction controller: every NoExecute taint
// of a node (the unreachable one, or one a user added) evicts the node's
// pods that do not tolerate it at once, and those that do once the
// shortest tolerationSeconds of the tolerations they use has run out,
// counted from when the earliest of the taints was added (its timeAdded,
// or when this controller first saw it); a toleration without
// tolerationSeconds tolerates forever. A pod without a toleration of the
// unreachable or not-ready taint tolerates it for DefaultTolerationSeconds,
// as Kubernetes' DefaultTolerationSeconds admission would have set. An
// evicted pod gets the DisruptionTarget condition (DeletionByTaintManager)
// and is deleted, as Kubernetes does it: directly, not through
// PodDisruptionBudgets; its controller replaces it elsewhere.
//
// Renewals are judged by this controller's clock: the time it observed the
// Lease change, not the renewTime written in it, so clock skew between
// nodes and controller does not matter, and a freshly started controller
// gives every node a full grace period.
package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	k8scorev1 "k8s.io/api/core/v1"

	"github.com/kplane/kplane/proto/apierrors"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// Well-known names.
const (
	LeaseNamespace = "kube-node-lease"
	UnreachableKey = "node.kubernetes.io/unreachable"
	NotReadyKey    = "node.kubernetes.io/not-ready"
)

// NodeClient writes nodes.
type NodeClient interface {
	Get(ctx context.Context, namespace, name string) (*corev1.Node, error)
	Update(ctx context.Context, obj *corev1.Node) (*corev1.Node, error)
	UpdateStatus(ctx context.Context, obj *corev1.Node) (*corev1.Node, error)
}

// PodClient marks and deletes pods.
type PodClient interface {
	UpdateStatus(ctx context.Context, obj *corev1.Pod) (*corev1.Pod, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// Config wires a Controller.
type Config struct {
	Nodes         NodeClient
	Pods          PodClient
	NodeInformer  *client.Informer[*corev1.Node]
	LeaseInformer *client.Informer[*coordv1.Lease] // over kube-node-lease
	PodInformer   *client.Informer[*corev1.Pod]
	Recorder      *client.Recorder
	// GracePeriod without a Lease renewal before a node is unreachable (default 40 s).
	GracePeriod time.Duration
	// DefaultTolerationSeconds for pods with no toleration of the
	// unreachable taint (default 300).
	DefaultTolerationSeconds int64
	// MonitorPeriod between checks (default GracePeriod/8, at least 100 ms).
	MonitorPeriod time.Duration
	Logger        *slog.Logger
	// TracerProvider records a span per reconcile caused by a traced
	// change of the node or its Lease, in that change's trace
	// (client.Trace); nil uses the global one. The periodic checks have no
	// such cause: their spans are roots, which the controllers, a
	// follow-only component (telemetry.Config.FollowOnly), do not sample.
	TracerProvider trace.TracerProvider
}

// Controller is the node lifecycle controller.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
	now   func() time.Time

	causes client.TraceCauses

	mu       sync.Mutex
	observed map[string]observation // node name → last lease change seen
	// taintSeen is when a NoExecute taint without timeAdded was first
	// seen, by node name and taint key/effect.
	taintSeen map[string]map[string]time.Time
}

type observation struct {
	rv string
	at time.Time
}

// New returns a controller and registers its handlers.
func New(cfg Config) *Controller {
	if cfg.GracePeriod <= 0 {
		cfg.GracePeriod = 40 * time.Second
	}
	if cfg.DefaultTolerationSeconds <= 0 {
		cfg.DefaultTolerationSeconds = 300
	}
	if cfg.MonitorPeriod <= 0 {
		cfg.MonitorPeriod = max(cfg.GracePeriod/8, 100*time.Millisecond)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "nodelifecycle"), queue: client.NewQueue("nodelifecycle", 0, 0), now: time.Now, observed: map[string]observation{}, taintSeen: map[string]map[string]time.Time{}}
	cfg.NodeInformer.AddEventHandler(client.Handler[*corev1.Node]{
		OnAdd: func(n *corev1.Node) {
			c.causes.Add(client.Key(n), n.GetMetadata().GetAnnotations())
			c.queue.Add(client.Key(n))
		},
		OnUpdate: func(o, n *corev1.Node) {
			c.causes.AddChange(client.Key(n), o.GetMetadata().GetAnnotations(), n.GetMetadata().GetAnnotations())
			c.queue.Add(client.Key(n))
		},
		OnDelete: func(n *corev1.Node) { c.queue.Add(client.Key(n)) },
	})
	enqueueLease := func(old, l *coordv1.Lease) {
		if l.GetMetadata().GetNamespace() == LeaseNamespace {
			if old == nil {
				c.causes.Add(l.GetMetadata().GetName(), l.GetMetadata().GetAnnotations())
			} else {
				c.causes.AddChange(l.GetMetadata().GetName(), old.GetMetadata().GetAnnotations(), l.GetMetadata().GetAnnotations())
			}
			c.queue.Add(l.GetMetadata().GetName())
		}
	}
	cfg.LeaseInformer.AddEventHandler(client.Handler[*coordv1.Lease]{OnAdd: func(l *coordv1.Lease) { enqueueLease(nil, l) }, OnUpdate: enqueueLease})
	return c
}

// Run waits for the caches, then checks every node each MonitorPeriod and
// on every node or lease change, until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.NodeInformer, c.cfg.LeaseInformer, c.cfg.PodInformer) {
		return
	}
	go func() {
		t := time.NewTicker(c.cfg.MonitorPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				for _, k := range c.cfg.NodeInformer.Store().Keys() {
					c.queue.Add(k)
				}
			}
		}
	}()
	// The node's own annotation is not the parent: the periodic checks
	// would add a span to the trace of its last traced change every
	// MonitorPeriod. Only a traced change (a cause) gives the span a parent.
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "nodelifecycle.reconcile", Causes: &c.causes}
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
}

// lastRenewal is when this controller saw name's Lease change (or first
// saw the node, if it has no Lease yet).
func (c *Controller) lastRenewal(name string) time.Time {
	rv := ""
	if l, ok := c.cfg.LeaseInformer.Store().GetByName(LeaseNamespace, name); ok {
		rv = client.ResourceVersion(l)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.observed[name]
	if !ok || o.rv != rv {
		o = observation{rv: rv, at: c.now()}
		c.observed[name] = o
	}
	return o.at
}

func unreachableTaint(n *corev1.Node) *corev1.Taint {
	for _, t := range n.GetSpec().GetTaints() {
		if t.GetKey() == UnreachableKey && t.GetEffect() == "NoExecute" {
			return t
		}
	}
	return nil
}

// Reconcile checks the node named by key.
func (c *Controller) Reconcile(ctx context.Context, name string) (client.Result, error) {
	node, ok := c.cfg.NodeInformer.Store().Get(name)
	if !ok {
		c.mu.Lock()
		delete(c.observed, name)
		delete(c.taintSeen, name)
		c.mu.Unlock()
		return client.Result{}, nil
	}
	last := c.lastRenewal(name)
	stale := c.now().Sub(last) > c.cfg.GracePeriod
	taint := unreachableTaint(node)
	switch {
	case stale:
		cur, err := c.markUnknown(ctx, node)
		if err != nil {
			return client.Result{}, err
		}
		if taint == nil {
			u := proto.Clone(cur).(*corev1.Node)
			if u.Spec == nil {
				u.Spec = &corev1.NodeSpec{}
			}
			taint = &corev1.Taint{Key: UnreachableKey, Effect: "NoExecute", TimeAdded: timestamppb.New(c.now())}
			u.Spec.Taints = append(u.Spec.Taints, taint)
			if _, err := c.cfg.Nodes.Update(ctx, u); err != nil {
				return client.Result{}, fmt.Errorf("node %s: add unreachable taint: %w", name, err)
			}
			ctrl.Eventf(c.cfg.Recorder, node, client.EventNormal, "NodeNotReady", "Node %s status is now: NodeNotReady", name)
			node = u
		}
		return c.evict(ctx, node)
	case taint != nil:
		u := proto.Clone(node).(*corev1.Node)
		out := u.Spec.Taints[:0]
		for _, t := range u.Spec.Taints {
			if t.GetKey() != UnreachableKey {
				out = append(out, t)
			}
		}
		u.Spec.Taints = out
		if _, err := c.cfg.Nodes.Update(ctx, u); err != nil {
			return client.Result{}, fmt.Errorf("node %s: remove unreachable taint: %w", name, err)
		}
		ctrl.Eventf(c.cfg.Recorder, node, client.EventNormal, "NodeReady", "Node %s status is now: NodeReady", name)
		node = u
	}
	return c.evict(ctx, node)
}

// markUnknown sets every node condition the agent posts to Unknown and
// returns the node as written (node itself if nothing changed).
func (c *Controller) markUnknown(ctx context.Context, node *corev1.Node) (*corev1.Node, error) {
	u := proto.Clone(node).(*corev1.Node)
	if u.Status == nil {
		u.Status = &corev1.NodeStatus{}
	}
	now := timestamppb.New(c.now().Truncate(time.Second))
	changed, hasReady := false, false
	for _, cond := range u.Status.Conditions {
		if cond.GetType() == "Ready" {
			hasReady = true
		}
		if cond.GetStatus() != "Unknown" {
			cond.Status, cond.Reason, cond.Message, cond.LastTransitionTime = "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.", now
			changed = true
		}
	}
	if !hasReady {
		u.Status.Conditions = append(u.Status.Conditions, &corev1.NodeCondition{Type: "Ready", Status: "Unknown", Reason: "NodeStatusNeverUpdated", Message: "Kubelet never posted node status.", LastTransitionTime: now})
		changed = true
	}
	if !changed {
		return node, nil
	}
	got, err := c.cfg.Nodes.UpdateStatus(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("node %s: mark Ready Unknown: %w", node.GetMetadata().GetName(), err)
	}
	return got, nil
}

// noExecuteTaints are node's NoExecute taints as Kubernetes' type.
func noExecuteTaints(node *corev1.Node) []k8scorev1.Taint {
	var out []k8scorev1.Taint
	for _, t := range node.GetSpec().GetTaints() {
		if t.GetEffect() == "NoExecute" {
			out = append(out, k8scorev1.Taint{Key: t.GetKey(), Value: t.GetValue(), Effect: k8scorev1.TaintEffectNoExecute})
		}
	}
	return out
}

// taintedSince is when the earliest of node's NoExecute taints was added:
// its timeAdded, or when this controller first saw it. It forgets the
// taints the node no longer has.
func (c *Controller) taintedSince(node *corev1.Node) time.Time {
	name := node.GetMetadata().GetName()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.taintSeen[name]
	kept := map[string]time.Time{}
	var since time.Time
	for _, t := range node.GetSpec().GetTaints() {
		if t.GetEffect() != "NoExecute" {
			continue
		}
		at := t.GetTimeAdded().AsTime()
		if t.GetTimeAdded() == nil {
			k := t.GetKey() + ":" + t.GetEffect()
			first, ok := seen[k]
			if !ok {
				first = c.now()
			}
			kept[k], at = first, first
		}
		if since.IsZero() || at.Before(since) {
			since = at
		}
	}
	if len(kept) == 0 {
		delete(c.taintSeen, name)
	} else {
		c.taintSeen[name] = kept
	}
	return since
}

// tolerationTime is how long pod tolerates taints, as Kubernetes' taint
// eviction decides it: not at all (ok false) unless every taint has a
// matching toleration, then the shortest tolerationSeconds of the
// tolerations used (at least 0), or forever (-1) if none has one. A pod
// with no toleration of the unreachable or not-ready taint tolerates it
// for def seconds.
func tolerationTime(pod *corev1.Pod, taints []k8scorev1.Taint, def int64) (secs int64, ok bool) {
	tols := make([]k8scorev1.Toleration, 0, len(pod.GetSpec().GetTolerations()))
	for _, t := range pod.GetSpec().GetTolerations() {
		tols = append(tols, k8scorev1.Toleration{Key: t.GetKey(), Operator: k8scorev1.TolerationOperator(t.GetOperator()),
			Value: t.GetValue(), Effect: k8scorev1.TaintEffect(t.GetEffect()), TolerationSeconds: t.TolerationSeconds})
	}
	secs = -1
	for i := range taints {
		var used *int64
		found := false
		for j := range tols {
			if tols[j].ToleratesTaint(&taints[i]) {
				used, found = tols[j].TolerationSeconds, true
				break
			}
		}
		if !found {
			if taints[i].Key != UnreachableKey && taints[i].Key != NotReadyKey {
				return 0, false
			}
			used = &def
		}
		if used == nil {
			continue
		}
		if v := max(*used, 0); secs < 0 || v < secs {
			secs = v
		}
	}
	return secs, true
}

// evict evicts the pods on node that its NoExecute taints no longer let
// stay, and asks to come back for the others when the first of their
// tolerations runs out.
func (c *Controller) evict(ctx context.Context, node *corev1.Node) (client.Result, error) {
	taints := noExecuteTaints(node)
	since := c.taintedSince(node)
	if len(taints) == 0 {
		return client.Result{}, nil
	}
	name := node.GetMetadata().GetName()
	var errs []error
	var res client.Result
	for _, p := range c.cfg.PodInformer.Store().List() {
		if p.GetSpec().GetNodeName() != name || p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if secs, ok := tolerationTime(p, taints, c.cfg.DefaultTolerationSeconds); ok {
			if secs < 0 {
				continue
			}
			if left := since.Add(time.Duration(secs) * time.Second).Sub(c.now()); left > 0 {
				res = res.Sooner(left)
				continue
			}
		}
		if err := c.evictPod(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("node %s: evict pods: %w", name, err)
	}
	return res, nil
}

// evictPod marks p with the DisruptionTarget condition and deletes it (this
// uid only), as Kubernetes' taint eviction does.
func (c *Controller) evictPod(ctx context.Context, p *corev1.Pod) error {
	u := proto.Clone(p).(*corev1.Pod)
	if u.Status == nil {
		u.Status = &corev1.PodStatus{}
	}
	if setDisruptionTarget(u.Status, c.now()) {
		if _, err := c.cfg.Pods.UpdateStatus(ctx, u); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("pod %s: DisruptionTarget: %w", client.Key(p), err)
		}
	}
	err := c.cfg.Pods.Delete(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), client.DeleteOptions{UID: p.GetMetadata().GetUid()})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	ctrl.Eventf(c.cfg.Recorder, p, client.EventNormal, "TaintManagerEviction", "Marking for deletion Pod %s", client.Key(p))
	return nil
}

// setDisruptionTarget sets the DisruptionTarget condition Kubernetes' taint
// eviction sets; false if it was already there.
func setDisruptionTarget(st *corev1.PodStatus, now time.Time) bool {
	want := &corev1.PodCondition{Type: "DisruptionTarget", Status: "True", Reason: "DeletionByTaintManager",
		Message: "Taint manager: deleting due to NoExecute taint", LastTransitionTime: timestamppb.New(now.Truncate(time.Second))}
	for i, c := range st.Conditions {
		if c.GetType() == want.Type {
			if c.GetStatus() == want.Status && c.GetReason() == want.Reason && c.GetMessage() == want.Message {
				return false
			}
			st.Conditions[i] = want
			return true
		}
	}
	st.Conditions = append(st.Conditions, want)
	return true
}
