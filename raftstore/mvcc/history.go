// This file holds the history: the events of every revision since the
// compaction point, in fixed-size chunks, for watchers catching up.

package mvcc

import (
	"sort"
)

// history is the events of every revision from the compaction point on, in
// revision order, for watch catch-up. It is kept in fixed-size chunks so that
// appending never copies the whole history and compaction frees whole chunks.
type history struct {
	chunks [][]histRecord // every chunk but the last is full
	first  int            // records of chunks[0] before first are dropped
}

const histChunk = 1024

// len returns the number of records.
func (h *history) len() int {
	if len(h.chunks) == 0 {
		return 0
	}
	return (len(h.chunks)-1)*histChunk + len(h.chunks[len(h.chunks)-1]) - h.first
}

// at returns record i (0 is the oldest).
func (h *history) at(i int) *histRecord {
	i += h.first
	return &h.chunks[i/histChunk][i%histChunk]
}

// append adds the newest record and returns it.
func (h *history) append(rec histRecord) *histRecord {
	if n := len(h.chunks); n == 0 || len(h.chunks[n-1]) == histChunk {
		h.chunks = append(h.chunks, make([]histRecord, 0, histChunk))
	}
	last := &h.chunks[len(h.chunks)-1]
	*last = append(*last, rec)
	return &(*last)[len(*last)-1]
}

// index returns the index of the first record at or after rev.
func (h *history) index(rev int64) int {
	n := h.len()
	if n == 0 {
		return 0
	}
	// Revisions are dense in the history, so this is usually exact.
	if i := rev - h.at(0).rev; i >= 0 && i < int64(n) && h.at(int(i)).rev == rev {
		return int(i)
	}
	return sort.Search(n, func(i int) bool { return h.at(i).rev >= rev })
}

// dropBefore drops the records before index i.
func (h *history) dropBefore(i int) {
	if i <= 0 {
		return
	}
	if i >= h.len() {
		*h = history{}
		return
	}
	i += h.first
	whole := i / histChunk
	clear(h.chunks[:whole])
	h.chunks = h.chunks[whole:]
	h.first = i % histChunk
	// Free the dropped records' events.
	clear(h.chunks[0][:h.first])
}
