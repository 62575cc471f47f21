// Package endpointslicemirroring is the EndpointSlice mirroring controller:
// the Endpoints a user writes for a Service without a selector are mirrored
// into EndpointSlices managed by endpointslicemirroring-controller.k8s.io,
// as Kubernetes' controller of that name does: one slice per address type
// and port set of the Endpoints' subsets (at most MaxEndpointsPerSubset
// addresses of each subset), with the Endpoints' labels and annotations,
// owned by the Endpoints. Endpoints labelled
// endpointslice.kubernetes.io/skip-mirror=true (the Endpoints controller's
// and kube-apiserver's own), Endpoints of a Service with a selector and
// Endpoints without a Service are not mirrored, and lose their mirrored
// slices.
package endpointslicemirroring

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sort"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	netutils "k8s.io/utils/net"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/endpointslice"
)

const (
	// ControllerName is the managed-by value of the mirrored slices.
	ControllerName = "endpointslicemirroring-controller.k8s.io"
	// MaxEndpointsPerSubset is kube-controller-manager's
	// --mirroring-max-endpoints-per-subset default.
	MaxEndpointsPerSubset = 1000
	// LabelSkipMirror marks Endpoints not to mirror.
	LabelSkipMirror = "endpointslice.kubernetes.io/skip-mirror"
	// Annotations not copied to the slices.
	lastChangeTriggerTime = "endpoints.kubernetes.io/last-change-trigger-time"
	lastApplied           = "kubectl.kubernetes.io/last-applied-configuration"
	leaderAnnotation      = "control-plane.alpha.kubernetes.io/leader"
)

// Config wires a Controller; New adds handlers to the shared informers.
type Config struct {
	Slices            endpointslice.SliceClient
	EndpointsInformer *client.Informer[*corev1.Endpoints]
	ServiceInformer   *client.Informer[*corev1.Service]
	SliceInformer     *client.Informer[*discoveryv1.EndpointSlice]
	Logger            *slog.Logger
	// TracerProvider records a span per reconcile; nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the EndpointSlice mirroring controller.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	queue   client.Queue
	tracker *endpointslice.Tracker
}

// New returns a controller and registers its handlers.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "endpointslicemirroring"),
		queue: client.NewQueue("endpointslicemirroring", 0, 0), tracker: endpointslice.NewTracker()}
	cfg.EndpointsInformer.AddEventHandler(client.EnqueueHandler[*corev1.Endpoints](c.queue))
	cfg.ServiceInformer.AddEventHandler(client.EnqueueHandler[*corev1.Service](c.queue))
	enqueueSlice := func(s *discoveryv1.EndpointSlice) {
		l := s.GetMetadata().GetLabels()
		if l[endpointslice.LabelManagedBy] == ControllerName && l[endpointslice.LabelServiceName] != "" {
			c.queue.Add(client.KeyOf(s.GetMetadata().GetNamespace(), l[endpointslice.LabelServiceName]))
		}
	}
	cfg.SliceInformer.AddEventHandler(client.Handler[*discoveryv1.EndpointSlice]{
		OnAdd:    enqueueSlice,
		OnUpdate: func(o, n *discoveryv1.EndpointSlice) { enqueueSlice(o); enqueueSlice(n) },
		OnDelete: func(s *discoveryv1.EndpointSlice) {
			c.tracker.Drop(client.KeyOf(s.GetMetadata().GetNamespace(), s.GetMetadata().GetLabels()[endpointslice.LabelServiceName]), s.GetMetadata().GetUid())
			enqueueSlice(s)
		},
	})
	return c
}

// Run waits for the caches, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.EndpointsInformer, c.cfg.ServiceInformer, c.cfg.SliceInformer) {
		return
	}
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "endpointslicemirroring.reconcile",
		Annotations: client.StoreAnnotations(c.cfg.EndpointsInformer.Store())}
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
}

// Reconcile mirrors the Endpoints named by key, or removes its mirrored
// slices when it is not to be mirrored.
func (c *Controller) Reconcile(ctx context.Context, key string) (client.Result, error) {
	ns, name := client.SplitKey(key)
	var existing []*discoveryv1.EndpointSlice
	for _, s := range c.cfg.SliceInformer.Store().ByNamespace(ns) {
		l := s.GetMetadata().GetLabels()
		if l[endpointslice.LabelServiceName] == name && l[endpointslice.LabelManagedBy] == ControllerName {
			existing = append(existing, s)
		}
	}
	ep, ok := c.cfg.EndpointsInformer.Store().Get(key)
	svc, svcOK := c.cfg.ServiceInformer.Store().Get(key)
	if !ok || !svcOK || ep.GetMetadata().GetLabels()[LabelSkipMirror] == "true" ||
		ep.GetMetadata().GetAnnotations()[leaderAnnotation] != "" || svc.GetSpec().GetSelector() != nil {
		c.tracker.Forget(key)
		for _, s := range existing {
			if err := c.delete(ctx, key, s); err != nil {
				return client.Result{}, err
			}
		}
		return client.Result{}, nil
	}
	if c.tracker.Stale(key, existing) {
		return client.Result{}, fmt.Errorf("endpointslicemirroring %s: the EndpointSlice cache is behind this controller's writes", key)
	}
	create, update, remove := plan(ep, existing)
	if ep.GetMetadata().GetDeletionTimestamp() == nil {
		for _, s := range create {
			created, err := c.cfg.Slices.Create(ctx, s)
			if err != nil {
				if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
					return client.Result{}, nil // the namespace is going away
				}
				return client.Result{}, fmt.Errorf("endpointslicemirroring %s: create: %w", key, err)
			}
			c.tracker.Wrote(key, created)
		}
	}
	for _, s := range update {
		updated, err := c.cfg.Slices.Update(ctx, s)
		if err != nil {
			return client.Result{}, fmt.Errorf("endpointslicemirroring %s: update %s: %w", key, s.GetMetadata().GetName(), err)
		}
		c.tracker.Wrote(key, updated)
	}
	for _, s := range remove {
		if err := c.delete(ctx, key, s); err != nil {
			return client.Result{}, err
		}
	}
	return client.Result{}, nil
}

func (c *Controller) delete(ctx context.Context, key string, s *discoveryv1.EndpointSlice) error {
	m := s.GetMetadata()
	if err := c.cfg.Slices.Delete(ctx, m.GetNamespace(), m.GetName(), client.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("endpointslicemirroring %s: delete %s: %w", key, m.GetName(), err)
	}
	c.tracker.Deleted(key, s)
	return nil
}

// group is the desired slice of one address type and port set.
type group struct {
	addressType string
	ports       []*discoveryv1.EndpointPort
	endpoints   []*discoveryv1.Endpoint
	seen        map[string]bool
}

// plan computes the slices of ep as Kubernetes' mirroring reconciler: for
// each address type and port set one slice, the first existing slice of
// that key updated (kept when already equal), the others deleted; slices
// of keys no longer wanted are deleted, or recycled for a new key of the
// same address type.
func plan(ep *corev1.Endpoints, existing []*discoveryv1.EndpointSlice) (create, update, remove []*discoveryv1.EndpointSlice) {
	groups := map[string]*group{}
	var keys []string
	for _, ss := range ep.GetSubsets() {
		ports := make([]*discoveryv1.EndpointPort, 0, len(ss.GetPorts()))
		for _, p := range ss.GetPorts() {
			ports = append(ports, &discoveryv1.EndpointPort{Name: proto.String(p.GetName()), Port: proto.Int32(p.GetPort()),
				Protocol: proto.String(p.GetProtocol()), AppProtocol: p.AppProtocol})
		}
		added := 0
		add := func(a *corev1.EndpointAddress, ready bool) {
			if added >= MaxEndpointsPerSubset {
				return
			}
			ip := netutils.ParseIPSloppy(a.GetIp())
			if ip == nil {
				return // Kubernetes skips it, with a Warning event
			}
			at := "IPv4"
			if ip.To4() == nil {
				at = "IPv6"
			}
			k := at + "|" + portsKey(ports)
			g := groups[k]
			if g == nil {
				g = &group{addressType: at, ports: ports, seen: map[string]bool{}}
				groups[k] = g
				keys = append(keys, k)
			}
			e := &discoveryv1.Endpoint{Addresses: []string{ip.String()}, Conditions: &discoveryv1.EndpointConditions{Ready: proto.Bool(ready)},
				TargetRef: a.GetTargetRef(), NodeName: a.NodeName}
			if a.GetHostname() != "" {
				e.Hostname = proto.String(a.GetHostname())
			}
			if g.seen[ip.String()] {
				return
			}
			g.seen[ip.String()] = true
			g.endpoints = append(g.endpoints, e)
			added++
		}
		for _, a := range ss.GetAddresses() {
			add(a, true)
		}
		for _, a := range ss.GetNotReadyAddresses() {
			add(a, false)
		}
	}
	byKey := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		k := s.GetAddressType() + "|" + portsKey(s.GetPorts())
		byKey[k] = append(byKey[k], s)
	}
	for _, k := range keys {
		g := groups[k]
		want := newSlice(ep, g)
		cur := byKey[k]
		if len(cur) == 0 {
			create = append(create, want)
			continue
		}
		remove = append(remove, cur[1:]...)
		if sameSlice(cur[0], want) {
			continue
		}
		n := proto.Clone(cur[0]).(*discoveryv1.EndpointSlice)
		n.Endpoints, n.Ports = want.Endpoints, want.Ports
		n.Metadata.Labels, n.Metadata.Annotations = want.Metadata.Labels, want.Metadata.Annotations
		update = append(update, n)
	}
	var stale []*discoveryv1.EndpointSlice
	for k, ss := range byKey {
		if groups[k] == nil {
			stale = append(stale, ss...)
		}
	}
	sort.Slice(stale, func(i, j int) bool { return stale[i].GetMetadata().GetName() < stale[j].GetMetadata().GetName() })
	// Recycle: a slice to delete takes a new one's place (same address
	// type, the address type being immutable).
	var keep []*discoveryv1.EndpointSlice
	for _, c := range create {
		i := -1
		for j, s := range stale {
			if s.GetAddressType() == c.GetAddressType() {
				i = j
				break
			}
		}
		if i < 0 {
			keep = append(keep, c)
			continue
		}
		n := proto.Clone(stale[i]).(*discoveryv1.EndpointSlice)
		n.Endpoints, n.Ports = c.Endpoints, c.Ports
		n.Metadata.Labels, n.Metadata.Annotations = c.Metadata.Labels, c.Metadata.Annotations
		update = append(update, n)
		stale = append(stale[:i], stale[i+1:]...)
	}
	return keep, update, append(remove, stale...)
}

func sameSlice(a, b *discoveryv1.EndpointSlice) bool {
	eq := func(x, y []*discoveryv1.Endpoint) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if !proto.Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return eq(a.GetEndpoints(), b.GetEndpoints()) && maps.Equal(a.GetMetadata().GetLabels(), b.GetMetadata().GetLabels()) &&
		maps.Equal(a.GetMetadata().GetAnnotations(), b.GetMetadata().GetAnnotations())
}

// newSlice is Kubernetes' newEndpointSlice: the Endpoints' labels with
// the service name and managed-by, its annotations but the trigger time
// and kubectl's last-applied configuration, owned by the Endpoints.
func newSlice(ep *corev1.Endpoints, g *group) *discoveryv1.EndpointSlice {
	m := ep.GetMetadata()
	labels := maps.Clone(m.GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	labels[endpointslice.LabelServiceName] = m.GetName()
	labels[endpointslice.LabelManagedBy] = ControllerName
	var annotations map[string]string
	for k, v := range m.GetAnnotations() {
		if k == lastChangeTriggerTime || k == lastApplied {
			continue
		}
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[k] = v
	}
	return &discoveryv1.EndpointSlice{ApiVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice",
		Metadata: &metav1.ObjectMeta{Namespace: m.GetNamespace(), GenerateName: m.GetName() + "-", Labels: labels, Annotations: annotations,
			OwnerReferences: []*metav1.OwnerReference{{ApiVersion: "v1", Kind: "Endpoints", Name: m.GetName(), Uid: m.GetUid(),
				Controller: proto.Bool(true), BlockOwnerDeletion: proto.Bool(true)}}},
		AddressType: g.addressType, Ports: g.ports, Endpoints: g.endpoints}
}

func portsKey(ports []*discoveryv1.EndpointPort) string {
	parts := make([]string, 0, len(ports))
	for _, p := range ports {
		parts = append(parts, fmt.Sprintf("%s/%d/%s/%s", p.GetName(), p.GetPort(), p.GetProtocol(), p.GetAppProtocol()))
	}
	sort.Strings(parts)
	return fmt.Sprint(parts)
}
