// This file holds a pod's DNS configuration, as the kubelet forms it from
// the pod's dnsPolicy and dnsConfig, the node's cluster DNS servers and
// domain, and the host's resolv.conf: the CRI PodSandboxConfig.DnsConfig
// the runtime writes the pod's /etc/resolv.conf from.

package nodeagent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// Limits of a pod's resolv.conf, as Kubernetes' API validation and the
// kubelet enforce them.
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
	maxDNSSearchLength    = 253 // a DNS-1123 subdomain
	maxResolvConfBytes    = 10 << 20
	// DefaultResolvConf is the host resolv.conf read for dnsPolicy
	// Default (the kubelet's --resolv-conf default).
	DefaultResolvConf = "/etc/resolv.conf"
)

// dnsSettings are what a node contributes to its pods' DNS.
type dnsSettings struct {
	clusterDNS    []string // --cluster-dns
	clusterDomain string   // --cluster-domain
	// resolvConf is the host file; "" means none, as the kubelet's
	// --resolv-conf="": Default pods get nameserver 127.0.0.1 and search ".".
	resolvConf string
	nodeIPs    []string
	// hostNetwork: every pod runs in the node's network namespace (the
	// agent's HostNetwork), so each counts as a hostNetwork pod here: a
	// ClusterFirst pod gets Default, since a cluster IP is not reachable
	// from the node's network without a service proxy.
	hostNetwork bool
}

// dnsWarning is an Event the kubelet would record while forming a pod's
// DNS configuration.
type dnsWarning struct {
	onNode          bool // about the Node rather than the pod
	reason, message string
}

// podDNS forms pod's DNS configuration from its dnsPolicy and dnsConfig:
// ClusterFirst (not host network) and ClusterFirstWithHostNet use the
// cluster DNS servers with the search path <ns>.svc.<domain>,
// svc.<domain>, <domain> then the host's, and ndots:5; Default (and
// ClusterFirst on the host network) the host's resolv.conf; None nothing
// but dnsConfig. dnsConfig's nameservers and searches are appended (each
// once) and its options override those of the same name. Without cluster
// DNS servers ClusterFirst falls back to Default with the kubelet's
// MissingClusterDNS warnings. The result is cut to the resolver's limits
// (3 nameservers, 32 search domains of at most 2048 characters in all),
// with a DNSConfigForming warning when it is.
func podDNS(pod *corev1.Pod, s dnsSettings) (*runtimeapi.DNSConfig, []dnsWarning, error) {
	host := &runtimeapi.DNSConfig{}
	if s.resolvConf != "" {
		b, err := os.ReadFile(s.resolvConf)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the host resolv.conf: %w", err)
		}
		if len(b) > maxResolvConfBytes {
			return nil, nil, fmt.Errorf("host resolv.conf %s: larger than %d bytes", s.resolvConf, maxResolvConfBytes)
		}
		host = parseResolvConf(b)
	}
	spec := pod.GetSpec()
	cluster := false
	switch spec.GetDnsPolicy() {
	case "None":
		host = &runtimeapi.DNSConfig{}
	case "ClusterFirstWithHostNet":
		cluster = true
	case "Default":
	default: // ClusterFirst, the API's default
		cluster = !spec.GetHostNetwork() && !s.hostNetwork
	}
	var warnings []dnsWarning
	cfg := host
	if cluster && len(s.clusterDNS) == 0 {
		msg := fmt.Sprintf("kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.", "ClusterFirst", "Default")
		m := pod.GetMetadata()
		warnings = append(warnings, dnsWarning{onNode: true, reason: "MissingClusterDNS", message: msg},
			dnsWarning{reason: "MissingClusterDNS", message: fmt.Sprintf("pod: %q. %s", m.GetName()+"_"+m.GetNamespace()+"("+m.GetUid()+")", msg)})
		cluster = false
	}
	switch {
	case cluster:
		search := host.Searches
		if s.clusterDomain != "" {
			ns := pod.GetMetadata().GetNamespace()
			search = uniq(append([]string{ns + ".svc." + s.clusterDomain, "svc." + s.clusterDomain, s.clusterDomain}, host.Searches...))
		}
		cfg = &runtimeapi.DNSConfig{Servers: slices.Clone(s.clusterDNS), Searches: search, Options: []string{"ndots:5"}}
	case spec.GetDnsPolicy() != "None" && s.resolvConf == "":
		// No host resolv.conf: the local machine's resolver, as the
		// kubelet does with --resolv-conf="".
		cfg.Servers = nil
		for _, ip := range s.nodeIPs {
			if strings.Contains(ip, ":") {
				cfg.Servers = append(cfg.Servers, "::1")
			} else {
				cfg.Servers = append(cfg.Servers, "127.0.0.1")
			}
		}
		if len(cfg.Servers) == 0 {
			cfg.Servers = []string{"127.0.0.1"}
		}
		cfg.Searches = []string{"."}
	}
	if dc := spec.GetDnsConfig(); dc != nil {
		cfg.Servers = uniq(append(cfg.Servers, dc.GetNameservers()...))
		cfg.Searches = uniq(append(cfg.Searches, dc.GetSearches()...))
		cfg.Options = mergeOptions(cfg.Options, dc.GetOptions())
	}
	if len(cfg.Servers) > maxDNSNameservers {
		cfg.Servers = cfg.Servers[:maxDNSNameservers]
		warnings = append(warnings, dnsWarning{reason: "DNSConfigForming",
			message: "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: " + strings.Join(cfg.Servers, " ")})
	}
	if search, cut := fitSearch(cfg.Searches); cut {
		cfg.Searches = search
		warnings = append(warnings, dnsWarning{reason: "DNSConfigForming",
			message: "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " + strings.Join(search, " ")})
	}
	return cfg, warnings, nil
}

// fitSearch cuts a search list to the limits: at most 32 domains, none
// longer than 253 characters, at most 2048 characters joined by spaces
// (dropping from the end). It reports whether anything was cut.
func fitSearch(search []string) ([]string, bool) {
	cut := false
	if len(search) > maxDNSSearchPaths {
		search, cut = search[:maxDNSSearchPaths], true
	}
	kept := search[:0:0]
	for _, d := range search {
		if len(d) > maxDNSSearchLength {
			cut = true
			continue
		}
		kept = append(kept, d)
	}
	for len(kept) > 0 && len(strings.Join(kept, " ")) > maxDNSSearchListChars {
		kept, cut = kept[:len(kept)-1], true
	}
	return kept, cut
}

// parseResolvConf reads a resolv.conf as the kubelet does: nameserver
// lines accumulate, the last search line wins (without "." and trailing
// dots), options accumulate with a later option of the same name replacing
// an earlier one.
func parseResolvConf(b []byte) *runtimeapi.DNSConfig {
	cfg := &runtimeapi.DNSConfig{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), maxResolvConfBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) >= 2 {
				cfg.Servers = append(cfg.Servers, f[1])
			}
		case "search":
			cfg.Searches = nil
			for _, d := range f[1:] {
				if d != "." {
					cfg.Searches = append(cfg.Searches, strings.TrimSuffix(d, "."))
				}
			}
		case "options":
			for _, o := range f[1:] {
				name, _, _ := strings.Cut(o, ":")
				cfg.Options = slices.DeleteFunc(cfg.Options, func(x string) bool { n, _, _ := strings.Cut(x, ":"); return n == name })
				cfg.Options = append(cfg.Options, o)
			}
		}
	}
	return cfg
}

// mergeOptions overrides or adds dnsConfig's options to existing ones (an
// option without a value is written bare). The kubelet's order is a Go
// map's; ours is the existing options' order, then the new ones'.
func mergeOptions(existing []string, add []*corev1.PodDNSConfigOption) []string {
	out := slices.Clone(existing)
	for _, o := range add {
		v := o.GetName()
		if o.Value != nil && o.GetValue() != "" {
			v += ":" + o.GetValue()
		}
		i := slices.IndexFunc(out, func(x string) bool { n, _, _ := strings.Cut(x, ":"); return n == o.GetName() })
		if i >= 0 {
			out[i] = v
		} else {
			out = append(out, v)
		}
	}
	return out
}

func uniq(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// dnsSettings are the agent's DNS settings for its pods.
func (a *Agent) dnsSettings() dnsSettings {
	s := dnsSettings{clusterDNS: a.cfg.ClusterDNS, clusterDomain: a.cfg.ClusterDomain, resolvConf: a.cfg.ResolvConf,
		nodeIPs: []string{a.cfg.HostIP}, hostNetwork: a.cfg.HostNetwork}
	if s.resolvConf == "" && !a.cfg.NoResolvConf {
		s.resolvConf = DefaultResolvConf
	}
	return s
}

// podDNSConfig forms pod's DNS configuration and records the kubelet's
// warnings about it as Events.
func (a *Agent) podDNSConfig(pod *corev1.Pod) (*runtimeapi.DNSConfig, error) {
	cfg, warnings, err := podDNS(pod, a.dnsSettings())
	for _, w := range warnings {
		if w.onNode {
			node := &corev1.Node{Metadata: &metav1.ObjectMeta{Name: a.cfg.NodeName, Uid: a.cfg.NodeName}}
			a.rec.Eventf(node, client.EventWarning, w.reason, "%s", w.message)
		} else {
			a.rec.Eventf(pod, client.EventWarning, w.reason, "%s", w.message)
		}
	}
	return cfg, err
}
