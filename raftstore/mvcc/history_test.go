// This file holds the tests of the history's chunks, read by a watch that
// spans several.

package mvcc

import (
	"fmt"
	"testing"
)

func TestHistoryChunks(t *testing.T) {
	var h history
	const n = 3*histChunk + 17
	for rev := int64(2); rev < 2+n; rev++ {
		h.append(histRecord{rev: rev})
	}
	check := func(name string, firstRev int64) {
		t.Run(name, func(t *testing.T) {
			if got, want := h.len(), int(2+n-firstRev); got != want {
				t.Fatalf("got len %d, want %d", got, want)
			}
			for i := range h.len() {
				if got := h.at(i).rev; got != firstRev+int64(i) {
					t.Fatalf("at(%d).rev = %d, want %d", i, got, firstRev+int64(i))
				}
			}
			tests := []struct {
				rev  int64
				want int
			}{
				{rev: 0, want: 0},
				{rev: firstRev, want: 0},
				{rev: firstRev + 5, want: 5},
				{rev: 2 + n, want: h.len()},
			}
			for _, tt := range tests {
				if got := h.index(tt.rev); got != tt.want {
					t.Errorf("index(%d) = %d, want %d", tt.rev, got, tt.want)
				}
			}
		})
	}
	check("full", 2)
	for _, drop := range []int{5, histChunk - 5, histChunk + 3, 500} {
		first := h.at(drop).rev
		h.dropBefore(drop)
		check(fmt.Sprint("after dropping ", drop), first)
	}
	h.append(histRecord{rev: 2 + n})
	if got := h.at(h.len() - 1).rev; got != 2+n {
		t.Errorf("appended record rev %d, want %d", got, 2+n)
	}
	h.dropBefore(h.len())
	if h.len() != 0 {
		t.Errorf("got len %d after dropping everything, want 0", h.len())
	}
}

// Watches and compaction across many history chunks.
func TestWatchAcrossHistoryChunks(t *testing.T) {
	s := newTestStore(t)
	var log []written
	for i := range 3 * histChunk {
		log = append(log, putW(t, s, fmt.Sprintf("k/%d", i%10), fmt.Sprint(i)))
	}
	if _, err := s.Compact(int64(histChunk + 100)); err != nil {
		t.Fatal(err)
	}
	ws := s.NewWatchStream()
	defer ws.Close()
	from := int64(histChunk + 100)
	id, err := ws.Watch(0, []byte("k/"), []byte("k0"), from, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, receive(t, ws, id, s.Rev()), since(log, from, "k/"))
}
