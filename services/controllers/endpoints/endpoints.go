// Package endpoints is the Endpoints controller: for every Service with a
// selector it keeps an Endpoints object of the same name listing the IPs of
// the matching pods — ready ones under addresses, the others under
// notReadyAddresses (all as ready with publishNotReadyAddresses) — with the
// Service's ports resolved against each pod's container ports.
package endpoints

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// EndpointsClient writes Endpoints (*client.Client[*corev1.Endpoints]).
type EndpointsClient interface {
	Get(ctx context.Context, namespace, name string) (*corev1.Endpoints, error)
	Create(ctx context.Context, obj *corev1.Endpoints) (*corev1.Endpoints, error)
	Update(ctx context.Context, obj *corev1.Endpoints) (*corev1.Endpoints, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// Config wires a Controller; New adds handlers to the shared informers.
type Config struct {
	Endpoints       EndpointsClient
	ServiceInformer *client.Informer[*corev1.Service]
	PodInformer     *client.Informer[*corev1.Pod]
	Logger          *slog.Logger
	// TracerProvider records a span per reconcile, in the trace of the
	// Service, linked to the traces of the pod changes that caused it
	// (client.Trace); nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the Endpoints controller.
type Controller struct {
	cfg    Config
	log    *slog.Logger
	queue  client.Queue
	causes client.TraceCauses
}

// New returns a controller and registers its handlers.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "endpoints"), queue: client.NewQueue("endpoints", 0, 0)}
	cfg.ServiceInformer.AddEventHandler(client.EnqueueHandler[*corev1.Service](c.queue))
	cfg.PodInformer.AddEventHandler(client.Handler[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) { c.enqueueFor(p, nil, p) },
		OnUpdate: func(o, n *corev1.Pod) {
			c.enqueueFor(o, o, n)
			c.enqueueFor(n, o, n)
		},
		OnDelete: func(p *corev1.Pod) { c.enqueueFor(p, nil, p) },
	})
	return c
}

// enqueueFor enqueues the services whose selector matches p, noting the
// trace of the pod's change from old (nil: created or deleted) to cur as
// the cause.
func (c *Controller) enqueueFor(p, old, cur *corev1.Pod) {
	set := labels.Set(p.GetMetadata().GetLabels())
	for _, s := range c.cfg.ServiceInformer.Store().ByNamespace(p.GetMetadata().GetNamespace()) {
		sel := s.GetSpec().GetSelector()
		if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(set) {
			k := client.Key(s)
			if old == nil {
				c.causes.Add(k, cur.GetMetadata().GetAnnotations())
			} else {
				c.causes.AddChange(k, old.GetMetadata().GetAnnotations(), cur.GetMetadata().GetAnnotations())
			}
			c.queue.Add(k)
		}
	}
}

// Run waits for the caches, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.ServiceInformer, c.cfg.PodInformer) {
		return
	}
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "endpoints.reconcile",
		Annotations: client.StoreAnnotations(c.cfg.ServiceInformer.Store()), Causes: &c.causes}
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
}

// Reconcile writes the Endpoints of the Service named by key.
func (c *Controller) Reconcile(ctx context.Context, key string) (client.Result, error) {
	ns, name := client.SplitKey(key)
	svc, ok := c.cfg.ServiceInformer.Store().Get(key)
	if !ok {
		err := c.cfg.Endpoints.Delete(ctx, ns, name, client.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return client.Result{}, fmt.Errorf("endpoints %s: delete: %w", key, err)
		}
		return client.Result{}, nil
	}
	if len(svc.GetSpec().GetSelector()) == 0 {
		return client.Result{}, nil // endpoints managed by someone else
	}
	subsets := Subsets(svc, c.cfg.PodInformer.Store().ByNamespace(ns))
	cur, err := c.cfg.Endpoints.Get(ctx, ns, name)
	if apierrors.IsNotFound(err) {
		ep := &corev1.Endpoints{ApiVersion: "v1", Kind: "Endpoints",
			Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name, Labels: svc.GetMetadata().GetLabels()}, Subsets: subsets}
		if _, err := c.cfg.Endpoints.Create(ctx, ep); err != nil && !apierrors.IsAlreadyExists(err) {
			return client.Result{}, fmt.Errorf("endpoints %s: create: %w", key, err)
		}
		return client.Result{}, nil
	}
	if err != nil {
		return client.Result{}, fmt.Errorf("endpoints %s: get: %w", key, err)
	}
	if equalSubsets(cur.GetSubsets(), subsets) {
		return client.Result{}, nil
	}
	u := proto.Clone(cur).(*corev1.Endpoints)
	u.Subsets = subsets
	if _, err := c.cfg.Endpoints.Update(ctx, u); err != nil {
		return client.Result{}, fmt.Errorf("endpoints %s: update: %w", key, err)
	}
	return client.Result{}, nil
}

func equalSubsets(a, b []*corev1.EndpointSubset) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// Subsets computes the Endpoints subsets of svc over pods: pods with an IP
// that match the selector and are not being deleted, grouped by the port
// set they resolve to, addresses sorted by IP.
func Subsets(svc *corev1.Service, pods []*corev1.Pod) []*corev1.EndpointSubset {
	sel := labels.SelectorFromSet(svc.GetSpec().GetSelector())
	groups := map[string]*corev1.EndpointSubset{}
	var order []string
	for _, p := range pods {
		if !PodInEndpoints(p, false) || !sel.Matches(labels.Set(p.GetMetadata().GetLabels())) {
			continue
		}
		ports := resolvePorts(svc, p)
		var kb strings.Builder
		for _, pt := range ports {
			fmt.Fprintf(&kb, "%s/%d/%s,", pt.GetName(), pt.GetPort(), pt.GetProtocol())
		}
		k := kb.String()
		g, ok := groups[k]
		if !ok {
			g = &corev1.EndpointSubset{Ports: ports}
			groups[k] = g
			order = append(order, k)
		}
		node := p.GetSpec().GetNodeName()
		addr := &corev1.EndpointAddress{Ip: p.GetStatus().GetPodIp(),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: p.GetMetadata().GetNamespace(), Name: p.GetMetadata().GetName(), Uid: p.GetMetadata().GetUid()}}
		if node != "" {
			addr.NodeName = proto.String(node)
		}
		if ready, _ := ctrl.PodReady(p); ready || svc.GetSpec().GetPublishNotReadyAddresses() {
			g.Addresses = append(g.Addresses, addr)
		} else {
			g.NotReadyAddresses = append(g.NotReadyAddresses, addr)
		}
	}
	sort.Strings(order)
	out := make([]*corev1.EndpointSubset, 0, len(order))
	for _, k := range order {
		g := groups[k]
		byIP := func(l []*corev1.EndpointAddress) {
			sort.Slice(l, func(i, j int) bool { return l[i].GetIp() < l[j].GetIp() })
		}
		byIP(g.Addresses)
		byIP(g.NotReadyAddresses)
		out = append(out, g)
	}
	return out
}

// PodInEndpoints reports whether pod belongs in its Services' endpoints,
// as Kubernetes' ShouldPodBeInEndpoints: it has an IP and has not
// finished (Succeeded or Failed); a terminating pod (deletion timestamp
// set) only when includeTerminating (the EndpointSlice controller lists
// them, the Endpoints controller does not).
func PodInEndpoints(pod *corev1.Pod, includeTerminating bool) bool {
	if ph := pod.GetStatus().GetPhase(); ph == "Succeeded" || ph == "Failed" {
		return false
	}
	if pod.GetStatus().GetPodIp() == "" && len(pod.GetStatus().GetPodIps()) == 0 {
		return false
	}
	return includeTerminating || pod.GetMetadata().GetDeletionTimestamp() == nil
}

// FindPort is the pod port a Service port sends to, as Kubernetes'
// FindPort: a numeric targetPort as is (the port itself if unset, which
// defaulting does not leave), a named one through the container ports of
// that name and the Service port's protocol, the regular containers' first,
// then sidecars' (init containers that restart Always). ok is false when
// the pod has no such named port.
func FindPort(pod *corev1.Pod, sp *corev1.ServicePort) (port int32, ok bool) {
	protocol := sp.GetProtocol()
	if protocol == "" {
		protocol = "TCP"
	}
	switch v := sp.GetTargetPort().GetValue().(type) {
	case *metav1.IntOrString_StrVal:
		find := func(cs []*corev1.Container, sidecarsOnly bool) (int32, bool) {
			for _, c := range cs {
				if sidecarsOnly && c.GetRestartPolicy() != "Always" {
					continue
				}
				for _, cp := range c.GetPorts() {
					cpProto := cp.GetProtocol()
					if cpProto == "" {
						cpProto = "TCP"
					}
					if cp.GetName() == v.StrVal && cpProto == protocol {
						return cp.GetContainerPort(), true
					}
				}
			}
			return 0, false
		}
		if p, ok := find(pod.GetSpec().GetContainers(), false); ok {
			return p, true
		}
		return find(pod.GetSpec().GetInitContainers(), true)
	case *metav1.IntOrString_IntVal:
		if v.IntVal != 0 {
			return v.IntVal, true
		}
	}
	return sp.GetPort(), true
}

// resolvePorts maps svc's ports onto p with FindPort (a port the pod does
// not name is left out).
func resolvePorts(svc *corev1.Service, p *corev1.Pod) []*corev1.EndpointPort {
	var out []*corev1.EndpointPort
	for _, sp := range svc.GetSpec().GetPorts() {
		port, ok := FindPort(p, sp)
		if !ok {
			continue
		}
		protocol := sp.GetProtocol()
		if protocol == "" {
			protocol = "TCP"
		}
		out = append(out, &corev1.EndpointPort{Name: sp.GetName(), Port: port, Protocol: protocol, AppProtocol: sp.AppProtocol})
	}
	return out
}
