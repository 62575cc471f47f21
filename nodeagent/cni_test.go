// This file holds the tests of the node's CNI network configuration and
// of the sandbox's port mappings.

package nodeagent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

func TestCNIConfList(t *testing.T) {
	tests := []struct {
		name, podCIDR, bridge string
		wantSubnet            string
		wantErr               bool
	}{
		{name: "a /24", podCIDR: "10.244.1.0/24", bridge: "kplane0", wantSubnet: "10.244.1.0/24"},
		{name: "host bits masked", podCIDR: "10.200.7.70/26", bridge: "kplt7-1", wantSubnet: "10.200.7.64/26"},
		{name: "ipv6", podCIDR: "fd00::/64", bridge: "kplane0", wantErr: true},
		{name: "too small", podCIDR: "10.0.0.0/31", bridge: "kplane0", wantErr: true},
		{name: "not a CIDR", podCIDR: "10.0.0.0", bridge: "kplane0", wantErr: true},
		{name: "bridge name too long", podCIDR: "10.244.1.0/24", bridge: "a-very-long-bridge", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := cniConfList(tt.podCIDR, tt.bridge, "/data/cni")
			if (err != nil) != tt.wantErr {
				t.Fatalf("got error %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			var conf struct {
				Name    string `json:"name"`
				Plugins []struct {
					Type      string `json:"type"`
					Bridge    string `json:"bridge"`
					IsGateway bool   `json:"isGateway"`
					IPMasq    bool   `json:"ipMasq"`
					IPAM      struct {
						Type    string                `json:"type"`
						Ranges  [][]map[string]string `json:"ranges"`
						DataDir string                `json:"dataDir"`
					} `json:"ipam"`
					Capabilities map[string]bool `json:"capabilities"`
				} `json:"plugins"`
			}
			if err := json.Unmarshal(b, &conf); err != nil {
				t.Fatal(err)
			}
			if len(conf.Plugins) != 2 || conf.Plugins[0].Type != "bridge" || conf.Plugins[1].Type != "portmap" {
				t.Fatalf("got plugins %+v, want bridge then portmap", conf.Plugins)
			}
			br := conf.Plugins[0]
			if br.Bridge != tt.bridge || !br.IsGateway || br.IPMasq {
				t.Errorf("got bridge %q gateway %v ipMasq %v, want %q, true, false", br.Bridge, br.IsGateway, br.IPMasq, tt.bridge)
			}
			if br.IPAM.Type != "host-local" || len(br.IPAM.Ranges) != 1 || br.IPAM.Ranges[0][0]["subnet"] != tt.wantSubnet || br.IPAM.DataDir != "/data/cni" {
				t.Errorf("got ipam %+v, want host-local over %s in /data/cni", br.IPAM, tt.wantSubnet)
			}
			if !conf.Plugins[1].Capabilities["portMappings"] {
				t.Errorf("portmap without the portMappings capability")
			}
		})
	}
}

func TestWriteCNIConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d")
	if err := writeCNIConfig(dir, "10.244.1.0/24", "kplane0", "/data"); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != CNIConfFile {
		t.Errorf("got %v in the directory, want only %s", ents, CNIConfFile)
	}
	if got := earlierCNIConfigs(dir); len(got) != 0 {
		t.Errorf("earlier configs %v, want none", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "01-other.conflist"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := earlierCNIConfigs(dir), []string{"01-other.conflist"}; !cmp.Equal(got, want) {
		t.Errorf("earlier configs %v, want %v", got, want)
	}
}

func TestPortMappings(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []*corev1.Container{
		{Name: "a", Ports: []*corev1.ContainerPort{{ContainerPort: 8080, HostPort: 30080}, {ContainerPort: 53, Protocol: "UDP"}}},
		{Name: "b", Ports: []*corev1.ContainerPort{{ContainerPort: 9000, HostPort: 9000, HostIp: "127.0.0.1", Protocol: "SCTP"}}},
	}}
	want := []*runtimeapi.PortMapping{
		{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: 30080},
		{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53},
		{Protocol: runtimeapi.Protocol_SCTP, ContainerPort: 9000, HostPort: 9000, HostIp: "127.0.0.1"},
	}
	if diff := cmp.Diff(want, portMappings(spec), protocmp.Transform()); diff != "" {
		t.Errorf("port mappings (-want +got):\n%s", diff)
	}
}

func TestNonMasqueradeCIDR(t *testing.T) {
	tests := []struct{ name, pod, cluster, want string }{
		{"inside", "10.244.1.0/24", "10.244.0.0/16", "10.244.0.0/16"},
		{"outside", "10.200.1.0/24", "10.244.0.0/16", "10.200.1.0/24"},
		{"no cluster", "10.200.1.0/24", "", "10.200.1.0/24"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nonMasqueradeCIDR(tt.pod, tt.cluster); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
