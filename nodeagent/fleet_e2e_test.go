// This file holds the end-to-end test of Fleet, as `kplane nodeagent
// --nodes N` runs it: simulated nodes, each authenticated by its own token
// from a token file over one shared connection, registering against a real
// API service with their own pod subnets, and a clean stop.

package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

func TestFleetRegistersSimulatedNodes(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	nodes := client.Must[*corev1.Node](env.Dial(t, apiservertest.AdminToken))
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	csv := apiservertest.Node1Token + ",system:node:n1,3,system:nodes\n" + apiservertest.Node2Token + ",system:node:n2,4,system:nodes\n"
	if err := os.WriteFile(tokens, []byte(csv), 0o600); err != nil {
		t.Fatal(err)
	}
	o := DefaultFleetOptions()
	o.Server, o.Plaintext, o.TokenCSV = env.Addr, true, tokens
	o.Nodes, o.NodePrefix, o.DataDir, o.LogListen = 2, "n", shortDir(t), ""
	o.Labels, o.Taints = []string{"tier=sim"}, []string{"dedicated=sim:NoSchedule"}
	fleet, err := NewFleet(o)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(fleet.Agents()); got != 2 {
		t.Fatalf("got %d agents, want 2", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fleet.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run after cancel: got %v, want nil", err)
		}
	}()

	for _, want := range []struct{ name, cidr string }{{"n1", "10.244.1.0/24"}, {"n2", "10.244.2.0/24"}} {
		var node *corev1.Node
		deadline := time.Now().Add(60 * time.Second)
		for {
			node, err = nodes.Get(context.Background(), "", want.name)
			if err == nil && len(node.GetStatus().GetConditions()) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s not registered: %v", want.name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if got := node.GetSpec().GetPodCidr(); got != want.cidr {
			t.Errorf("%s pod CIDR: got %s, want %s", want.name, got, want.cidr)
		}
		if got := node.GetMetadata().GetLabels()["tier"]; got != "sim" {
			t.Errorf("%s label tier: got %q, want sim", want.name, got)
		}
		if ts := node.GetSpec().GetTaints(); len(ts) != 1 || ts[0].GetKey() != "dedicated" || ts[0].GetEffect() != "NoSchedule" {
			t.Errorf("%s taints: got %v, want dedicated=sim:NoSchedule", want.name, ts)
		}
		// Its root directory is made at start, so capacity counts the
		// filesystem under it before any pod has a volume.
		if got := node.GetStatus().GetCapacity()["ephemeral-storage"]; got == "" {
			t.Errorf("%s capacity: no ephemeral-storage (got %v)", want.name, node.GetStatus().GetCapacity())
		}
	}
}

// TestFleetNeedsEachNodesToken: a node missing from the token file stops
// the fleet before anything runs, naming it.
func TestFleetNeedsEachNodesToken(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte(apiservertest.Node1Token+",system:node:n1,3,system:nodes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := DefaultFleetOptions()
	o.Server, o.Plaintext, o.TokenCSV = "127.0.0.1:1", true, tokens
	o.Nodes, o.NodePrefix, o.DataDir, o.LogListen = 2, "n", shortDir(t), ""
	_, err := NewFleet(o)
	if err == nil || err.Error() != "node n2: no token for system:node:n2 in "+tokens {
		t.Errorf("got %v, want n2's token missing", err)
	}
}
