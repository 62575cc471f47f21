// This file holds Seed, which prepares a new member's Raft state from a
// given snapshot instead of an empty log (a restore from a backup).

package raftnode

import (
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// SeedIndex and SeedTerm are the Raft index and term of the snapshot Seed
// writes. Every member of the new cluster is seeded with the same snapshot,
// so they agree on the log up to it and the first leader carries on from
// SeedIndex+1.
const (
	SeedIndex = 1
	SeedTerm  = 1
)

// Seed writes into dir, which must hold no Raft state yet, one Raft snapshot
// at SeedIndex and SeedTerm whose configuration is servers and whose content
// write produces (given the index, it writes what the FSM's Restore reads).
//
// A node then started on dir with New finds existing state, so it does not
// bootstrap: it restores its FSM from the snapshot and takes servers as its
// committed configuration, and with its peers seeded alike elects a leader
// as any restarted cluster does. What a member of a bootstrapped cluster
// holds at index 1 (its first configuration) the snapshot stands in for.
func Seed(dir string, servers []raft.Server, write func(w io.Writer, index uint64) error) error {
	if len(servers) == 0 {
		return fmt.Errorf("seed raft state: no servers")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("seed raft state: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		return fmt.Errorf("seed raft state: open snapshot store: %w", err)
	}
	existing, err := snaps.List()
	if err != nil {
		return fmt.Errorf("seed raft state: %w", err)
	}
	if len(existing) > 0 {
		return fmt.Errorf("seed raft state: %s already holds a snapshot", dir)
	}
	conf := raft.Configuration{Servers: servers}
	// The snapshot store asks a transport only to encode the servers'
	// addresses for the snapshot's legacy peers field; the TCP transport
	// encodes an address as its bytes, as the in-memory one does.
	_, encoder := raft.NewInmemTransport("")
	defer encoder.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, SeedIndex, SeedTerm, conf, SeedIndex, encoder)
	if err != nil {
		return fmt.Errorf("seed raft state: %w", err)
	}
	if err := write(sink, SeedIndex); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("seed raft state: write snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("seed raft state: %w", err)
	}
	return nil
}
