package fsm

// This file holds the FSM's snapshot format: a fixed header (magic, the
// applied index), the members table as JSON, then the MVCC store's own
// snapshot stream.

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/hashicorp/raft"

	"github.com/kplane/kplane/raftstore/mvcc"
)

const snapshotMagic = "kplane-fsm-v1\n"

type snapshot struct {
	applied uint64
	members []Member
	store   mvcc.Snapshot
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
	return &snapshot{applied: f.Applied(), members: members, store: f.store.Snapshot()}, nil
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
	var hdr [12]byte
	binary.BigEndian.PutUint64(hdr[:8], s.applied)
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(members)))
	if _, err := bw.WriteString(snapshotMagic); err != nil {
		return err
	}
	if _, err := bw.Write(hdr[:]); err != nil {
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
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil {
		return fmt.Errorf("restore snapshot: read header: %w", err)
	}
	if string(magic) != snapshotMagic {
		return errors.New("restore snapshot: not a kplane FSM snapshot")
	}
	var hdr [12]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return fmt.Errorf("restore snapshot: read header: %w", err)
	}
	applied := binary.BigEndian.Uint64(hdr[:8])
	buf := make([]byte, binary.BigEndian.Uint32(hdr[8:]))
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
