// Package resourcequota is the resource quota controller, as Kubernetes':
// it keeps each ResourceQuota's status.hard equal to its spec.hard and its
// status.used equal to what the namespace's objects use now, recounting a
// quota when it changes, when an object it counts goes or changes in a way
// that matters (a pod finishing, a Service changing type), and every
// ResyncPeriod. The API service charges usage as objects are created
// (ResourceQuota admission); this controller is what gives it back.
package resourcequota

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	quotav1 "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"

	"github.com/kplane/kplane/internal/quota"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// DefaultResyncPeriod is how often every quota is recounted (Kubernetes'
// --resource-quota-sync-period).
const DefaultResyncPeriod = 5 * time.Minute

// QuotaClient writes quotas' status (*client.Client[*corev1.ResourceQuota]).
type QuotaClient interface {
	UpdateStatus(ctx context.Context, obj *corev1.ResourceQuota) (*corev1.ResourceQuota, error)
}

// Lister lists one namespace's objects of a resource the controller counts
// without an informer of its own.
type Lister func(ctx context.Context, namespace string) ([]proto.Message, error)

// ClientLister lists through c (a *client.Client of any namespaced kind).
func ClientLister[T proto.Message](c *client.Client[T]) Lister {
	return func(ctx context.Context, ns string) ([]proto.Message, error) {
		items, _, err := c.List(ctx, ns, client.ListOptions{Limit: 500})
		if err != nil {
			return nil, err
		}
		out := make([]proto.Message, len(items))
		for i, it := range items {
			out[i] = it
		}
		return out, nil
	}
}

// Config wires a Controller; New adds handlers to the informers.
type Config struct {
	Quotas          QuotaClient
	QuotaInformer   *client.Informer[*corev1.ResourceQuota]
	PodInformer     *client.Informer[*corev1.Pod]
	ServiceInformer *client.Informer[*corev1.Service]
	// Listers count the other resources a quota may name (configmaps,
	// secrets, ...: count/<resource>.<group> or their legacy names).
	Listers map[schema.GroupResource]Lister
	// ListerCaches are the informers Listers read: Run waits for them
	// before the first count, which would otherwise find them empty.
	ListerCaches []client.Syncer
	// Live list a resource from the API service (a consistent read), for
	// the resources counted from informer caches (pods, services and the
	// Listers that read a cache). Caches are fed by watches of their own
	// and may not have seen an object created just before the quota, or
	// charged by admission just before a recount; a count that would
	// show a resource for the first time, or give usage back, is taken
	// again from Live before it is written.
	Live map[schema.GroupResource]Lister
	// Custom counts and follows the custom resources a quota names
	// (count/<plural>.<group>); nil, or a resource neither it nor Listers
	// knows, is counted as 0.
	Custom CustomResources
	// ResyncPeriod: every quota is recounted this often (default
	// DefaultResyncPeriod).
	ResyncPeriod time.Duration
	Logger       *slog.Logger
	// TracerProvider records a span per reconcile; nil uses the global one.
	TracerProvider trace.TracerProvider
	// Now is the clock pods' deletion grace periods are read against
	// (default time.Now).
	Now func() time.Time
}

// Controller is the resource quota controller. Its queue holds quota keys
// (namespace/name).
type Controller struct {
	cfg    Config
	log    *slog.Logger
	queue  client.Queue
	custom *customCounter // nil without Config.Custom
}

// New returns a controller and registers its handlers.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "resourcequota"), queue: client.NewQueue("resourcequota", 0, 0)}
	if cfg.Custom != nil {
		c.custom = &customCounter{c: cfg.Custom, log: c.log, deleted: c.NamespaceChanged}
	}
	key := func(q *corev1.ResourceQuota) string {
		return q.GetMetadata().GetNamespace() + "/" + q.GetMetadata().GetName()
	}
	cfg.QuotaInformer.AddEventHandler(client.Handler[*corev1.ResourceQuota]{
		OnAdd: func(q *corev1.ResourceQuota) { c.queue.Add(key(q)) },
		// A status write that only moves usage is admission charging it:
		// a recount then, from pod informers that may not have seen the
		// pods just charged, would give back usage still in use, so (as in
		// Kubernetes) it waits for the resync. A change of what the quota
		// limits, or a status.hard that no longer says so (someone wrote
		// the status), is recounted at once.
		OnUpdate: func(old, q *corev1.ResourceQuota) {
			if !proto.Equal(old.GetSpec(), q.GetSpec()) || !sameQuantities(q.GetSpec().GetHard(), q.GetStatus().GetHard()) {
				c.queue.Add(key(q))
			}
		},
	})
	cfg.PodInformer.AddEventHandler(client.Handler[*corev1.Pod]{
		OnUpdate: func(old, n *corev1.Pod) {
			if podUsageChanged(old, n) {
				c.NamespaceChanged(n.GetMetadata().GetNamespace())
			}
		},
		OnDelete: func(p *corev1.Pod) { c.NamespaceChanged(p.GetMetadata().GetNamespace()) },
	})
	if cfg.ServiceInformer != nil {
		cfg.ServiceInformer.AddEventHandler(client.Handler[*corev1.Service]{
			OnUpdate: func(old, n *corev1.Service) {
				if old.GetSpec().GetType() != n.GetSpec().GetType() || len(old.GetSpec().GetPorts()) != len(n.GetSpec().GetPorts()) {
					c.NamespaceChanged(n.GetMetadata().GetNamespace())
				}
			},
			OnDelete: func(s *corev1.Service) { c.NamespaceChanged(s.GetMetadata().GetNamespace()) },
		})
	}
	return c
}

// sameQuantities reports whether a and b hold the same resources at the
// same amounts ("1" and "1000m" are the same).
func sameQuantities(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok {
			return false
		}
		qa, err1 := resource.ParseQuantity(v)
		qb, err2 := resource.ParseQuantity(w)
		if err1 != nil || err2 != nil || qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}

// podUsageChanged: a pod finished, started being deleted, or its
// terminating scope changed; its usage may drop.
func podUsageChanged(old, n *corev1.Pod) bool {
	terminal := func(p *corev1.Pod) bool {
		ph := p.GetStatus().GetPhase()
		return ph == "Succeeded" || ph == "Failed"
	}
	return terminal(old) != terminal(n) ||
		(old.GetMetadata().GetDeletionTimestamp() == nil) != (n.GetMetadata().GetDeletionTimestamp() == nil) ||
		(old.GetSpec().ActiveDeadlineSeconds == nil) != (n.GetSpec().ActiveDeadlineSeconds == nil)
}

// CountFrom counts gr's objects with l. Call it before Run.
func (c *Controller) CountFrom(gr schema.GroupResource, l Lister) {
	if c.cfg.Listers == nil {
		c.cfg.Listers = map[schema.GroupResource]Lister{}
	}
	c.cfg.Listers[gr] = l
}

// WaitFor has Run wait for inf's cache too (an informer a Lister given
// to CountFrom reads). Call it before Run.
func (c *Controller) WaitFor(inf client.Syncer) {
	c.cfg.ListerCaches = append(c.cfg.ListerCaches, inf)
}

// NamespaceChanged brings every quota of ns to the queue: an object it may
// count changed. Informers of other counted resources call it on deletes.
func (c *Controller) NamespaceChanged(ns string) {
	for _, q := range c.cfg.QuotaInformer.Store().ByNamespace(ns) {
		c.queue.Add(ns + "/" + q.GetMetadata().GetName())
	}
}

// Run waits for the caches, then reconciles until ctx ends, recounting
// every quota each ResyncPeriod.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	syncs := append([]client.Syncer{c.cfg.QuotaInformer, c.cfg.PodInformer}, c.cfg.ListerCaches...)
	if c.cfg.ServiceInformer != nil {
		syncs = append(syncs, c.cfg.ServiceInformer)
	}
	if !client.WaitForCacheSync(ctx, syncs...) {
		return
	}
	if c.custom != nil {
		c.custom.start(ctx)
		defer c.custom.wait()
	}
	resync := make(chan struct{})
	defer func() { <-resync }()
	go func() {
		defer close(resync)
		t := time.NewTicker(c.cfg.ResyncPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				for _, k := range c.cfg.QuotaInformer.Store().Keys() {
					c.queue.Add(k)
				}
			}
		}
	}()
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "resourcequota.reconcile",
		Annotations: client.StoreAnnotations(c.cfg.QuotaInformer.Store())}
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
}

// Reconcile recounts the quota key (namespace/name) and writes its status
// if it changed.
func (c *Controller) Reconcile(ctx context.Context, key string) (client.Result, error) {
	cached, ok := c.cfg.QuotaInformer.Store().Get(key)
	if !ok {
		return client.Result{}, nil
	}
	q, err := quota.ToK8s(cached)
	if err != nil {
		return client.Result{}, err
	}
	rq := q.(*k8scorev1.ResourceQuota)
	ns := rq.Namespace
	hard := rq.Spec.Hard
	used, err := c.usage(ctx, ns, rq, false)
	if err != nil {
		return client.Result{}, fmt.Errorf("resourcequota %s: %w", key, err)
	}
	if len(c.cfg.Live) > 0 && givesBackOrNew(used, rq.Status.Used) {
		if used, err = c.usage(ctx, ns, rq, true); err != nil {
			return client.Result{}, fmt.Errorf("resourcequota %s: %w", key, err)
		}
	}
	if quotav1.Equals(hard, rq.Status.Hard) && quotav1.Equals(used, rq.Status.Used) {
		return client.Result{}, nil
	}
	n := proto.Clone(cached).(*corev1.ResourceQuota)
	n.Status = &corev1.ResourceQuotaStatus{Hard: quota.Quantities(hard), Used: quota.Quantities(used)}
	_, err = c.cfg.Quotas.UpdateStatus(ctx, n)
	switch {
	case err == nil:
		c.log.DebugContext(ctx, "quota recounted", "quota", key, "used", n.Status.Used)
		return client.Result{}, nil
	case apierrors.IsNotFound(err):
		return client.Result{}, nil
	default:
		// A conflict (admission charged it meanwhile) is retried from
		// the newer copy the informer brings.
		return client.Result{}, fmt.Errorf("resourcequota %s: update status: %w", key, err)
	}
}

// givesBackOrNew reports whether a count shows a resource the status did
// not, or less of one than the status says is used.
func givesBackOrNew(used, prev k8scorev1.ResourceList) bool {
	for k, v := range used {
		p, ok := prev[k]
		if !ok || v.Cmp(p) < 0 {
			return true
		}
	}
	return false
}

// usage counts what the namespace's objects use of every resource the
// quota names, within its scopes: the previous observation where a count
// failed, 0 for resources nothing counts. live counts through the Live
// listers where there is one, caches otherwise.
func (c *Controller) usage(ctx context.Context, ns string, rq *k8scorev1.ResourceQuota, live bool) (k8scorev1.ResourceList, error) {
	list := func(gr schema.GroupResource, ns string) ([]runtime.Object, error) {
		var objs []proto.Message
		l := c.cfg.Live[gr]
		switch {
		case live && l != nil:
			var err error
			if objs, err = l(ctx, ns); err != nil {
				return nil, err
			}
		case gr == schema.GroupResource{Resource: "pods"}:
			for _, p := range c.cfg.PodInformer.Store().ByNamespace(ns) {
				objs = append(objs, p)
			}
		case gr == schema.GroupResource{Resource: "resourcequotas"}:
			for _, q := range c.cfg.QuotaInformer.Store().ByNamespace(ns) {
				objs = append(objs, q)
			}
		case gr == schema.GroupResource{Resource: "services"} && c.cfg.ServiceInformer != nil:
			for _, s := range c.cfg.ServiceInformer.Store().ByNamespace(ns) {
				objs = append(objs, s)
			}
		default:
			l = c.cfg.Listers[gr]
			if l == nil && c.custom != nil && gr.Group != "" {
				return c.custom.list(ctx, gr, ns)
			}
			if l == nil {
				return nil, nil
			}
			var err error
			if objs, err = l(ctx, ns); err != nil {
				return nil, err
			}
		}
		out := make([]runtime.Object, 0, len(objs))
		for _, o := range objs {
			k, err := quota.ToK8s(o)
			if err != nil {
				return nil, err
			}
			out = append(out, k)
		}
		return out, nil
	}
	evals := []quotav1.Evaluator{}
	seen := map[schema.GroupResource]bool{}
	add := func(gr schema.GroupResource) {
		if !seen[gr] {
			seen[gr] = true
			evals = append(evals, quota.Evaluator(gr, list, c.cfg.Now))
		}
	}
	for name := range rq.Spec.Hard {
		add(groupResourceOf(string(name)))
	}
	newUsage, err := quotav1.CalculateUsage(ns, rq.Spec.Scopes, rq.Spec.Hard, generic.NewRegistry(evals), rq.Spec.ScopeSelector)
	if err != nil {
		c.log.WarnContext(ctx, "counting a quota's usage", "namespace", ns, "quota", rq.Name, "err", err)
	}
	used := k8scorev1.ResourceList{}
	for k, v := range rq.Status.Used {
		used[k] = v
	}
	for k, v := range newUsage {
		used[k] = v
	}
	used = quotav1.Mask(used, quotav1.ResourceNames(rq.Spec.Hard))
	for k := range rq.Spec.Hard {
		if _, ok := used[k]; !ok {
			used[k] = resource.Quantity{Format: resource.DecimalSI}
		}
	}
	return used, nil
}

// groupResourceOf is the resource a quota resource name counts: pods for
// compute resources and pods, services for services.*,
// count/<resource>.<group> for itself, and the legacy object counts.
func groupResourceOf(name string) schema.GroupResource {
	if rest, ok := strings.CutPrefix(name, "count/"); ok {
		res, group, _ := strings.Cut(rest, ".")
		return schema.GroupResource{Group: group, Resource: res}
	}
	switch name {
	case "services", "services.nodeports", "services.loadbalancers":
		return schema.GroupResource{Resource: "services"}
	case "configmaps", "secrets", "replicationcontrollers", "resourcequotas", "persistentvolumeclaims":
		return schema.GroupResource{Resource: name}
	}
	return schema.GroupResource{Resource: "pods"}
}
