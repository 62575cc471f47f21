// This file holds the cluster DNS of `kplane up`: one `kplane dns` process
// and the kube-dns Service in kube-system that pods' resolv.conf names.

package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/kplane/kplane/internal/freeport"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

const (
	// DNSServiceIP is the kube-dns Service's cluster IP, the node agents'
	// --cluster-dns: the tenth address of ServiceClusterIPRange, as
	// kubeadm picks it.
	DNSServiceIP = "10.96.0.10"
	// ClusterDomain is the zone the DNS serves and the node agents'
	// --cluster-domain.
	ClusterDomain = "cluster.local"
)

// startDNS creates the kube-dns Service and starts one `kplane dns`
// process on a free loopback port (one replica: nothing routes the
// Service's cluster IP to it on this machine; the simulated pods only
// get it in their resolv.conf). Names outside the zone go to the host's
// resolv.conf nameservers when it has one.
func (cp *ControlPlane) startDNS(ctx context.Context, id *identities, servers string, free *freeport.Picker) error {
	conn, err := cp.dial(cp.APIServers...)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := cp.poll(ctx, "the kube-dns Service", func(ctx context.Context) error {
		return createDNSService(ctx, client.Must[*corev1.Service](conn))
	}); err != nil {
		return err
	}
	p, err := free.Pick()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(cp.cfg.Host, strconv.Itoa(p))
	forward := "none"
	if _, err := os.Stat("/etc/resolv.conf"); err == nil {
		forward = "/etc/resolv.conf"
	}
	return cp.start("dns", "dns", addr,
		"--server", servers, "--ca-file", id.ca.file,
		"--cert-file", id.dns.certFile, "--key-file", id.dns.keyFile,
		"--listen", addr, "--cluster-domain", ClusterDomain, "--forward", forward,
		"--log-level", "warn")
}

// createDNSService creates kube-system/kube-dns as kubeadm's CoreDNS
// add-on does (cluster IP DNSServiceIP; dns and dns-tcp on 53; not
// CoreDNS's metrics port, which kplane dns does not serve), without a selector: the DNS is a process, not a pod, so the
// Service has no endpoints. One that exists is left as it is.
func createDNSService(ctx context.Context, svcs *client.Client[*corev1.Service]) error {
	_, err := svcs.Create(ctx, &corev1.Service{
		Metadata: &metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns",
			Labels: map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "kplane-dns"}},
		Spec: &corev1.ServiceSpec{ClusterIp: DNSServiceIP, Ports: []*corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: "UDP", TargetPort: &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 53}}},
			{Name: "dns-tcp", Port: 53, Protocol: "TCP", TargetPort: &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 53}}},
		}}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create kube-system/kube-dns: %w", err)
	}
	return nil
}
