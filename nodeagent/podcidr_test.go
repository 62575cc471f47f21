// This file holds the test of how each node's pod subnet is carved out of
// the cluster CIDR (`kplane nodeagent --nodes`, `kplane up`).

package nodeagent_test

import (
	"testing"

	"github.com/kplane/kplane/nodeagent"
)

func TestNodeSubnet(t *testing.T) {
	tests := []struct {
		name, cluster string
		mask, i       int
		want          string
		wantErr       bool
	}{
		{"first", "10.244.0.0/16", 24, 1, "10.244.1.0/24", false},
		{"hundredth", "10.244.0.0/16", 24, 100, "10.244.100.0/24", false},
		{"smaller subnets", "10.244.0.0/16", 26, 5, "10.244.1.64/26", false},
		{"out of room", "10.244.0.0/16", 24, 256, "", true},
		{"ipv6", "fd00::/48", 64, 1, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := nodeagent.NodeSubnet(tt.cluster, tt.mask, tt.i)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("got %q, %v; want %q (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
