// This file holds what turns etcd's member flags into Config where their
// meaning differs from Config's: the election timeout, and the GC target
// `kplane store` runs with.

package raftstore

import "time"

// DefaultGCPercent is the store's default GC target (kplane store
// --gc-percent): Go's own. A larger target did not pay on the put
// benchmark: at 300 the members used 5-10% more CPU per put than at 100 in
// each of four alternating rounds (BENCHMARKS.md, store section), the
// larger heap costing more fresh pages than the fewer collections saved;
// the store's live heap (every key's history in memory) already spaces
// collections out.
const DefaultGCPercent = 100

// SetEtcdElectionTimeout sets the election and heartbeat timeouts from
// etcd's --election-timeout in milliseconds (0 or less leaves the
// defaults). hashicorp/raft randomises its timeouts between 1 and 2 times
// the setting, where etcd's election timeout is the lower bound of its
// own.
func (c *Config) SetEtcdElectionTimeout(ms int) {
	if ms > 0 {
		c.ElectionTimeout = time.Duration(ms) * time.Millisecond / 2
		c.HeartbeatTimeout = c.ElectionTimeout
	}
}
