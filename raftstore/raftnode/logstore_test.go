// This file holds the tests of the Raft log stores: a bolt log moved into
// the WAL on start, and a mismatched or unknown store refused.

package raftnode

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// A member whose log is in raft.db and that starts with the WAL store gets
// its entries (and only those past the compaction) in the WAL, and raft.db
// keeps its term and vote but no entries.
func TestOpenWALMovesBoltLog(t *testing.T) {
	dir := t.TempDir()
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 1500; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: []byte(fmt.Sprint(i))})
	}
	if err := bolt.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := bolt.DeleteRange(1, 99); err != nil {
		t.Fatal(err)
	}
	if err := bolt.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatal(err)
	}

	w, err := openWAL(filepath.Join(dir, "wal"), bolt, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first, _ := w.FirstIndex()
	last, _ := w.LastIndex()
	if first != 100 || last != 1500 {
		t.Fatalf("WAL holds [%d, %d], want [100, 1500]", first, last)
	}
	var l raft.Log
	if err := w.GetLog(777, &l); err != nil || string(l.Data) != "777" || l.Term != 2 {
		t.Fatalf("entry 777 = %+v, %v", l, err)
	}
	if n, _ := bolt.LastIndex(); n != 0 {
		t.Fatalf("raft.db still holds entries up to %d", n)
	}
	if term, _ := bolt.GetUint64([]byte("CurrentTerm")); term != 2 {
		t.Fatalf("raft.db lost the term: %d", term)
	}
	bolt.Close()
}

// A data dir whose log is in the WAL refuses to start with the bolt store
// (it would start from an empty log), and an unknown store is refused.
func TestNewRefusesWrongLogStore(t *testing.T) {
	dir := t.TempDir()
	start := func(store string) error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		n, err := New(Config{
			ID:        "a",
			BindAddr:  addr,
			Dir:       dir,
			Bootstrap: []raft.Server{{ID: "a", Address: raft.ServerAddress(addr)}},
			LogStore:  store,
		}, nopFSM{})
		if err == nil {
			deadline := time.Now().Add(10 * time.Second)
			for n.Raft.State() != raft.Leader && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if err := n.Raft.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
				t.Fatalf("apply with the %q store: %v", store, err)
			}
			n.Close()
		}
		return err
	}
	if err := start(LogStoreWAL); err != nil {
		t.Fatal(err)
	}
	if err := start(LogStoreBolt); err == nil || !strings.Contains(err.Error(), "holds a WAL") {
		t.Fatalf("bolt store on a WAL data dir: %v", err)
	}
	if err := start("lmdb"); err == nil {
		t.Fatal("an unknown log store was accepted")
	}
	if err := start(LogStoreWAL); err != nil {
		t.Fatalf("restart with the WAL store: %v", err)
	}
}

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnap{}, nil }
func (nopFSM) Restore(r io.ReadCloser) error       { return r.Close() }

type nopSnap struct{}

func (nopSnap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnap) Release()                          {}
