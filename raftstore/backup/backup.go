// Package backup holds the store's backup file: what Maintenance.Snapshot
// streams to `etcdctl snapshot save`, and what `kplane store snapshot
// restore` and `kplane store snapshot status` read back.
//
// The file is kplane's own format, not etcd's bbolt database: etcdutl cannot
// read it, and kplane refuses an etcd snapshot. Its layout (integers
// big-endian):
//
//	magic "kplane-snapshot\n" (16 bytes)
//	format version, uint32 (1)
//	body length N, uint64
//	body: the MVCC store's snapshot (mvcc.Snapshot.WriteTo), N bytes: every
//	  uncompacted revision of every key, the revision, the compaction point
//	  and the leases, with its own CRC-32C
//	zero padding up to a multiple of 512 bytes
//	SHA-256 of everything before it (32 bytes)
//
// The padding is there for etcd's client: `etcdctl snapshot save` takes a
// stream whose length is 32 more than a multiple of 512 (a bbolt file is
// whole pages) as one that ends with its SHA-256, and refuses any other.
package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/kplane/kplane/raftstore/mvcc"
)

const (
	// Magic opens every backup file.
	Magic = "kplane-snapshot\n"
	// FormatVersion is the layout this package writes and reads.
	FormatVersion = 1
	// HashSize is the length of the trailing SHA-256.
	HashSize = sha256.Size

	headerSize = len(Magic) + 4 + 8
	// align is what the content before the hash is padded to.
	align = 512
)

// Encoder writes the backup file of one consistent store snapshot. The
// snapshot is serialised twice, once to measure it and once to write it, so
// that the length is known up front without holding the file in memory.
type Encoder struct {
	snap    mvcc.Snapshot
	bodyLen int64
}

// NewEncoder measures snap. snap must stay unchanged while the Encoder is in
// use (an mvcc.Snapshot does).
func NewEncoder(snap mvcc.Snapshot) (*Encoder, error) {
	n, err := snap.WriteTo(io.Discard)
	if err != nil {
		return nil, fmt.Errorf("backup: measure snapshot: %w", err)
	}
	return &Encoder{snap: snap, bodyLen: n}, nil
}

// ContentSize is the length of the file without its trailing hash.
func (e *Encoder) ContentSize() int64 { return contentSize(e.bodyLen) }

// contentSize is the length of header, body and padding for a body of n
// bytes.
func contentSize(n int64) int64 {
	size := int64(headerSize) + n
	return (size + align - 1) / align * align
}

// WriteContent writes the file without its trailing hash: header, body and
// padding, ContentSize bytes in all. The caller appends the SHA-256 of what
// it wrote (Write does both).
func (e *Encoder) WriteContent(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	var hdr [headerSize]byte
	copy(hdr[:], Magic)
	binary.BigEndian.PutUint32(hdr[len(Magic):], FormatVersion)
	binary.BigEndian.PutUint64(hdr[len(Magic)+4:], uint64(e.bodyLen))
	if _, err := bw.Write(hdr[:]); err != nil {
		return cw.n, fmt.Errorf("backup: write header: %w", err)
	}
	n, err := e.snap.WriteTo(bw)
	if err != nil {
		return cw.n, fmt.Errorf("backup: write body: %w", err)
	}
	if n != e.bodyLen {
		return cw.n, fmt.Errorf("backup: snapshot changed while being written: %d bytes, measured %d", n, e.bodyLen)
	}
	pad := make([]byte, e.ContentSize()-int64(headerSize)-n)
	if _, err := bw.Write(pad); err != nil {
		return cw.n, fmt.Errorf("backup: write padding: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("backup: write: %w", err)
	}
	return cw.n, nil
}

// Write writes the whole backup file of snap to w (content, then its
// SHA-256) and returns the bytes written.
func Write(w io.Writer, snap mvcc.Snapshot) (int64, error) {
	e, err := NewEncoder(snap)
	if err != nil {
		return 0, err
	}
	h := sha256.New()
	n, err := e.WriteContent(io.MultiWriter(w, h))
	if err != nil {
		return n, err
	}
	m, err := w.Write(h.Sum(nil))
	n += int64(m)
	if err != nil {
		return n, fmt.Errorf("backup: write hash: %w", err)
	}
	return n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Errors of Decode; each error it returns wraps one of them.
var (
	// ErrNotSnapshot: the data does not start with Magic.
	ErrNotSnapshot = errors.New("backup: not a kplane store snapshot")
	// ErrUnsupportedVersion: a format version this kplane does not read.
	ErrUnsupportedVersion = errors.New("backup: unsupported snapshot format version")
	// ErrTruncated: the data ends before the length its header gives.
	ErrTruncated = errors.New("backup: snapshot file is truncated")
	// ErrHashMismatch: the trailing SHA-256 is not that of the content.
	ErrHashMismatch = errors.New("backup: snapshot integrity check failed")
	// ErrCorrupt: the hash matches but the layout is wrong.
	ErrCorrupt = errors.New("backup: snapshot file is corrupt")
)

// bboltMagic is the magic number of a bbolt database (an etcd snapshot),
// found little-endian right after the 16-byte header of its first page.
const bboltMagic = 0xED0CDAED

// Decode checks a whole backup file held in data and returns its body, the
// MVCC store's snapshot (a sub-slice of data). With skipHashCheck the
// trailing SHA-256 is not compared; the body's own CRC-32C is still checked
// when it is read (mvcc.Store.Restore, mvcc.ReadSnapshotInfo).
func Decode(data []byte, skipHashCheck bool) ([]byte, error) {
	if err := checkMagic(data); err != nil {
		return nil, err
	}
	if len(data) < headerSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the header", ErrTruncated, len(data))
	}
	if v := binary.BigEndian.Uint32(data[len(Magic):]); v != FormatVersion {
		return nil, fmt.Errorf("%w: %d (this kplane reads version %d)", ErrUnsupportedVersion, v, FormatVersion)
	}
	bodyLen := binary.BigEndian.Uint64(data[len(Magic)+4:])
	if bodyLen > uint64(len(data)) {
		return nil, fmt.Errorf("%w: %d bytes, the header gives a body of %d", ErrTruncated, len(data), bodyLen)
	}
	content := contentSize(int64(bodyLen))
	switch total := content + HashSize; {
	case int64(len(data)) < total:
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrTruncated, len(data), total)
	case int64(len(data)) > total:
		return nil, fmt.Errorf("%w: %d bytes after the hash", ErrCorrupt, int64(len(data))-total)
	}
	if !skipHashCheck {
		want := data[content:]
		if got := sha256.Sum256(data[:content]); string(got[:]) != string(want) {
			return nil, fmt.Errorf("%w: expected sha256 %x, got %x", ErrHashMismatch, want, got)
		}
	}
	body := data[headerSize : int64(headerSize)+int64(bodyLen)]
	for _, b := range data[int64(headerSize)+int64(bodyLen) : content] {
		if b != 0 {
			return nil, fmt.Errorf("%w: padding is not zero", ErrCorrupt)
		}
	}
	return body, nil
}

// checkMagic tells a kplane snapshot from an etcd one, a truncated one and
// anything else.
func checkMagic(data []byte) error {
	n := min(len(data), len(Magic))
	switch {
	case string(data[:n]) != Magic[:n]:
		if len(data) >= 20 && binary.LittleEndian.Uint32(data[16:20]) == bboltMagic {
			return fmt.Errorf("%w: it is an etcd snapshot (a bbolt database); restore it with etcdutl", ErrNotSnapshot)
		}
		return ErrNotSnapshot
	case n < len(Magic):
		return fmt.Errorf("%w: %d bytes, shorter than the header", ErrTruncated, len(data))
	}
	return nil
}

// Status is what `kplane store snapshot status` reports, with the JSON
// names etcdutl uses.
type Status struct {
	// Hash is the store's HashKV at Revision (what `etcdctl endpoint
	// hashkv` reported there).
	Hash     uint32 `json:"hash"`
	Revision int64  `json:"revision"`
	// TotalKey counts every stored revision of every key, as etcd counts
	// the entries of its key bucket.
	TotalKey int `json:"totalKey"`
	// TotalSize is the file's length in bytes.
	TotalSize int64 `json:"totalSize"`
}

// ReadStatus checks a whole backup file held in data (hash included) and
// describes it.
func ReadStatus(data []byte) (Status, error) {
	body, err := Decode(data, false)
	if err != nil {
		return Status{}, err
	}
	info, err := mvcc.ReadSnapshotInfo(bytes.NewReader(body))
	if err != nil {
		return Status{}, fmt.Errorf("backup: %w", err)
	}
	return Status{Hash: info.Hash, Revision: info.Revision, TotalKey: info.Revisions, TotalSize: int64(len(data))}, nil
}
