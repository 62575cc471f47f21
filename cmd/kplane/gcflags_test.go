// This file holds the test of --gc-percent's defaults: each command's is
// the one measured for it.

package main

import (
	"testing"

	"github.com/spf13/cobra"
)

// TestGCPercentFlags checks each command's --gc-percent default: 300 for
// the API service (its 10,000-watcher tail), Go's 100 where raising it was
// measured to save nothing (BENCHMARKS.md).
func TestGCPercentFlags(t *testing.T) {
	for _, c := range []struct {
		name string
		cmd  *cobra.Command
		want string
	}{
		{"apiserver", newAPIServerCommand(), "300"},
		{"nodeagent", newNodeAgentCommand(), "100"},
		{"store", newStoreCommand(), "100"},
	} {
		f := c.cmd.Flags().Lookup("gc-percent")
		if f == nil {
			t.Errorf("kplane %s has no --gc-percent flag", c.name)
			continue
		}
		if f.DefValue != c.want {
			t.Errorf("kplane %s --gc-percent defaults to %s, want %s", c.name, f.DefValue, c.want)
		}
	}
}
