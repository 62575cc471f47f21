// This file holds the test of the config file: defaults, disabled and
// reweighed plugins, an explicit list, and the files it refuses.

package scheduler_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/plugins"
)

// handle gives plugin factories a connection that is never used.
type handle struct{ conn *grpc.ClientConn }

func (handle) Snapshot() framework.NodeLister         { return nil }
func (h handle) ClientConn() grpc.ClientConnInterface { return h.conn }
func (handle) RunFilterPlugins(context.Context, *framework.CycleState, *framework.PodInfo, *framework.NodeInfo) *framework.Status {
	return nil
}
func (handle) EventRecorder() *client.Recorder { return nil }

func TestConfigFile(t *testing.T) {
	defaults := plugins.DefaultPlugins()
	conn, err := grpc.NewClient("passthrough:///unused", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	names := func(refs []framework.PluginRef) []string {
		var out []string
		for _, r := range refs {
			out = append(out, r.Name)
		}
		return out
	}
	weight := func(refs []framework.PluginRef, name string) int64 {
		for _, r := range refs {
			if r.Name == name {
				return r.Weight
			}
		}
		return -1
	}
	tests := []struct {
		name        string
		yaml        string
		wantErr     string
		wantPlugins []string
		wantWeights map[string]int64
		wantPct     int32
	}{
		{name: "empty file: defaults", yaml: "", wantPlugins: names(defaults), wantWeights: map[string]int64{"TaintToleration": 3, "NodeAffinity": 2}},
		{name: "disable and reweigh", yaml: "percentageOfNodesToScore: 30\ndisabledPlugins: [ImageLocality]\nweights: {NodeAffinity: 7}\n",
			wantPlugins: slices.DeleteFunc(names(defaults), func(n string) bool { return n == "ImageLocality" }),
			wantWeights: map[string]int64{"NodeAffinity": 7}, wantPct: 30},
		{name: "explicit list", yaml: "plugins:\n- name: NodeResourcesFit\n- name: NodeResourcesLeastAllocated\n  weight: 4\n- name: DefaultBinder\n",
			wantPlugins: []string{"NodeResourcesFit", "NodeResourcesLeastAllocated", "DefaultBinder"}, wantWeights: map[string]int64{"NodeResourcesLeastAllocated": 4}},
		{name: "unknown field", yaml: "percentage: 3\n", wantErr: "unknown field"},
		{name: "weight for a disabled plugin", yaml: "disabledPlugins: [NodeAffinity]\nweights: {NodeAffinity: 2}\n", wantErr: "not enabled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			fc, err := scheduler.LoadConfigFile(path)
			var prof framework.Config
			if err == nil {
				prof, err = fc.Profile()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(prof.Plugins); !slices.Equal(got, tc.wantPlugins) {
				t.Errorf("plugins: got %v, want %v", got, tc.wantPlugins)
			}
			for n, w := range tc.wantWeights {
				if got := weight(prof.Plugins, n); got != w {
					t.Errorf("weight of %s: got %d, want %d", n, got, w)
				}
			}
			if prof.PercentageOfNodesToScore != tc.wantPct {
				t.Errorf("percentageOfNodesToScore: got %d, want %d", prof.PercentageOfNodesToScore, tc.wantPct)
			}
			if _, err := framework.New(plugins.Registry(), prof, handle{conn}); err != nil {
				t.Errorf("profile does not build: %v", err)
			}
		})
	}
}
