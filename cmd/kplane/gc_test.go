// This file holds the tests of --gc-percent: GOGC wins over the flag, and
// each command's default is the one measured for it.

package main

import (
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"testing"

	"github.com/spf13/cobra"
)

func TestSetGCPercentYieldsToGOGC(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	before := debug.SetGCPercent(77)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	t.Setenv("GOGC", "50")
	setGCPercent(300, log)
	if got := debug.SetGCPercent(77); got != 77 {
		t.Fatalf("with GOGC set, --gc-percent changed the GC target to %d", got)
	}

	os.Unsetenv("GOGC") // t.Setenv restores it
	setGCPercent(300, log)
	if got := debug.SetGCPercent(77); got != 300 {
		t.Fatalf("without GOGC, the GC target is %d, want the flag's 300", got)
	}
}

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
