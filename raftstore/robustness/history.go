// This file holds the history of client requests and its conversion into
// porcupine operations, settling unknown outcomes from the final event stream.

package robustness

import (
	"fmt"
	"maps"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Event is one watch event (or one entry of the final event stream).
type Event struct {
	Revision int64
	Key      string
	Value    string
	Delete   bool
}

// Record is one finished client request.
type Record struct {
	Client int
	Input  Input
	Output Output
	Call   time.Duration // since the history's start
	Return time.Duration // since the history's start; ignored when Output.Unknown
}

// History records client requests; it is safe for concurrent use. Keys are
// named by index into its key space.
type History struct {
	start time.Time
	keys  []string

	mu      sync.Mutex
	records []Record
	errs    map[string]int
}

// NewHistory starts a history over the given keys (at most MaxKeys).
func NewHistory(keys []string) (*History, error) {
	if len(keys) == 0 || len(keys) > MaxKeys {
		return nil, fmt.Errorf("robustness: key space of %d keys, want 1..%d", len(keys), MaxKeys)
	}
	return &History{start: time.Now(), keys: append([]string(nil), keys...)}, nil
}

// Keys returns the key space.
func (h *History) Keys() []string { return h.keys }

// Now is the time since the history started, for Call and Return stamps.
func (h *History) Now() time.Duration { return time.Since(h.start) }

// Add appends a finished request.
func (h *History) Add(r Record) {
	h.mu.Lock()
	h.records = append(h.records, r)
	h.mu.Unlock()
}

// noteErr counts a failed request's error by its message (shortened).
func (h *History) noteErr(err error) {
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80]
	}
	h.mu.Lock()
	if h.errs == nil {
		h.errs = make(map[string]int)
	}
	h.errs[msg]++
	h.mu.Unlock()
}

// Errors returns how often each error message was seen.
func (h *History) Errors() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.errs)
}

// Records returns a copy of the recorded requests in the order they finished.
func (h *History) Records() []Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Record(nil), h.records...)
}

// Stats counts what happened: per kind, acknowledged and unknown.
type Stats struct {
	Total, Unknown, Acked     int
	Gets, Puts, Deletes, CASs int
	CASSucceeded              int
}

// Stats summarises the history.
func (h *History) Stats() Stats {
	var s Stats
	for _, r := range h.Records() {
		s.Total++
		if r.Output.Unknown {
			s.Unknown++
		} else {
			s.Acked++
		}
		switch r.Input.Kind {
		case OpGet:
			s.Gets++
		case OpPut:
			s.Puts++
		case OpDelete:
			s.Deletes++
		case OpCAS:
			s.CASs++
			if r.Output.Succeeded {
				s.CASSucceeded++
			}
		}
	}
	return s
}

// ResolveUnknown uses the final event stream (every event of the store from
// revision 1, as all members agree on it) to settle writes whose outcome the
// client never learned. Every put and CAS writes a value unique in the
// history, so:
//   - an unknown put or CAS whose (key, value) is in the stream was applied
//     at that event's revision: its output gets that revision (it stays
//     unknown, so porcupine may still place it anywhere after its call);
//   - one whose value is not in the stream was never applied and is dropped;
//   - an unknown delete stays open; an unknown get is dropped (a read that
//     failed changed nothing).
//
// It returns the records to check.
func ResolveUnknown(records []Record, keys []string, stream []Event) []Record {
	type kv struct{ key, value string }
	applied := make(map[kv]int64, len(stream))
	for _, ev := range stream {
		if !ev.Delete {
			applied[kv{ev.Key, ev.Value}] = ev.Revision
		}
	}
	out := make([]Record, 0, len(records))
	for _, r := range records {
		if !r.Output.Unknown {
			out = append(out, r)
			continue
		}
		switch r.Input.Kind {
		case OpGet:
			continue
		case OpPut, OpCAS:
			rev, ok := applied[kv{keys[r.Input.Key], r.Input.Value}]
			if !ok {
				continue
			}
			r.Output.Revision = rev
			if r.Input.Kind == OpCAS {
				r.Output.Succeeded = true
			}
		}
		out = append(out, r)
	}
	return out
}

// Operations converts records to porcupine operations; an unknown outcome
// gets an infinite return time.
func Operations(records []Record) []porcupine.Operation {
	ops := make([]porcupine.Operation, 0, len(records))
	for _, r := range records {
		ret := int64(r.Return)
		if r.Output.Unknown {
			ret = math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{
			ClientId: r.Client,
			Input:    r.Input,
			Call:     int64(r.Call),
			Output:   r.Output,
			Return:   ret,
		})
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}
