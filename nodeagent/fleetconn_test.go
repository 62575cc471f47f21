// This file holds the tests of what a Fleet is built from: the node token
// file, the taint flags and the options' validation (each node's pod
// subnet: podcidr_test.go).

package nodeagent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNodeTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.csv")
	csv := "admin-token,admin,1,\"system:masters\"\nn1-token,system:node:node-1,2,system:nodes\nn2-token,system:node:node-2,3\n"
	if err := os.WriteFile(file, []byte(csv), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := NodeTokens(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["node-1"] != "n1-token" || got["node-2"] != "n2-token" {
		t.Errorf("got %v, want node-1 and node-2's tokens only", got)
	}
}

func TestParseTaints(t *testing.T) {
	got, err := ParseTaints([]string{"dedicated=gpu:NoSchedule", "maintenance:NoExecute"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].GetKey() != "dedicated" || got[0].GetValue() != "gpu" || got[0].GetEffect() != "NoSchedule" ||
		got[1].GetKey() != "maintenance" || got[1].GetValue() != "" || got[1].GetEffect() != "NoExecute" {
		t.Errorf("got %v", got)
	}
	if _, err := ParseTaints([]string{"no-effect"}); err == nil {
		t.Error("a taint without an effect parsed")
	}
}

func TestFleetOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*FleetOptions)
		wantErr bool
	}{
		{name: "defaults", change: func(*FleetOptions) {}},
		{name: "no nodes", change: func(o *FleetOptions) { o.Nodes = 0 }, wantErr: true},
		{name: "many nodes on one CRI socket", change: func(o *FleetOptions) { o.Nodes, o.CRISocket = 3, "/run/containerd.sock" }, wantErr: true},
		{name: "one certificate for many nodes", change: func(o *FleetOptions) { o.Nodes, o.CertFile = 3, "node.crt" }, wantErr: true},
		{name: "a token file for many nodes", change: func(o *FleetOptions) { o.Nodes, o.TokenCSV = 3, "tokens.csv" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultFleetOptions()
			tt.change(&o)
			if err := o.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("got %v, want an error: %v", err, tt.wantErr)
			}
		})
	}
}

func TestFleetNodeNames(t *testing.T) {
	o := DefaultFleetOptions()
	o.NodeName = "solo"
	if got := o.NodeNames(); len(got) != 1 || got[0] != "solo" {
		t.Errorf("one node: got %v, want [solo]", got)
	}
	o.Nodes = 3
	if got := o.NodeNames(); len(got) != 3 || got[0] != "node-1" || got[2] != "node-3" {
		t.Errorf("three nodes: got %v, want node-1..node-3", got)
	}
}
