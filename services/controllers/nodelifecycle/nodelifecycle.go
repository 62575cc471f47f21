// Package nodelifecycle is the node lifecycle controller: a node whose
// Lease in kube-node-lease has not been renewed for GracePeriod gets
// Ready=Unknown (reason NodeStatusUnknown) and the
// node.kubernetes.io/unreachable:NoExecute taint; its pods are deleted once
// their toleration of that taint runs out (a pod without one tolerates it
// for DefaultTolerationSeconds, as Kubernetes' DefaultTolerationSeconds
// admission would have set), so their controllers replace them elsewhere.
// When the Lease is renewed again the taint is removed (the node agent sets
// Ready itself).
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

	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apierrors"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// Well-known names.
const (
	LeaseNamespace = "kube-node-lease"
	UnreachableKey = "node.kubernetes.io/unreachable"
)

// NodeClient writes nodes.
type NodeClient interface {
	Get(ctx context.Context, namespace, name string) (*corev1.Node, error)
	Update(ctx context.Context, obj *corev1.Node) (*corev1.Node, error)
	UpdateStatus(ctx context.Context, obj *corev1.Node) (*corev1.Node, error)
}

// PodClient deletes pods.
type PodClient interface {
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
	c := &Controller{cfg: cfg, log: log.With("controller", "nodelifecycle"), queue: client.NewQueue("nodelifecycle", 0, 0), now: time.Now, observed: map[string]observation{}}
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
func (c *Controller) Reconcile(ctx context.Context, name string) error {
	node, ok := c.cfg.NodeInformer.Store().Get(name)
	if !ok {
		c.mu.Lock()
		delete(c.observed, name)
		c.mu.Unlock()
		return nil
	}
	last := c.lastRenewal(name)
	stale := c.now().Sub(last) > c.cfg.GracePeriod
	taint := unreachableTaint(node)
	switch {
	case stale:
		cur, err := c.markUnknown(ctx, node)
		if err != nil {
			return err
		}
		if taint == nil {
			u := proto.Clone(cur).(*corev1.Node)
			if u.Spec == nil {
				u.Spec = &corev1.NodeSpec{}
			}
			taint = &corev1.Taint{Key: UnreachableKey, Effect: "NoExecute", TimeAdded: timestamppb.New(c.now())}
			u.Spec.Taints = append(u.Spec.Taints, taint)
			if _, err := c.cfg.Nodes.Update(ctx, u); err != nil {
				return fmt.Errorf("node %s: add unreachable taint: %w", name, err)
			}
			ctrl.Eventf(c.cfg.Recorder, node, client.EventNormal, "NodeNotReady", "Node %s status is now: NodeNotReady", name)
		}
		return c.evict(ctx, name, taint.GetTimeAdded().AsTime())
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
			return fmt.Errorf("node %s: remove unreachable taint: %w", name, err)
		}
		ctrl.Eventf(c.cfg.Recorder, node, client.EventNormal, "NodeReady", "Node %s status is now: NodeReady", name)
	}
	return nil
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

// TolerationSeconds is how long pod tolerates the unreachable NoExecute
// taint: forever (-1) with a toleration without tolerationSeconds, its
// tolerationSeconds, or def if it has no matching toleration.
func TolerationSeconds(pod *corev1.Pod, def int64) int64 {
	for _, t := range pod.GetSpec().GetTolerations() {
		keyOK := t.GetKey() == UnreachableKey || (t.GetKey() == "" && t.GetOperator() == "Exists")
		effOK := t.GetEffect() == "" || t.GetEffect() == "NoExecute"
		if !keyOK || !effOK {
			continue
		}
		if t.TolerationSeconds == nil {
			return -1
		}
		return max(*t.TolerationSeconds, 0)
	}
	return def
}

// evict deletes the pods on node whose toleration ran out since taintedAt,
// and comes back for the others when theirs will.
func (c *Controller) evict(ctx context.Context, node string, taintedAt time.Time) error {
	var errs []error
	var next time.Duration
	for _, p := range c.cfg.PodInformer.Store().List() {
		if p.GetSpec().GetNodeName() != node || p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		secs := TolerationSeconds(p, c.cfg.DefaultTolerationSeconds)
		if secs < 0 {
			continue
		}
		left := taintedAt.Add(time.Duration(secs) * time.Second).Sub(c.now())
		if left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		err := c.cfg.Pods.Delete(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), client.DeleteOptions{UID: p.GetMetadata().GetUid()})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err)
			continue
		}
		ctrl.Eventf(c.cfg.Recorder, p, client.EventNormal, "TaintManagerEviction", "Marking for deletion Pod %s", client.Key(p))
	}
	if next > 0 {
		c.queue.AddAfter(node, next)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("node %s: evict pods: %w", node, err)
	}
	return nil
}
