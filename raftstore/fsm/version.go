// This file holds the cluster version: the newest format of Raft entries
// and snapshots that every member can read. A member writes only formats
// the cluster version allows, and the cluster version rises (never falls)
// only once every member runs a build that reads the new formats, so that
// the members of a cluster can be upgraded one at a time while it serves,
// as etcd's cluster version allows.

package fsm

import (
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/membershippb"
)

// Versions of the replicated formats.
const (
	// Version1 is the baseline every kplane store reads: single requests
	// and batch envelopes in command entries, the kplane-fsm-v1 snapshot.
	// A cluster whose log holds no cluster version is at Version1.
	Version1 uint32 = 1
	// Version2 adds the cluster-version entry (etcd's ClusterVersionSet
	// request) and the kplane-fsm-v2 snapshot, which carries the cluster
	// version.
	Version2 uint32 = 2
	// Version is the newest format this build reads and writes.
	Version = Version2
)

// ClusterVersion returns the cluster version this member applied.
func (f *FSM) ClusterVersion() uint32 { return f.clusterVersion.Load() }

// ClusterVersionRequest is the request that raises the cluster version to v.
// Only a leader that knows every member runs a build reading Version2 may
// propose it: older builds do not know the request.
func ClusterVersionRequest(v uint32) *membershippb.ClusterVersionSetRequest {
	return &membershippb.ClusterVersionSetRequest{Ver: strconv.FormatUint(uint64(v), 10)}
}

// applyClusterVersion raises the cluster version; a lower or equal one
// changes nothing (there is no downgrade).
func (f *FSM) applyClusterVersion(req *membershippb.ClusterVersionSetRequest) Result {
	v, err := strconv.ParseUint(req.Ver, 10, 32)
	if err != nil || v == 0 {
		// Every member decodes it the same way, so ignoring it cannot
		// make them drift; a proposer checks before proposing.
		f.log.Error("ignoring a cluster version entry with a bad version", "ver", req.Ver)
		return Result{}
	}
	if uint32(v) > Version {
		f.log.Error("the cluster version is newer than this build reads: upgrade this member", "cluster", v, "this", Version)
	}
	if uint32(v) > f.clusterVersion.Load() {
		f.clusterVersion.Store(uint32(v))
		f.log.Info("cluster version set", "version", v)
	}
	return Result{}
}

// checkClusterVersion reports whether a proposed cluster version entry is
// well formed.
func checkClusterVersion(req *membershippb.ClusterVersionSetRequest) error {
	if v, err := strconv.ParseUint(req.Ver, 10, 32); err != nil || v == 0 || uint32(v) > Version {
		return fmt.Errorf("bad cluster version %q", req.Ver)
	}
	return nil
}
