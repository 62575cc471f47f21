// This file holds the node agent's DNS tests against a real API service
// and the built-in runtime: a pod's /etc/resolv.conf follows its
// dnsPolicy, and without --cluster-dns a ClusterFirst pod falls back to
// Default with MissingClusterDNS events.

package nodeagent

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// catResolvConf is a pod whose container prints its /etc/resolv.conf and
// exits.
func catResolvConf(name string, mod func(*corev1.PodSpec)) *corev1.Pod {
	return simPod(name, nil, func(s *corev1.PodSpec) {
		s.RestartPolicy = "Never"
		s.Containers[0].Command = []string{"sh", "-c", "cat /etc/resolv.conf"}
		if mod != nil {
			mod(s)
		}
	})
}

func TestPodResolvConf(t *testing.T) {
	c := startCluster(t)
	host := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(host, []byte("nameserver 192.0.2.53\nsearch corp.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startSimNode(t, c, "n1", func(cfg *Config) {
		cfg.ClusterDNS, cfg.ClusterDomain, cfg.ResolvConf = []string{"10.96.0.10"}, "cluster.local", host
	})
	startSimNode(t, c, "n2", func(cfg *Config) { cfg.ResolvConf = host })
	logs := func(p *corev1.Pod) string {
		c.waitPod(t, "default", p.Metadata.Name, "Succeeded", phaseIs("Succeeded"))
		resp, err := http.Get(n.logs + "/containerLogs/default/" + p.Metadata.Name + "/main")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	tests := []struct {
		name string
		mod  func(*corev1.PodSpec)
		want string
	}{
		{name: "cluster-first", want: "search default.svc.cluster.local svc.cluster.local cluster.local corp.example\nnameserver 10.96.0.10\noptions ndots:5\n"},
		{name: "default", mod: func(s *corev1.PodSpec) { s.DnsPolicy = "Default" }, want: "search corp.example\nnameserver 192.0.2.53\n"},
		{name: "none", mod: func(s *corev1.PodSpec) {
			s.DnsPolicy = "None"
			s.DnsConfig = &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"}}
		}, want: "search a.example\nnameserver 1.1.1.1\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := c.runPod(t, catResolvConf(tc.name, tc.mod), "n1")
			if got := logs(p); got != tc.want {
				t.Errorf("resolv.conf: got %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("no cluster DNS", func(t *testing.T) {
		p := c.runPod(t, catResolvConf("fallback", nil), "n2")
		c.waitPod(t, "default", p.Metadata.Name, "Succeeded", phaseIs("Succeeded"))
		waitEvent(t, c, p, "MissingClusterDNS", `kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`)
	})
}
