// This file holds the ranges Services are addressed from — kube-apiserver's
// --service-cluster-ip-range and --service-node-port-range — and the
// allocator that hands out their members, each one recorded as its own key
// in the store and claimed in the same transaction as the Service that holds
// it (see docs/design.md, "Service addressing").

package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultServiceClusterIPRange is kube-apiserver's --service-cluster-ip-range
// when the flag is unset.
var DefaultServiceClusterIPRange = netip.MustParsePrefix("10.0.0.0/24")

// PortRange is an inclusive range of ports, as --service-node-port-range.
type PortRange struct {
	Base, Size int
}

// DefaultServiceNodePortRange is kube-apiserver's default
// --service-node-port-range, 30000-32767.
var DefaultServiceNodePortRange = PortRange{Base: 30000, Size: 2768}

// ParsePortRange parses "30000-32767" (or a single port).
func ParsePortRange(s string) (PortRange, error) {
	lo, hi, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		hi = lo
	}
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil || a < 1 || b > 65535 || b < a {
		return PortRange{}, fmt.Errorf("unable to parse port range: %s", s)
	}
	return PortRange{Base: a, Size: b - a + 1}, nil
}

func (p PortRange) String() string { return fmt.Sprintf("%d-%d", p.Base, p.Base+p.Size-1) }

// maxRangeMembers caps how many members of a (large, IPv6) range are used.
const maxRangeMembers = 1 << 24

// memberRange maps a range's members (IPs or ports) to indexes 0..size-1.
type memberRange struct {
	// what: "serviceIP" or "nodePort", as in Kubernetes' "failed to
	// allocate a serviceIP: range is full".
	what string
	// keyPrefix is the store prefix of the members' keys.
	keyPrefix string
	size      int
	// static is the low band Kubernetes keeps for requested members
	// (ServiceIPStaticSubrange, ServiceNodePortStaticSubrange): dynamic
	// allocation takes from above it while it can.
	static int
	name   func(i int) string
	index  func(name string) (int, bool)
}

// staticBand is the size of the band at the bottom of a range of size
// members that dynamic allocation leaves to requested members while the
// rest has room: size/step, at least lo and at most hi (ranges smaller than
// lo have none).
func staticBand(size, lo, hi, step int) int {
	if size < lo {
		return 0
	}
	return min(max(size/step, lo), hi)
}

// newIPRange is the members of a service CIDR: every address but the
// network address (and, for IPv4, the broadcast address).
func newIPRange(prefix string, cidr netip.Prefix) (*memberRange, error) {
	cidr = cidr.Masked()
	bits := cidr.Addr().BitLen() - cidr.Bits()
	if bits < 2 {
		return nil, fmt.Errorf("service IP range %s is too small", cidr)
	}
	total := new(big.Int).Lsh(big.NewInt(1), uint(bits))
	total.Sub(total, big.NewInt(1)) // the network address
	if cidr.Addr().Is4() {
		total.Sub(total, big.NewInt(1)) // the broadcast address
	}
	size := maxRangeMembers
	if total.IsInt64() && total.Int64() < maxRangeMembers {
		size = int(total.Int64())
	}
	base := new(big.Int).SetBytes(cidr.Addr().AsSlice())
	n := cidr.Addr().BitLen() / 8
	return &memberRange{
		what: "serviceIP", keyPrefix: prefix + "ranges/serviceips/", size: size,
		static: staticBand(size, 16, 256, 16),
		name: func(i int) string {
			v := new(big.Int).Add(base, big.NewInt(int64(i)+1))
			b := make([]byte, n)
			v.FillBytes(b)
			a, _ := netip.AddrFromSlice(b)
			return a.String()
		},
		index: func(name string) (int, bool) {
			a, err := netip.ParseAddr(name)
			if err != nil || !cidr.Contains(a) {
				return 0, false
			}
			d := new(big.Int).Sub(new(big.Int).SetBytes(a.AsSlice()), base)
			d.Sub(d, big.NewInt(1))
			if d.Sign() < 0 || !d.IsInt64() || d.Int64() >= int64(size) {
				return 0, false
			}
			return int(d.Int64()), true
		},
	}, nil
}

func newPortRange(prefix string, pr PortRange) *memberRange {
	return &memberRange{
		what: "nodePort", keyPrefix: prefix + "ranges/servicenodeports/", size: pr.Size,
		static: staticBand(pr.Size, 16, 128, 32),
		name:   func(i int) string { return strconv.Itoa(pr.Base + i) },
		index: func(name string) (int, bool) {
			p, err := strconv.Atoi(name)
			if err != nil || p < pr.Base || p >= pr.Base+pr.Size {
				return 0, false
			}
			return p - pr.Base, true
		},
	}
}

func (m *memberRange) key(name string) string { return m.keyPrefix + name }

// errRangeFull is the allocator's answer when every member is taken.
var errRangeFull = errors.New("range is full")

// pick chooses a member not in taken for a dynamic allocation: at random
// above the static band first, then in it. With blind set, taken is not
// known to be complete (the caller has not read the range) and pick only
// guesses above the band.
func (m *memberRange) pick(taken map[int]bool) (int, error) {
	lo := m.static
	if lo >= m.size {
		lo = 0
	}
	for _, band := range [][2]int{{lo, m.size}, {0, lo}} {
		n := band[1] - band[0]
		if n <= 0 {
			continue
		}
		start := rand.IntN(n)
		for j := range n {
			i := band[0] + (start+j)%n
			if !taken[i] {
				return i, nil
			}
		}
	}
	return 0, errRangeFull
}

// readTaken reads the members of the range held now (keys only).
func (m *memberRange) readTaken(ctx context.Context, cli *clientv3.Client) (map[int]bool, error) {
	resp, err := cli.Get(ctx, m.keyPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, storeErr(err)
	}
	taken := make(map[int]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if i, ok := m.index(strings.TrimPrefix(string(kv.Key), m.keyPrefix)); ok {
			taken[i] = true
		}
	}
	return taken, nil
}

// allocationOwner is the value of a member's key: the Service holding it.
type allocationOwner struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

func (o allocationOwner) value() string {
	b, _ := json.Marshal(o)
	return string(b)
}

func parseOwner(v []byte) (allocationOwner, bool) {
	var o allocationOwner
	if err := json.Unmarshal(v, &o); err != nil || o.UID == "" {
		return o, false
	}
	return o, true
}
