// This file holds the test of WriteSnapshot: a new member's FSM snapshot
// made from a store snapshot alone.

package fsm

import (
	"bytes"
	"io"
	"testing"
)

func TestWriteSnapshot(t *testing.T) {
	src := newFSM(t)
	src.ApplyBatch(randomLog(t, 7, 1, 200))

	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, 1, src.Store().Snapshot()); err != nil {
		t.Fatalf("WriteSnapshot: %v", err)
	}
	dst := newFSM(t)
	if err := dst.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := dst.Applied(); got != 1 {
		t.Errorf("applied index: got %d, want 1", got)
	}
	if got := dst.Members(); len(got) != 0 {
		t.Errorf("members: got %v, want none (members publish themselves)", got)
	}
	// The store is the source's; the members tables differ, so compare the
	// store alone.
	srcHash, srcRev, srcCompact, _ := src.Store().HashKV(0)
	dstHash, dstRev, dstCompact, _ := dst.Store().HashKV(0)
	if srcHash != dstHash || srcRev != dstRev || srcCompact != dstCompact {
		t.Errorf("store: got hash %x rev %d compact %d, want %x %d %d", dstHash, dstRev, dstCompact, srcHash, srcRev, srcCompact)
	}
	if got, want := len(dst.Store().Leases()), len(src.Store().Leases()); got != want {
		t.Errorf("leases: got %d, want %d", got, want)
	}
}
