// This file holds SnapshotInfo: what a snapshot written by WriteTo holds,
// read without installing it in a store.

package mvcc

import "io"

// SnapshotInfo describes a snapshot written by WriteTo.
type SnapshotInfo struct {
	// Revision and CompactRevision are the store's at the snapshot.
	Revision, CompactRevision int64
	// Hash is what HashKV(0) answers on a store restored from the
	// snapshot: the same hash `etcdctl endpoint hashkv` reported at
	// Revision on the member the snapshot was taken from.
	Hash uint32
	// Keys is the number of keys that exist at Revision; Revisions counts
	// every stored revision of every key (tombstones included), as etcd's
	// key bucket holds one entry per revision.
	Keys, Revisions int
	// Leases is the number of granted leases.
	Leases int
}

// ReadSnapshotInfo reads a snapshot from r to its end, checks it as Restore
// does and describes it. Errors are those of Restore.
func ReadSnapshotInfo(r io.Reader) (SnapshotInfo, error) {
	st, err := readSnapshot(r)
	if err != nil {
		return SnapshotInfo{}, err
	}
	info := SnapshotInfo{
		Revision:        st.rev,
		CompactRevision: st.compactRev,
		Leases:          len(st.leases),
	}
	st.tree.Ascend(func(ki keyIndex) bool {
		info.Revisions += len(ki.revs)
		if ki.live() != nil {
			info.Keys++
		}
		return true
	})
	// hashKV reads only the key index, so a store that holds the restored
	// tree alone answers it without being started.
	info.Hash = (&Store{tree: st.tree}).hashKV(st.rev, st.compactRev)
	return info, nil
}
