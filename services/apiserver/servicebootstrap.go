// This file holds what every API service replica keeps in place as
// kube-apiserver's bootstrap controller and lease endpoint reconciler do:
// the default/kubernetes Service (the first IP of the service range, port
// https 443 to the API's secure port), its Endpoints listing the addresses
// advertised by live replicas (each holds a store lease on
// <prefix>masterleases/<address>), and the repair of the cluster IP and node
// port records against the Services.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

const (
	// masterLeaseTTL is how long an advertised address stays listed after
	// its replica stopped renewing it (kube-apiserver's 15 s).
	masterLeaseTTL = 15
	// defaultEndpointReconcileInterval is kube-apiserver's 10 s.
	defaultEndpointReconcileInterval = 10 * time.Second
	// defaultServiceRepairInterval is Kubernetes' repair controllers' 3 min.
	defaultServiceRepairInterval = 3 * time.Minute
	// DefaultSecurePort is kube-apiserver's --secure-port default.
	DefaultSecurePort = 6443
)

func (s *Server) securePort() int32 {
	if s.cfg.SecurePort > 0 {
		return int32(s.cfg.SecurePort)
	}
	return DefaultSecurePort
}

// kubernetesService is the default/kubernetes Service as kube-apiserver
// writes it.
func (s *Server) kubernetesService() *corev1.Service {
	return &corev1.Service{
		Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "kubernetes",
			Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec: &corev1.ServiceSpec{
			Type:      "ClusterIP",
			ClusterIp: s.svcs.firstIP(),
			Ports: []*corev1.ServicePort{{Name: "https", Protocol: "TCP", Port: 443,
				TargetPort: &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: s.securePort()}}}},
			SessionAffinity: "None",
		},
	}
}

// reconcileKubernetesService creates the kubernetes Service if absent and
// puts its type and ports back if they were changed.
func (s *Server) reconcileKubernetesService(ctx context.Context) error {
	r := s.resources["services"]
	want := s.kubernetesService()
	cur, err := s.store.get(ctx, r, "default", "kubernetes")
	if apierrors.IsNotFound(err) {
		err = s.writeInternal(ctx, r, want, nil)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	svc := cur.(*corev1.Service)
	wantPorts := want.GetSpec().GetPorts()
	setDefaults(&corev1.Service{Spec: &corev1.ServiceSpec{Ports: wantPorts}})
	if svc.GetSpec().GetType() == "ClusterIP" && len(svc.GetSpec().GetPorts()) == 1 && proto.Equal(svc.GetSpec().GetPorts()[0], wantPorts[0]) {
		return nil
	}
	n := proto.Clone(svc).(*corev1.Service)
	n.Spec.Type = "ClusterIP"
	n.Spec.Ports = wantPorts
	return s.writeInternal(ctx, r, n, svc)
}

// writeInternal creates obj (old nil) or updates old to obj with defaults,
// validation and the Service addresses, without authentication,
// authorization or admission plugins: the service's own objects.
func (s *Server) writeInternal(ctx context.Context, r *resourceInfo, obj, old proto.Message) error {
	obj = proto.Clone(obj)
	setTypeMeta(r, obj)
	m := meta(obj)
	if old == nil {
		prepareForCreate(r, obj)
	} else {
		prepareForUpdate(r, obj, old)
	}
	setDefaults(obj)
	var err error
	if svc, ok := obj.(*corev1.Service); ok {
		err = s.validateService(r, svc, old)
	} else {
		err = validateObject(r, obj, old)
	}
	if err != nil {
		return err
	}
	if old == nil {
		_, err = s.storeCreate(ctx, r, obj, nil)
		return err
	}
	rev, _ := parseRV(meta(old).GetResourceVersion())
	_, err = s.storeUpdate(ctx, r, m.GetNamespace(), m.GetName(), rev, obj, old, nil)
	return err
}

// masterLeases keeps this replica's advertised address listed under
// <prefix>masterleases/ with a store lease that lapses unless renewed.
type masterLeases struct {
	cli    *clientv3.Client
	prefix string
	lease  clientv3.LeaseID
}

// renew writes addr's key with a new lease and revokes the previous one.
func (m *masterLeases) renew(ctx context.Context, addr string) error {
	g, err := m.cli.Grant(ctx, masterLeaseTTL)
	if err != nil {
		return fmt.Errorf("granting the master lease: %w", err)
	}
	if _, err := m.cli.Put(ctx, m.prefix+addr, addr, clientv3.WithLease(g.ID)); err != nil {
		return fmt.Errorf("writing the master lease: %w", err)
	}
	if m.lease != 0 {
		_, _ = m.cli.Revoke(ctx, m.lease)
	}
	m.lease = g.ID
	return nil
}

// live lists the addresses whose leases are current, sorted.
func (m *masterLeases) live(ctx context.Context) ([]string, error) {
	resp, err := m.cli.Get(ctx, m.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("listing the master leases: %w", err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, strings.TrimPrefix(string(kv.Key), m.prefix))
	}
	slices.Sort(out)
	return out, nil
}

// reconcileKubernetesEndpoints sets default/kubernetes' Endpoints to the
// advertised addresses with live leases.
func (s *Server) reconcileKubernetesEndpoints(ctx context.Context, ml *masterLeases) error {
	if !s.cfg.AdvertiseAddress.IsValid() {
		return nil
	}
	if err := ml.renew(ctx, s.cfg.AdvertiseAddress.String()); err != nil {
		return err
	}
	addrs, err := ml.live(ctx)
	if err != nil {
		return err
	}
	want := &corev1.Endpoints{
		Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "kubernetes",
			Labels: map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"}},
	}
	if len(addrs) > 0 {
		ss := &corev1.EndpointSubset{Ports: []*corev1.EndpointPort{{Name: "https", Port: s.securePort(), Protocol: "TCP"}}}
		for _, a := range addrs {
			ss.Addresses = append(ss.Addresses, &corev1.EndpointAddress{Ip: a})
		}
		want.Subsets = []*corev1.EndpointSubset{ss}
	}
	r := s.resources["endpoints"]
	cur, err := s.store.get(ctx, r, "default", "kubernetes")
	if apierrors.IsNotFound(err) {
		err = s.writeInternal(ctx, r, want, nil)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	ep := cur.(*corev1.Endpoints)
	if slicesEqualProto(ep.GetSubsets(), want.GetSubsets()) && ep.GetMetadata().GetLabels()["endpointslice.kubernetes.io/skip-mirror"] == "true" {
		return nil
	}
	n := proto.Clone(ep).(*corev1.Endpoints)
	n.Subsets = want.Subsets
	if n.Metadata.Labels == nil {
		n.Metadata.Labels = map[string]string{}
	}
	n.Metadata.Labels["endpointslice.kubernetes.io/skip-mirror"] = "true"
	err = s.writeInternal(ctx, r, n, ep)
	var ce *casError
	if errors.As(err, &ce) {
		return nil // another replica wrote it; the next round looks again
	}
	return err
}

func slicesEqualProto[T proto.Message](a, b []T) bool {
	return slices.EqualFunc(a, b, func(x, y T) bool { return proto.Equal(x, y) })
}

// runKubernetesService keeps the kubernetes Service and its Endpoints in
// place every interval until ctx ends; first is called after the first
// round (whatever its outcome).
func (s *Server) runKubernetesService(ctx context.Context, first func()) {
	every := s.cfg.EndpointReconcileInterval
	if every <= 0 {
		every = defaultEndpointReconcileInterval
	}
	ml := &masterLeases{cli: s.store.cli, prefix: s.cfg.Prefix + "masterleases/"}
	for {
		if err := s.reconcileKubernetesService(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("reconciling the kubernetes service", "err", err)
		}
		if err := s.reconcileKubernetesEndpoints(ctx, ml); err != nil && ctx.Err() == nil {
			s.log.Warn("reconciling the kubernetes service's endpoints", "err", err)
		}
		if err := s.reconcileKubernetesEndpointSlice(ctx, ml); err != nil && ctx.Err() == nil {
			s.log.Warn("reconciling the kubernetes service's endpoint slice", "err", err)
		}
		if first != nil {
			first()
			first = nil
		}
		if !sleep(ctx, every) {
			return
		}
	}
}
