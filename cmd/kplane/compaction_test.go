// This file tests the compaction flags of kplane apiserver and kplane store:
// their defaults, and that bad values stop the command before it starts
// anything, with an error naming the flag.

package main

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestCompactionFlagDefaults(t *testing.T) {
	tests := []struct {
		name string
		cmd  *cobra.Command
		flag string
		want string
	}{
		// As kube-apiserver: every 5 minutes.
		{name: "apiserver interval", cmd: newAPIServerCommand(), flag: "etcd-compaction-interval", want: "5m0s"},
		// As etcd: periodic, but off.
		{name: "store mode", cmd: newStoreCommand(), flag: "auto-compaction-mode", want: "periodic"},
		{name: "store retention", cmd: newStoreCommand(), flag: "auto-compaction-retention", want: "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.cmd.Flags().Lookup(tt.flag)
			if f == nil {
				t.Fatalf("no --%s flag", tt.flag)
			}
			if f.DefValue != tt.want {
				t.Errorf("--%s defaults to %q, want %q", tt.flag, f.DefValue, tt.want)
			}
		})
	}
}

func TestCompactionFlagsRejectBadValues(t *testing.T) {
	tests := []struct {
		name string
		cmd  *cobra.Command
		args []string
		want string
	}{
		{name: "apiserver negative interval", cmd: newAPIServerCommand(), args: []string{"--etcd-compaction-interval=-5m"},
			want: "--etcd-compaction-interval -5m0s: must not be negative (0 turns compaction off)"},
		{name: "apiserver interval not a duration", cmd: newAPIServerCommand(), args: []string{"--etcd-compaction-interval=often"},
			want: `invalid argument "often" for "--etcd-compaction-interval" flag`},
		{name: "store unknown mode", cmd: newStoreCommand(), args: []string{"--auto-compaction-mode=hourly", "--auto-compaction-retention=1"},
			want: `--auto-compaction-mode "hourly": want "periodic" or "revision"`},
		{name: "store periodic not a duration", cmd: newStoreCommand(), args: []string{"--auto-compaction-retention=a-while"},
			want: `--auto-compaction-retention "a-while": want a duration such as 30m or 2h, or a whole number of hours`},
		{name: "store revision not a count", cmd: newStoreCommand(), args: []string{"--auto-compaction-mode=revision", "--auto-compaction-retention=1h"},
			want: `--auto-compaction-retention "1h": revision mode keeps a whole number of revisions, 0 or more`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cmd.SetArgs(tt.args)
			tt.cmd.SetOut(io.Discard)
			tt.cmd.SetErr(io.Discard)
			err := tt.cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
