// This file holds the FSM's snapshot formats: a magic line, a fixed header
// (the applied index; from v2 also the cluster version; the members
// table's length), the members table as JSON, then the MVCC store's own
// snapshot stream. A member writes v2 only once the cluster version is
// Version2, so that a member still on an older build can install the
// snapshots its leader sends; it reads both.

package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/kplane/kplane/raftstore/mvcc"
)

const (
	snapshotMagicV1 = "kplane-fsm-v1\n"
	snapshotMagicV2 = "kplane-fsm-v2\n"
)

type snapshot struct {
	applied        uint64
	clusterVersion uint32
	members        []Member
	store          mvcc.Snapshot
}

// Snapshot is called by raft between applies; it copies the small members
// table and takes the MVCC store's consistent copy, leaving serialisation to
// Persist (which runs concurrently with further applies).
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	members := make([]Member, 0, len(f.members))
	for _, m := range f.members {
		members = append(members, m)
	}
	f.mu.Unlock()
	sort.Slice(members, func(i, j int) bool { return members[i].ID < members[j].ID })
	return &snapshot{applied: f.Applied(), clusterVersion: f.ClusterVersion(), members: members, store: f.store.Snapshot()}, nil
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	members, err := json.Marshal(s.members)
	if err != nil {
		return err
	}
	magic, hdr := snapshotMagicV1, binary.BigEndian.AppendUint64(nil, s.applied)
	if s.clusterVersion >= Version2 {
		magic, hdr = snapshotMagicV2, binary.BigEndian.AppendUint32(hdr, s.clusterVersion)
	}
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(members)))
	if _, err := bw.WriteString(magic); err != nil {
		return err
	}
	if _, err := bw.Write(hdr); err != nil {
		return err
	}
	if _, err := bw.Write(members); err != nil {
		return err
	}
	if _, err := s.store.WriteTo(bw); err != nil {
		return err
	}
	return bw.Flush()
}

func (s *snapshot) Release() {}

// Restore replaces the FSM's whole state with a snapshot written by Persist.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	br := bufio.NewReader(rc)
	magic := make([]byte, len(snapshotMagicV1))
	if _, err := io.ReadFull(br, magic); err != nil {
		return fmt.Errorf("restore snapshot: read header: %w", err)
	}
	var hdr []byte
	switch string(magic) {
	case snapshotMagicV1:
		hdr = make([]byte, 12)
	case snapshotMagicV2:
		hdr = make([]byte, 16)
	default:
		if bytes.HasPrefix(magic, []byte("kplane-fsm-v")) {
			return fmt.Errorf("restore snapshot: format %q is newer than this build reads (%d): upgrade this member", strings.TrimSpace(string(magic)), Version)
		}
		return errors.New("restore snapshot: not a kplane FSM snapshot")
	}
	if _, err := io.ReadFull(br, hdr); err != nil {
		return fmt.Errorf("restore snapshot: read header: %w", err)
	}
	applied := binary.BigEndian.Uint64(hdr[:8])
	clusterVersion := Version1
	if len(hdr) == 16 {
		clusterVersion = binary.BigEndian.Uint32(hdr[8:12])
	}
	buf := make([]byte, binary.BigEndian.Uint32(hdr[len(hdr)-4:]))
	if _, err := io.ReadFull(br, buf); err != nil {
		return fmt.Errorf("restore snapshot: read members: %w", err)
	}
	var members []Member
	if err := json.Unmarshal(buf, &members); err != nil {
		return fmt.Errorf("restore snapshot: decode members: %w", err)
	}
	if err := f.store.Restore(br); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	f.mu.Lock()
	f.members = make(map[uint64]Member, len(members))
	for _, m := range members {
		f.members[m.ID] = m
	}
	f.mu.Unlock()
	f.clusterVersion.Store(clusterVersion)
	f.setApplied(applied)
	return nil
}

// WriteSnapshot writes, in the format Persist writes and Restore reads, the
// FSM snapshot of a new member's state: applied index applied, the MVCC
// store's snapshot store, and an empty members table (each member publishes
// its own attributes once it starts).
func WriteSnapshot(w io.Writer, applied uint64, store mvcc.Snapshot) error {
	s := &snapshot{applied: applied, members: []Member{}, store: store}
	if err := s.write(w); err != nil {
		return fmt.Errorf("write fsm snapshot: %w", err)
	}
	return nil
}
