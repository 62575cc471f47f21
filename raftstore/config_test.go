// This file holds the tests of the member configuration: parsing
// --initial-cluster, and refusing in New what etcd would refuse.

package raftstore_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kplane/kplane/raftstore"
)

func TestParseInitialCluster(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]string
		wantErr string
	}{
		{name: "three", in: "a=http://h:1,b=http://h:2,c=http://h:3", want: map[string]string{"a": "http://h:1", "b": "http://h:2", "c": "http://h:3"}},
		{name: "spaces and empty parts", in: " a=http://h:1 ,, ", want: map[string]string{"a": "http://h:1"}},
		{name: "no url", in: "a=", wantErr: "want name=peer-url"},
		{name: "no name", in: "=http://h:1", wantErr: "want name=peer-url"},
		{name: "duplicate", in: "a=http://h:1,a=http://h:2", wantErr: "given twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := raftstore.ParseInitialCluster(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNewRejectsBadConfig: configurations etcd would refuse fail in New,
// before anything listens.
func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     raftstore.Config
		wantErr string
	}{
		{name: "bad state", cfg: raftstore.Config{Name: "a", InitialClusterState: "maybe"}, wantErr: "want new or existing"},
		{name: "not in the initial cluster", cfg: raftstore.Config{Name: "a", InitialCluster: "b=http://127.0.0.1:1"}, wantErr: "does not name this member"},
		{name: "peer url differs", cfg: raftstore.Config{Name: "a", InitialCluster: "a=http://127.0.0.1:1", InitialAdvertisePeerURL: "http://127.0.0.1:2"}, wantErr: "--initial-advertise-peer-urls"},
		{name: "bad client url", cfg: raftstore.Config{Name: "a", ListenClientURLs: []string{"::"}}, wantErr: "url"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = t.TempDir()
			s, err := raftstore.New(tc.cfg)
			if err == nil {
				t.Fatalf("New succeeded (%v), want an error containing %q", s.ClientAddrs(), tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
