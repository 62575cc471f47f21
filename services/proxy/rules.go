// This file holds the rule computation: the service ports of the model,
// and the nodes this proxy serves, turned into the nftables objects of the
// proxy's table (base chains, the dispatch maps, a chain per service port,
// per endpoint and per set of local endpoints, and the session-affinity
// sets), without touching the kernel.

package proxy

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"sigs.k8s.io/knftables"
)

// Names of the table's fixed chains and maps.
const (
	chainNatPrerouting  = "nat-prerouting"
	chainNatOutput      = "nat-output"
	chainNatPostrouting = "nat-postrouting"
	chainFilterInput    = "filter-input"
	chainFilterForward  = "filter-forward"
	chainFilterOutput   = "filter-output"
	chainServices       = "services"
	chainMasquerading   = "masquerading"
	chainMarkMasq       = "mark-for-masquerade"
	chainReject         = "reject-chain"
	chainSvcCheck       = "service-endpoints-check"
	chainNodePortCheck  = "nodeport-endpoints-check"

	mapServiceIPs       = "service-ips"
	mapServiceNodePorts = "service-nodeports"
	mapNoEndpointIPs    = "no-endpoint-services"
	mapNoEndpointPorts  = "no-endpoint-nodeports"

	// masqueradeBit marks a packet for masquerading in postrouting; the
	// bit kube-proxy uses, so the two never disagree on a host.
	masqueradeBit = "0x00004000"
)

// hostNode is one node this proxy serves, with its pod CIDR.
type hostNode struct {
	Name    string
	PodCIDR netip.Prefix // invalid when the node has none yet
}

// topology is what the rules need to know about the host: the cluster's
// pod network (traffic from outside it to a cluster IP is masqueraded;
// invalid: unknown, nothing is) and the nodes served, sorted by name.
type topology struct {
	ClusterCIDR netip.Prefix
	Nodes       []hostNode
}

// nodeNames are the served nodes' names.
func (t topology) nodeNames() []string {
	out := make([]string, len(t.Nodes))
	for i, n := range t.Nodes {
		out[i] = n.Name
	}
	return out
}

// chainRules is one chain and its rules in order.
type chainRules struct {
	chain *knftables.Chain
	rules []string
}

// mapElements is one verdict map and its elements.
type mapElements struct {
	m        *knftables.Map
	elements []*knftables.Element
}

// ruleset is the desired content of the table.
type ruleset struct {
	chains []*chainRules
	maps   []*mapElements
	// sets are the session-affinity sets: added, never flushed, so that
	// a sync keeps the clients they remember.
	sets []*knftables.Set
}

func (rs *ruleset) add(c *knftables.Chain, rules ...string) *chainRules {
	cr := &chainRules{chain: c, rules: rules}
	rs.chains = append(rs.chains, cr)
	return cr
}

func baseChain(name string, t knftables.BaseChainType, hook knftables.BaseChainHook, prio knftables.BaseChainPriority) *knftables.Chain {
	return &knftables.Chain{Name: name, Type: &t, Hook: &hook, Priority: &prio}
}

// shortID is a stable 8-character digest of s, which keeps generated
// names unique however their readable part is cut.
func shortID(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])[:8]
}

// objectName is prefix-ID-readable, cut to what nft takes.
func objectName(prefix, key, readable string) string {
	n := prefix + "-" + shortID(key) + "-" + readable
	if len(n) > 200 {
		n = n[:200]
	}
	return n
}

func chainFor(prefix, key, readable string) *knftables.Chain {
	return &knftables.Chain{Name: objectName(prefix, key, readable)}
}

// buildRuleset computes the desired table for the service ports on this
// host's topology.
func buildRuleset(ports []*servicePort, topo topology) *ruleset {
	rs := &ruleset{}
	// Before DNAT nothing but the fixed dispatch happens; a new
	// connection to a service port without endpoints is rejected in the
	// filter hooks, where reject is allowed (after DNAT, which leaves it
	// alone since no map entry names it).
	rs.add(baseChain(chainNatPrerouting, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority), "jump "+chainServices)
	rs.add(baseChain(chainNatOutput, knftables.NATType, knftables.OutputHook, "-100"), "jump "+chainServices)
	rs.add(baseChain(chainNatPostrouting, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority), "jump "+chainMasquerading)
	rs.add(baseChain(chainFilterInput, knftables.FilterType, knftables.InputHook, "-10"),
		"ct state new jump "+chainNodePortCheck)
	rs.add(baseChain(chainFilterForward, knftables.FilterType, knftables.ForwardHook, "-10"),
		"ct state new jump "+chainSvcCheck)
	rs.add(baseChain(chainFilterOutput, knftables.FilterType, knftables.OutputHook, "-10"),
		"ct state new jump "+chainSvcCheck, "ct state new jump "+chainNodePortCheck)
	rs.add(&knftables.Chain{Name: chainMarkMasq}, "meta mark set meta mark | "+masqueradeBit)
	rs.add(&knftables.Chain{Name: chainMasquerading},
		"meta mark & "+masqueradeBit+" == 0 return",
		"meta mark set meta mark ^ "+masqueradeBit,
		"masquerade fully-random")
	rs.add(&knftables.Chain{Name: chainReject}, "meta l4proto tcp reject with tcp reset", "reject")
	rs.add(&knftables.Chain{Name: chainSvcCheck}, "ip daddr . meta l4proto . th dport vmap @"+mapNoEndpointIPs)
	rs.add(&knftables.Chain{Name: chainNodePortCheck}, "fib daddr type local meta l4proto . th dport vmap @"+mapNoEndpointPorts)
	rs.add(&knftables.Chain{Name: chainServices},
		"ip daddr . meta l4proto . th dport vmap @"+mapServiceIPs,
		// Node ports answer on every local address but loopback, which
		// would need route_localnet (kube-proxy's default too).
		"fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @"+mapServiceNodePorts)

	ipKey := "ipv4_addr . inet_proto . inet_service : verdict"
	portKey := "inet_proto . inet_service : verdict"
	svcIPs := &mapElements{m: &knftables.Map{Name: mapServiceIPs, Type: ipKey}}
	nodePorts := &mapElements{m: &knftables.Map{Name: mapServiceNodePorts, Type: portKey}}
	noEpIPs := &mapElements{m: &knftables.Map{Name: mapNoEndpointIPs, Type: ipKey}}
	noEpPorts := &mapElements{m: &knftables.Map{Name: mapNoEndpointPorts, Type: portKey}}
	rs.maps = []*mapElements{svcIPs, nodePorts, noEpIPs, noEpPorts}

	for _, sp := range ports {
		b := portBuilder{rs: rs, sp: sp, topo: topo}
		ipKey := []string{sp.ClusterIP.String(), sp.Protocol, fmt.Sprint(sp.Port)}
		portKey := []string{sp.Protocol, fmt.Sprint(sp.NodePort)}
		comment := knftables.PtrTo(sp.name())
		cluster := sp.clusterEndpoints()
		if len(cluster) == 0 {
			// No endpoint anywhere: refuse rather than let clients hang.
			noEpIPs.elements = append(noEpIPs.elements, &knftables.Element{Key: ipKey, Value: []string{"goto " + chainReject}, Comment: comment})
			if sp.NodePort != 0 {
				noEpPorts.elements = append(noEpPorts.elements, &knftables.Element{Key: portKey, Value: []string{"goto " + chainReject}, Comment: comment})
			}
			continue
		}
		clusterChain := b.clusterChain(cluster)
		internal := clusterChain
		if sp.InternalLocal {
			internal = b.internalLocalChain()
		}
		svcIPs.elements = append(svcIPs.elements, &knftables.Element{Key: ipKey, Value: []string{"goto " + internal}, Comment: comment})
		if sp.NodePort != 0 {
			nodePorts.elements = append(nodePorts.elements, &knftables.Element{Key: portKey, Value: []string{"goto " + b.externalChain(clusterChain)}, Comment: comment})
		}
	}
	return rs
}

// portBuilder builds the chains of one service port.
type portBuilder struct {
	rs   *ruleset
	sp   *servicePort
	topo topology
	// made remembers the endpoint chains and local chains already built.
	made map[string]bool
}

// clusterChain is the service port's chain over every usable endpoint:
// traffic to the cluster IP from outside the cluster's pod network (the
// host, say) is marked for masquerading, so replies come back through
// this host; then the endpoints are chosen among.
func (b *portBuilder) clusterChain(eps []endpoint) string {
	sp := b.sp
	c := chainFor("service", sp.name(), sp.name())
	var rules []string
	if b.topo.ClusterCIDR.IsValid() {
		rules = append(rules, fmt.Sprintf("ip daddr %s %s dport %d ip saddr != %s jump %s",
			sp.ClusterIP, sp.Protocol, sp.Port, b.topo.ClusterCIDR, chainMarkMasq))
	}
	b.rs.add(c, append(rules, b.balance(eps)...)...)
	return c.Name
}

// balance is the rules that send a packet to one of eps: to the endpoint
// a client's session sticks to when affinity is on, else to a random one.
func (b *portBuilder) balance(eps []endpoint) []string {
	var rules []string
	targets := make([]string, len(eps))
	for i, e := range eps {
		ep, aff := b.endpointChain(e)
		targets[i] = fmt.Sprintf("%d : goto %s", i, ep)
		if aff != "" {
			rules = append(rules, fmt.Sprintf("ip saddr @%s goto %s", aff, ep))
		}
	}
	return append(rules, fmt.Sprintf("numgen random mod %d vmap { %s }", len(eps), strings.Join(targets, " , ")))
}

// endpointChain builds (once) the chain that sends to e: a packet from
// the endpoint itself (a pod reaching itself through its Service) is
// masqueraded, or its reply would not come back through the DNAT; the
// client is remembered for affinity; then DNAT. It returns the chain's
// name and the affinity set's ("" without affinity).
func (b *portBuilder) endpointChain(e endpoint) (chain, affinity string) {
	sp := b.sp
	readable := sp.name() + "__" + e.Addr.String() + "/" + fmt.Sprint(e.Port)
	c := chainFor("endpoint", readable, readable)
	rules := []string{fmt.Sprintf("ip saddr %s jump %s", e.Addr, chainMarkMasq)}
	if sp.AffinitySeconds > 0 {
		// The timeout is part of the key: a changed timeout is a new set
		// (nft cannot change a set's timeout in place).
		key := fmt.Sprintf("%s/%ds", readable, sp.AffinitySeconds)
		affinity = objectName("affinity", key, readable)
		rules = append(rules, fmt.Sprintf("update @%s { ip saddr }", affinity))
	}
	rules = append(rules, fmt.Sprintf("meta l4proto %s dnat to %s", sp.Protocol, e))
	if b.made == nil {
		b.made = map[string]bool{}
	}
	if !b.made[c.Name] {
		b.made[c.Name] = true
		b.rs.add(c, rules...)
		if affinity != "" {
			timeout := time.Duration(sp.AffinitySeconds) * time.Second
			b.rs.sets = append(b.rs.sets, &knftables.Set{Name: affinity, Type: "ipv4_addr",
				Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag}, Timeout: &timeout,
				Comment: knftables.PtrTo("clients of " + sp.name() + " on " + e.String())})
		}
	}
	return c.Name, affinity
}

// localChain builds (once) the chain over the usable endpoints on nodes,
// named for who (a node, or "host" for every served node); with none it
// drops, as kube-proxy does for a Local policy without local endpoints.
func (b *portBuilder) localChain(who string, nodes []string) string {
	sp := b.sp
	readable := sp.name() + "/" + who
	c := chainFor("local", readable, readable)
	if b.made[c.Name] {
		return c.Name
	}
	eps := sp.localEndpoints(nodes...)
	var rules []string
	if len(eps) == 0 {
		rules = []string{"drop"}
	} else {
		rules = b.balance(eps)
	}
	if b.made == nil {
		b.made = map[string]bool{}
	}
	b.made[c.Name] = true
	b.rs.add(c, rules...)
	return c.Name
}

// internalLocalChain is internalTrafficPolicy Local's chain. On a host
// whose nodes all share one network namespace, "local" depends on who
// sends: a pod of a served node (by its node's pod CIDR) gets its node's
// endpoints; anything else this host sends (the host itself) gets the
// endpoints of every served node, all of which are on this host.
func (b *portBuilder) internalLocalChain() string {
	sp := b.sp
	c := chainFor("internal", sp.name(), sp.name())
	var rules []string
	if b.topo.ClusterCIDR.IsValid() {
		rules = append(rules, fmt.Sprintf("ip saddr != %s jump %s", b.topo.ClusterCIDR, chainMarkMasq))
	}
	for _, n := range b.topo.Nodes {
		if n.PodCIDR.IsValid() {
			rules = append(rules, fmt.Sprintf("ip saddr %s goto %s", n.PodCIDR, b.localChain(n.Name, []string{n.Name})))
		}
	}
	rules = append(rules, "goto "+b.localChain("host", b.topo.nodeNames()))
	b.rs.add(c, rules...)
	return c.Name
}

// externalChain is the chain of traffic to the node port. With
// externalTrafficPolicy Cluster it is masqueraded (the endpoint may be
// elsewhere) and goes to the cluster chain. With Local, pods of the
// cluster and the host itself still use the cluster chain (the host
// masqueraded), as kube-proxy does; what comes from elsewhere keeps its
// source address and goes to the endpoints on this host's nodes, or is
// dropped when there are none.
func (b *portBuilder) externalChain(cluster string) string {
	sp := b.sp
	c := chainFor("external", sp.name(), sp.name())
	if !sp.ExternalLocal {
		b.rs.add(c, "jump "+chainMarkMasq, "goto "+cluster)
		return c.Name
	}
	var rules []string
	if b.topo.ClusterCIDR.IsValid() {
		rules = append(rules, fmt.Sprintf("ip saddr %s goto %s", b.topo.ClusterCIDR, cluster))
	}
	rules = append(rules,
		"fib saddr type local jump "+chainMarkMasq,
		"fib saddr type local goto "+cluster,
		"goto "+b.localChain("host", b.topo.nodeNames()))
	b.rs.add(c, rules...)
	return c.Name
}
