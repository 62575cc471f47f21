// This file holds the tests of the backup file format: a round trip through
// Write and Decode, and Decode's refusal of everything that is not a whole,
// intact kplane snapshot.

package backup_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kplane/kplane/raftstore/backup"
	"github.com/kplane/kplane/raftstore/mvcc"
)

// newStore returns a store holding a few revisions, a deletion, a lease and a
// compaction.
func newStore(t *testing.T) *mvcc.Store {
	t.Helper()
	s := mvcc.New(mvcc.Config{})
	t.Cleanup(s.Close)
	if err := s.LeaseGrant(42, 60); err != nil {
		t.Fatal(err)
	}
	puts := []*pb.PutRequest{
		{Key: []byte("a"), Value: []byte("1")},
		{Key: []byte("b"), Value: []byte("1")},
		{Key: []byte("a"), Value: []byte("2")},
		{Key: []byte("leased"), Value: []byte("x"), Lease: 42},
		{Key: []byte("c"), Value: bytes.Repeat([]byte("v"), 3000)},
	}
	for _, p := range puts {
		if _, err := s.Put(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DeleteRange(&pb.DeleteRangeRequest{Key: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Compact(3); err != nil {
		t.Fatal(err)
	}
	return s
}

func encode(t *testing.T, s *mvcc.Store) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := backup.Write(&buf, s.Snapshot())
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("Write returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	src := newStore(t)
	data := encode(t, src)
	if got := len(data) % 512; got != backup.HashSize {
		t.Errorf("file length %d mod 512 = %d, want %d (what etcdctl snapshot save checks)", len(data), got, backup.HashSize)
	}
	if !bytes.HasPrefix(data, []byte(backup.Magic)) {
		t.Errorf("file starts with %q, want %q", data[:len(backup.Magic)], backup.Magic)
	}
	body, err := backup.Decode(data, false)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	dst := mvcc.New(mvcc.Config{})
	t.Cleanup(dst.Close)
	if err := dst.Restore(bytes.NewReader(body)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got, want := dst.Rev(), src.Rev(); got != want {
		t.Errorf("revision: got %d, want %d", got, want)
	}
	if got, want := dst.CompactRev(), src.CompactRev(); got != want {
		t.Errorf("compact revision: got %d, want %d", got, want)
	}
	srcHash, _, _, _ := src.HashKV(0)
	dstHash, _, _, _ := dst.HashKV(0)
	if srcHash != dstHash {
		t.Errorf("HashKV: got %x, want %x", dstHash, srcHash)
	}
	if l, ok := dst.Lease(42); !ok || l.TTL != 60 || len(l.Keys) != 1 {
		t.Errorf("lease 42: got %+v (found %v), want TTL 60 with one key", l, ok)
	}

	st, err := backup.ReadStatus(data)
	if err != nil {
		t.Fatalf("ReadStatus: %v", err)
	}
	// Compacting at 3 keeps what revision 3 reads: a@2 and a@4, b@3 and
	// its tombstone @7, leased@5, c@6.
	want := backup.Status{Hash: srcHash, Revision: src.Rev(), TotalKey: 6, TotalSize: int64(len(data))}
	if st != want {
		t.Errorf("status: got %+v, want %+v", st, want)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := encode(t, newStore(t))
	content := len(good) - backup.HashSize

	// rehash recomputes the trailing hash, so that only the change under
	// test is wrong.
	rehash := func(b []byte) []byte {
		sum := sha256.Sum256(b[:len(b)-backup.HashSize])
		copy(b[len(b)-backup.HashSize:], sum[:])
		return b
	}
	withByte := func(i int, v byte) []byte {
		b := bytes.Clone(good)
		b[i] ^= v
		return b
	}

	tests := []struct {
		name string
		data []byte
		skip bool
		want error
		// wantText, when set, must appear in the error.
		wantText string
	}{
		{name: "empty", data: nil, want: backup.ErrTruncated},
		{name: "part of the magic", data: good[:5], want: backup.ErrTruncated},
		{name: "header only", data: good[:28], want: backup.ErrTruncated},
		{name: "one byte short", data: good[:len(good)-1], want: backup.ErrTruncated},
		{name: "without the hash", data: good[:content], want: backup.ErrTruncated},
		{name: "trailing data", data: append(bytes.Clone(good), 0), want: backup.ErrCorrupt},
		{name: "wrong magic", data: append([]byte("not a snapshot, just text\n"), good[26:]...), want: backup.ErrNotSnapshot},
		{name: "etcd bbolt snapshot", data: etcdSnapshot(t), want: backup.ErrNotSnapshot, wantText: "etcd snapshot"},
		{name: "unknown version", data: rehash(withByte(len(backup.Magic)+3, 0x02)), want: backup.ErrUnsupportedVersion},
		{name: "body byte flipped", data: withByte(100, 0x01), want: backup.ErrHashMismatch, wantText: "expected sha256"},
		{name: "hash byte flipped", data: withByte(len(good)-1, 0x80), want: backup.ErrHashMismatch},
		{name: "padding not zero", data: rehash(withByte(content-1, 0x01)), want: backup.ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := backup.Decode(tt.data, tt.skip)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want an error wrapping %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("got %q, want it to say %q", err, tt.wantText)
			}
			if _, err := backup.ReadStatus(tt.data); !errors.Is(err, tt.want) {
				t.Errorf("ReadStatus: got %v, want an error wrapping %v", err, tt.want)
			}
		})
	}
}

func TestSkipHashCheck(t *testing.T) {
	good := encode(t, newStore(t))

	t.Run("hash byte flipped", func(t *testing.T) {
		b := bytes.Clone(good)
		b[len(b)-1] ^= 0xff
		body, err := backup.Decode(b, true)
		if err != nil {
			t.Fatalf("Decode with skipHashCheck: %v", err)
		}
		if _, err := mvcc.ReadSnapshotInfo(bytes.NewReader(body)); err != nil {
			t.Errorf("the body should still read: %v", err)
		}
	})
	t.Run("body byte flipped", func(t *testing.T) {
		// The body's own CRC still catches it when the body is read.
		b := bytes.Clone(good)
		b[100] ^= 0x01
		body, err := backup.Decode(b, true)
		if err != nil {
			t.Fatalf("Decode with skipHashCheck: %v", err)
		}
		if _, err := mvcc.ReadSnapshotInfo(bytes.NewReader(body)); !errors.Is(err, mvcc.ErrSnapshotCorrupt) {
			t.Errorf("got %v, want an error wrapping mvcc.ErrSnapshotCorrupt", err)
		}
	})
}

// etcdSnapshot returns what `etcdctl snapshot save` writes for an etcd
// member: a bbolt database followed by its SHA-256.
func etcdSnapshot(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "etcd.db")
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("key"))
		if err != nil {
			return err
		}
		for i := range 10 {
			var k [16]byte
			binary.BigEndian.PutUint64(k[:], uint64(i+2))
			if err := b.Put(k[:], fmt.Appendf(nil, "value %d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return append(data, sum[:]...)
}
