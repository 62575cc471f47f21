// This file holds how a node's pod CIDR is carved out of the cluster's.

package nodeagent

import (
	"fmt"
	"net/netip"
)

// The defaults of `kplane nodeagent` and `kplane up` for the nodes' pod
// CIDRs: /24s of 10.244.0.0/16 (kubeadm's and flannel's usual range),
// room for 256 nodes.
const (
	DefaultClusterCIDR      = "10.244.0.0/16"
	DefaultNodeCIDRMaskSize = 24
)

// NodeSubnet is the i-th (from 1) /mask subnet of an IPv4 cluster CIDR:
// the pod CIDR of node i of `kplane nodeagent --nodes` and of `kplane up`.
func NodeSubnet(cluster string, mask, i int) (string, error) {
	p, err := netip.ParsePrefix(cluster)
	if err != nil {
		return "", err
	}
	if !p.Addr().Is4() || mask < p.Bits() || mask > 30 {
		return "", fmt.Errorf("cluster CIDR %s: need IPv4 and a node mask between %d and 30", cluster, p.Bits())
	}
	if i >= 1<<(mask-p.Bits()) {
		return "", fmt.Errorf("cluster CIDR %s has no room for %d /%d subnets", cluster, i+1, mask)
	}
	b := p.Masked().Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	n := base + uint32(i)<<(32-mask)
	a := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	return netip.PrefixFrom(a, mask).String(), nil
}
