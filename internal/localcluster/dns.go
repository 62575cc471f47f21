// This file holds the cluster DNS of `kplane up`: one `kplane dns` process
// and the kube-dns Service in kube-system that pods' resolv.conf names,
// with, when real pods reach it through the Service proxy, the Endpoints
// that send its cluster IP to the process.

package localcluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/kplane/kplane/internal/freeport"
	"github.com/kplane/kplane/nodeagent"
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
// process (one replica). Names outside the zone go to the host's
// resolv.conf nameservers when it has one.
//
// With the built-in runtime (or containerd's host network) it listens on
// a free loopback port and nothing routes the Service's cluster IP to it:
// the simulated pods only get it in their resolv.conf. With containerd
// and pod networks, the Service proxy routes the cluster IP: the DNS
// listens on node-1's pod bridge address (its pod CIDR's gateway, bound
// before the bridge exists with --freebind), which every pod of the host
// reaches through its own bridge and the host, and no other machine
// does; the Service's Endpoints name that address and port, and the
// mirroring controller makes the EndpointSlice the proxy reads.
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
	host, routed, err := cp.dnsHost()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(host, strconv.Itoa(p))
	forward := "none"
	if _, err := os.Stat("/etc/resolv.conf"); err == nil {
		forward = "/etc/resolv.conf"
	}
	args := []string{"--server", servers, "--ca-file", id.ca.file,
		"--cert-file", id.dns.certFile, "--key-file", id.dns.keyFile,
		"--listen", addr, "--cluster-domain", ClusterDomain, "--forward", forward,
		"--log-level", "warn"}
	if routed {
		args = append(args, "--freebind")
		if err := cp.poll(ctx, "the kube-dns Endpoints", func(ctx context.Context) error {
			return putDNSEndpoints(ctx, client.Must[*corev1.Endpoints](conn), host, int32(p))
		}); err != nil {
			return err
		}
	}
	return cp.start("dns", "dns", addr, args...)
}

// dnsHost is the address the DNS listens on, and whether the Service
// proxy routes kube-dns's cluster IP to it: node-1's pod bridge address
// when the nodes run pods in networks of their own, else the loopback
// Host.
func (cp *ControlPlane) dnsHost() (string, bool, error) {
	cfg := cp.cfg
	if cfg.Runtime != "containerd" || cfg.HostNetwork || cfg.Nodes <= 0 {
		return cfg.Host, false, nil
	}
	cluster, mask := cfg.ClusterCIDR, cfg.NodeCIDRMaskSize
	if cluster == "" {
		cluster = nodeagent.DefaultClusterCIDR
	}
	if mask == 0 {
		mask = nodeagent.DefaultNodeCIDRMaskSize
	}
	subnet, err := nodeagent.NodeSubnet(cluster, mask, 1)
	if err != nil {
		return "", false, err
	}
	pfx, err := netip.ParsePrefix(subnet)
	if err != nil {
		return "", false, fmt.Errorf("node-1's pod CIDR %q: %w", subnet, err)
	}
	// The bridge plugin makes the subnet's first address the gateway.
	return pfx.Masked().Addr().Next().String(), true, nil
}

// putDNSEndpoints makes kube-system/kube-dns's Endpoints name the DNS's
// address and port (dns over UDP, dns-tcp over TCP), replacing what an
// earlier run wrote.
func putDNSEndpoints(ctx context.Context, eps *client.Client[*corev1.Endpoints], ip string, port int32) error {
	want := []*corev1.EndpointSubset{{
		Addresses: []*corev1.EndpointAddress{{Ip: ip}},
		Ports: []*corev1.EndpointPort{
			{Name: "dns", Port: port, Protocol: "UDP"},
			{Name: "dns-tcp", Port: port, Protocol: "TCP"},
		},
	}}
	cur, err := eps.Get(ctx, "kube-system", "kube-dns")
	if apierrors.IsNotFound(err) {
		_, err = eps.Create(ctx, &corev1.Endpoints{
			Metadata: &metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns", Labels: map[string]string{"k8s-app": "kube-dns"}},
			Subsets:  want})
	} else if err == nil {
		cur.Subsets = want
		_, err = eps.Update(ctx, cur)
	}
	if err != nil {
		return fmt.Errorf("kube-system/kube-dns Endpoints: %w", err)
	}
	return nil
}

// createDNSService creates kube-system/kube-dns as kubeadm's CoreDNS
// add-on does (cluster IP DNSServiceIP; dns and dns-tcp on 53; not
// CoreDNS's metrics port, which kplane dns does not serve), without a
// selector: the DNS is a process, not a pod, so its endpoints, if any,
// are written by hand (putDNSEndpoints). One that exists is left as it
// is.
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
