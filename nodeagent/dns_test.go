// This file holds the tests of a pod's DNS configuration per dnsPolicy:
// the servers, search path and options the sandbox gets, dnsConfig merged
// in, the MissingClusterDNS fall-back and the resolver's limits.

package nodeagent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func TestPodDNS(t *testing.T) {
	dir := t.TempDir()
	hostConf := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(hostConf, []byte("# host\nnameserver 192.0.2.53\nnameserver 192.0.2.54\nsearch old.example\nsearch corp.example. .\noptions ndots:1 timeout:2\noptions ndots:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cluster := dnsSettings{clusterDNS: []string{"10.96.0.10"}, clusterDomain: "cluster.local", resolvConf: hostConf, nodeIPs: []string{"127.0.0.1"}}
	noClusterDNS := cluster
	noClusterDNS.clusterDNS = nil
	agentHostNet := cluster
	agentHostNet.hostNetwork = true
	noHostConf := cluster
	noHostConf.resolvConf = ""
	one := "1"
	pod := func(policy string, hostNet bool, dc *corev1.PodDNSConfig) *corev1.Pod {
		return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "team", Name: "p", Uid: "u1"},
			Spec: &corev1.PodSpec{DnsPolicy: policy, HostNetwork: hostNet, DnsConfig: dc}}
	}
	host := &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53", "192.0.2.54"}, Searches: []string{"corp.example"}, Options: []string{"timeout:2", "ndots:2"}}
	clusterFirst := &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"},
		Searches: []string{"team.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:5"}}
	long := strings.Repeat("a", 254)
	var many []string
	for i := range 40 {
		many = append(many, "d"+strings.Repeat("x", 60)+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	tests := []struct {
		name     string
		pod      *corev1.Pod
		settings dnsSettings
		want     *runtimeapi.DNSConfig
		warnings []string
	}{
		{name: "ClusterFirst", pod: pod("ClusterFirst", false, nil), settings: cluster, want: clusterFirst},
		{name: "empty policy is ClusterFirst", pod: pod("", false, nil), settings: cluster, want: clusterFirst},
		{name: "ClusterFirst on the host network is Default", pod: pod("ClusterFirst", true, nil), settings: cluster, want: host},
		{name: "ClusterFirstWithHostNet", pod: pod("ClusterFirstWithHostNet", true, nil), settings: cluster, want: clusterFirst},
		{name: "ClusterFirst on an agent that runs every pod on the host network is Default", pod: pod("ClusterFirst", false, nil), settings: agentHostNet, want: host},
		{name: "ClusterFirstWithHostNet on such an agent", pod: pod("ClusterFirstWithHostNet", false, nil), settings: agentHostNet, want: clusterFirst},
		{name: "Default", pod: pod("Default", false, nil), settings: cluster, want: host},
		{name: "None: only dnsConfig", settings: cluster,
			pod:  pod("None", false, &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []*corev1.PodDNSConfigOption{{Name: "ndots", Value: &one}, {Name: "edns0"}}}),
			want: &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []string{"ndots:1", "edns0"}}},
		{name: "ClusterFirst with dnsConfig merged", settings: cluster,
			pod: pod("ClusterFirst", false, &corev1.PodDNSConfig{Nameservers: []string{"10.96.0.10", "192.0.2.99"}, Searches: []string{"cluster.local", "extra.example"},
				Options: []*corev1.PodDNSConfigOption{{Name: "ndots", Value: &one}, {Name: "single-request-reopen"}}}),
			want: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10", "192.0.2.99"},
				Searches: []string{"team.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example", "extra.example"},
				Options:  []string{"ndots:1", "single-request-reopen"}}},
		{name: "no cluster DNS: ClusterFirst falls back to Default", pod: pod("ClusterFirst", false, nil), settings: noClusterDNS, want: host,
			warnings: []string{
				`node MissingClusterDNS kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`,
				`pod MissingClusterDNS pod: "p_team(u1)". kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`,
			}},
		{name: "no host resolv.conf: Default is the local resolver", pod: pod("Default", false, nil), settings: noHostConf,
			want: &runtimeapi.DNSConfig{Servers: []string{"127.0.0.1"}, Searches: []string{"."}}},
		{name: "no host resolv.conf: ClusterFirst has only the cluster's search", pod: pod("ClusterFirst", false, nil), settings: noHostConf,
			want: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"team.svc.cluster.local", "svc.cluster.local", "cluster.local"}, Options: []string{"ndots:5"}}},
		{name: "more than three nameservers are cut", settings: cluster,
			pod:      pod("None", false, &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4"}}),
			want:     &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1", "1.1.1.2", "1.1.1.3"}},
			warnings: []string{"pod DNSConfigForming Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 1.1.1.1 1.1.1.2 1.1.1.3"}},
		{name: "a search domain over 253 characters is dropped", settings: cluster,
			pod:      pod("None", false, &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"ok.example", long}}),
			want:     &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"ok.example"}},
			warnings: []string{"pod DNSConfigForming Search Line limits were exceeded, some search paths have been omitted, the applied search line is: ok.example"}},
		{name: "more than 32 search domains are cut", settings: cluster,
			pod:      pod("None", false, &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: many}),
			want:     &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: many[:32]},
			warnings: []string{"pod DNSConfigForming Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " + strings.Join(many[:32], " ")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, warnings, err := podDNS(tc.pod, tc.settings)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreUnexported(runtimeapi.DNSConfig{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("DNS config (-want +got):\n%s", diff)
			}
			var gotW []string
			for _, w := range warnings {
				on := "pod"
				if w.onNode {
					on = "node"
				}
				gotW = append(gotW, on+" "+w.reason+" "+w.message)
			}
			if diff := cmp.Diff(tc.warnings, gotW, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodDNSMissingHostResolvConf: a host resolv.conf that cannot be read
// fails the sandbox, as the kubelet fails it.
func TestPodDNSMissingHostResolvConf(t *testing.T) {
	_, _, err := podDNS(&corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "p"}, Spec: &corev1.PodSpec{DnsPolicy: "Default"}},
		dnsSettings{resolvConf: filepath.Join(t.TempDir(), "missing")})
	if err == nil {
		t.Fatal("got no error, want one for a missing host resolv.conf")
	}
}
