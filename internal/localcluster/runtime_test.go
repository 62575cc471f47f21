// This file holds the test of how `kplane up --runtime containerd` checks
// its nodes' runtimes and CNI directories before it starts anything.

package localcluster_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kplane/kplane/internal/localcluster"
)

func TestUpContainerdConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		cfg     localcluster.UpConfig
		wantErr string
	}{
		{name: "no socket", cfg: localcluster.UpConfig{}, wantErr: "needs the CRI socket"},
		{name: "nodes without sockets", cfg: localcluster.UpConfig{Nodes: 2, CRISockets: []string{"/a.sock"}},
			wantErr: "2 nodes need 2 CRI sockets"},
		{name: "two nodes, no CNI directories", cfg: localcluster.UpConfig{CRISockets: []string{"/a.sock", "/b.sock"}},
			wantErr: "2 nodes need 2 CNI configuration directories"},
		{name: "CNI directories short", cfg: localcluster.UpConfig{CRISockets: []string{"/a.sock", "/b.sock"}, CNIConfDirs: []string{"/a"}},
			wantErr: "not 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Runtime, tt.cfg.Binary, tt.cfg.DataDir = "containerd", kplaneBin, t.TempDir()
			cp, err := localcluster.Up(context.Background(), tt.cfg)
			if err == nil {
				cp.Stop()
				t.Fatalf("Up: no error, want one saying %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Up: got %q, want it to say %q", err, tt.wantErr)
			}
		})
	}
}
