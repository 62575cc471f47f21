// This file holds the test that every command keeps its flags: each
// command's flag names, types and defaults against testdata/flags.txt,
// which the commands before issue 22 moved their wiring into the parts'
// packages pass too (KPLANE_UPDATE_FLAGS=1 rewrites it after an intended
// change).

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func TestFlagsKeepNamesAndDefaults(t *testing.T) {
	host, _ := os.Hostname()
	var lines []string
	var walk func(prefix string, c *cobra.Command)
	walk = func(prefix string, c *cobra.Command) {
		name := strings.TrimSpace(prefix + " " + c.Name())
		c.Flags().VisitAll(func(f *pflag.Flag) {
			hidden := ""
			if f.Hidden {
				hidden = " (hidden)"
			}
			def := f.DefValue
			if host != "" && def == host {
				def = "<hostname>" // --node-name's default is the machine's
			}
			lines = append(lines, fmt.Sprintf("%s --%s %s %q%s", name, f.Name, f.Value.Type(), def, hidden))
		})
		for _, sub := range c.Commands() {
			walk(name, sub)
		}
	}
	walk("", newRootCommand())
	sort.Strings(lines)
	got := strings.Join(lines, "\n") + "\n"
	golden := filepath.Join("testdata", "flags.txt")
	if os.Getenv("KPLANE_UPDATE_FLAGS") == "1" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("flags changed (-want +got):\n%s", diff)
	}
}
