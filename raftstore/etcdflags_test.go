// This file holds the tests of MemberOptions: etcd's member flags as
// `kplane store` parses them, turned into a Config.

package raftstore

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

func TestMemberOptionsComplete(t *testing.T) {
	var o MemberOptions
	f := pflag.NewFlagSet("store", pflag.ContinueOnError)
	o.AddFlags(f)
	err := f.Parse([]string{
		"--name=s1",
		"--listen-client-urls=https://127.0.0.1:2379, https://10.0.0.1:2379",
		"--initial-advertise-peer-urls=https://10.0.0.1:2380,https://10.0.0.9:2380",
		"--election-timeout=2000",
		"--auto-compaction-mode=revision", "--auto-compaction-retention=1000",
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{name: "name", got: cfg.Name, want: "s1"},
		{name: "client URLs", got: cfg.ListenClientURLs, want: []string{"https://127.0.0.1:2379", "https://10.0.0.1:2379"}},
		{name: "advertised client URLs (default: none, Config takes the listen ones)", got: cfg.AdvertiseClientURLs, want: []string(nil)},
		{name: "peer URL (default)", got: cfg.ListenPeerURL, want: "http://127.0.0.1:2380"},
		{name: "advertised peer URL: the first", got: cfg.InitialAdvertisePeerURL, want: "https://10.0.0.1:2380"},
		// hashicorp/raft's timeouts are between 1 and 2 times the setting.
		{name: "election timeout", got: cfg.ElectionTimeout, want: time.Second},
		{name: "heartbeat timeout", got: cfg.HeartbeatTimeout, want: time.Second},
		{name: "snapshot count (default)", got: cfg.SnapshotThreshold, want: uint64(DefaultSnapshotCount)},
	} {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", c.name, diff)
		}
	}
	if a := cfg.AutoCompaction; a.Mode != "revision" || a.Revisions != 1000 {
		t.Errorf("auto-compaction: got %+v, want revision mode keeping 1000", a)
	}

	o.CompactionMode = "hourly"
	if _, err := o.Complete(); err == nil || !strings.Contains(err.Error(), "--auto-compaction-mode") {
		t.Errorf("an unknown compaction mode: got %v, want an error naming the flag", err)
	}
}
