// This file holds the test of the cluster version across a real cluster.

package raftstore_test

import (
	"testing"
	"time"

	"github.com/kplane/kplane/raftstore/fsm"
)

// TestClusterVersionRises: members of one build start at Version1 and the
// leader raises the cluster version to the build's once it has asked every
// member; every member applies it. (The rolling upgrade from an older build
// is raftstore/robustness' TestRollingUpgrade.)
func TestClusterVersionRises(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{})
	deadline := time.Now().Add(30 * time.Second)
	for _, m := range c.members {
		for m.store.ClusterVersion() != fsm.Version {
			if time.Now().After(deadline) {
				t.Fatalf("%s: cluster version %d, want %d", m.cfg.Name, m.store.ClusterVersion(), fsm.Version)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
