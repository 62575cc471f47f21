// This file holds the tests of the checkers themselves: linearizability,
// unknown outcomes, acknowledged writes, watches and percentiles.

package robustness

import (
	"errors"
	"testing"
	"time"
)

// ms turns milliseconds into a history timestamp.
func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestCheckLinearizable tests the checker itself on small hand-written
// histories: correct ones must pass, and each known bug — a stale read, a
// lost write, a CAS that ignored its compare, a revision going back — must be
// caught.
func TestCheckLinearizable(t *testing.T) {
	put := func(c int, key int, v string, call, ret int, rev int64) Record {
		return Record{Client: c, Input: Input{Kind: OpPut, Key: key, Value: v}, Output: Output{Revision: rev}, Call: ms(call), Return: ms(ret)}
	}
	get := func(c int, key int, call, ret int, found bool, v string, mod, rev int64) Record {
		return Record{Client: c, Input: Input{Kind: OpGet, Key: key}, Output: Output{Found: found, Value: v, ModRev: mod, Revision: rev}, Call: ms(call), Return: ms(ret)}
	}
	cas := func(c int, key int, expect int64, v string, call, ret int, ok bool, rev int64) Record {
		return Record{Client: c, Input: Input{Kind: OpCAS, Key: key, ExpectModRev: expect, Value: v}, Output: Output{Succeeded: ok, Revision: rev}, Call: ms(call), Return: ms(ret)}
	}
	del := func(c int, key int, call, ret int, deleted, rev int64) Record {
		return Record{Client: c, Input: Input{Kind: OpDelete, Key: key}, Output: Output{Deleted: deleted, Revision: rev}, Call: ms(call), Return: ms(ret)}
	}
	unknown := func(r Record) Record {
		r.Output = Output{Unknown: true, Revision: r.Output.Revision}
		return r
	}
	tests := []struct {
		name    string
		records []Record
		strict  bool
		wantOK  bool
	}{
		{
			name:    "sequential put then get",
			records: []Record{put(0, 0, "a", 0, 10, 2), get(1, 0, 20, 30, true, "a", 2, 2)},
			strict:  true, wantOK: true,
		},
		{
			name:    "concurrent get may see the old or the new value",
			records: []Record{put(0, 0, "a", 0, 10, 2), put(0, 0, "b", 20, 40, 3), get(1, 0, 25, 30, true, "a", 2, 2)},
			strict:  true, wantOK: true,
		},
		{
			name:    "stale read after the write was acknowledged",
			records: []Record{put(0, 0, "a", 0, 10, 2), put(0, 0, "b", 20, 30, 3), get(1, 0, 40, 50, true, "a", 2, 2)},
			strict:  true, wantOK: false,
		},
		{
			name:    "lost acknowledged write",
			records: []Record{put(0, 0, "a", 0, 10, 2), get(1, 0, 20, 30, false, "", 0, 2)},
			strict:  true, wantOK: false,
		},
		{
			name: "cas on the right mod revision succeeds",
			records: []Record{put(0, 0, "a", 0, 10, 2), cas(1, 0, 2, "b", 20, 30, true, 3),
				get(0, 0, 40, 50, true, "b", 3, 3)},
			strict: true, wantOK: true,
		},
		{
			name:    "cas that ignored its compare",
			records: []Record{put(0, 0, "a", 0, 10, 2), cas(1, 0, 7, "b", 20, 30, true, 3)},
			strict:  true, wantOK: false,
		},
		{
			name:    "cas on an absent key compares mod_revision 0",
			records: []Record{cas(1, 1, 0, "b", 0, 10, true, 2), cas(1, 1, 0, "c", 20, 30, false, 2)},
			strict:  true, wantOK: true,
		},
		{
			name:    "delete of an absent key does not bump the revision",
			records: []Record{del(0, 0, 0, 10, 0, 1), put(0, 0, "a", 20, 30, 2), del(0, 0, 40, 50, 1, 3)},
			strict:  true, wantOK: true,
		},
		{
			name:    "unknown put that was applied explains a later read",
			records: []Record{unknown(put(0, 0, "a", 0, 10, 2)), get(1, 0, 100, 110, true, "a", 2, 2)},
			strict:  true, wantOK: true,
		},
		{
			name:    "unknown delete may never take effect",
			records: []Record{put(0, 0, "a", 0, 10, 2), unknown(del(1, 0, 20, 30, 0, 0)), get(0, 0, 40, 50, true, "a", 2, 2)},
			strict:  true, wantOK: true,
		},
		{
			name:    "revision going back",
			records: []Record{put(0, 0, "a", 0, 10, 2), put(0, 1, "b", 20, 30, 3), get(1, 2, 40, 50, false, "", 0, 2)},
			strict:  false, wantOK: false,
		},
		{
			name:    "loose revisions allow writes outside the history",
			records: []Record{put(0, 0, "a", 0, 10, 2), put(0, 1, "b", 20, 30, 9), get(1, 0, 40, 50, true, "a", 2, 12)},
			strict:  false, wantOK: true,
		},
		{
			name:    "strict revisions catch a skipped revision",
			records: []Record{put(0, 0, "a", 0, 10, 2), put(0, 1, "b", 20, 30, 9)},
			strict:  true, wantOK: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckLinearizable(tt.records, tt.strict, 1, 10*time.Second, "")
			if gotOK := err == nil; gotOK != tt.wantOK {
				t.Fatalf("got err %v, want linearizable=%t", err, tt.wantOK)
			}
			if err != nil && !errors.Is(err, ErrNotLinearizable) {
				t.Fatalf("got err %v, want ErrNotLinearizable", err)
			}
		})
	}
}

func TestResolveUnknown(t *testing.T) {
	keys := []string{"/a", "/b"}
	stream := []Event{{Revision: 2, Key: "/a", Value: "x"}, {Revision: 3, Key: "/b", Delete: true}}
	records := []Record{
		{Input: Input{Kind: OpPut, Key: 0, Value: "x"}, Output: Output{Unknown: true}},
		{Input: Input{Kind: OpPut, Key: 0, Value: "never"}, Output: Output{Unknown: true}},
		{Input: Input{Kind: OpCAS, Key: 1, Value: "nope"}, Output: Output{Unknown: true}},
		{Input: Input{Kind: OpGet, Key: 1}, Output: Output{Unknown: true}},
		{Input: Input{Kind: OpDelete, Key: 1}, Output: Output{Unknown: true}},
	}
	got := ResolveUnknown(records, keys, stream)
	if len(got) != 2 {
		t.Fatalf("got %d records, want 2 (the applied put and the open delete): %+v", len(got), got)
	}
	if got[0].Output.Revision != 2 || !got[0].Output.Unknown {
		t.Errorf("got applied put output %+v, want unknown at revision 2", got[0].Output)
	}
	if got[1].Input.Kind != OpDelete {
		t.Errorf("got second record %+v, want the delete", got[1])
	}
}

func TestCheckAcknowledged(t *testing.T) {
	keys := []string{"/a"}
	stream := []Event{{Revision: 2, Key: "/a", Value: "x"}, {Revision: 3, Key: "/a", Delete: true}}
	tests := []struct {
		name    string
		records []Record
		wantErr bool
	}{
		{name: "all present", records: []Record{
			{Input: Input{Kind: OpPut, Value: "x"}, Output: Output{Revision: 2}},
			{Input: Input{Kind: OpDelete}, Output: Output{Revision: 3, Deleted: 1}},
		}},
		{name: "acknowledged put missing", wantErr: true, records: []Record{
			{Input: Input{Kind: OpPut, Value: "y"}, Output: Output{Revision: 4}},
		}},
		{name: "acknowledged at another revision", wantErr: true, records: []Record{
			{Input: Input{Kind: OpPut, Value: "x"}, Output: Output{Revision: 3}},
		}},
		{name: "failed cas needs nothing", records: []Record{
			{Input: Input{Kind: OpCAS, Value: "z"}, Output: Output{Revision: 3}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckAcknowledged(tt.records, keys, stream)
			if (err != nil) != tt.wantErr {
				t.Fatalf("got err %v, want error %t", err, tt.wantErr)
			}
		})
	}
}

func TestCheckWatch(t *testing.T) {
	stream := []Event{
		{Revision: 2, Key: "/a", Value: "1"},
		{Revision: 3, Key: "/a", Value: "2"},
		{Revision: 3, Key: "/b", Value: "2"},
		{Revision: 4, Key: "/a", Delete: true},
	}
	evs := func(idx ...int) WatchResponse {
		var r WatchResponse
		for _, i := range idx {
			r.Events = append(r.Events, stream[i])
		}
		return r
	}
	progress := func(rev int64) WatchResponse { return WatchResponse{Progress: rev} }
	tests := []struct {
		name      string
		responses []WatchResponse
		start     int64
		wantErr   error // nil: valid; errAny: any error
	}{
		{name: "everything in order", responses: []WatchResponse{evs(0), evs(1, 2), progress(3), evs(3), progress(4)}},
		{name: "resumed from the middle", start: 3, responses: []WatchResponse{evs(1, 2), evs(3)}},
		{name: "stale progress is harmless", responses: []WatchResponse{evs(0), evs(1, 2), progress(2), evs(3)}},
		{name: "gap", responses: []WatchResponse{evs(0), evs(3)}, wantErr: errAny},
		{name: "duplicate", responses: []WatchResponse{evs(0), evs(0), evs(1, 2)}, wantErr: errAny},
		{name: "reordered", responses: []WatchResponse{evs(1, 2), evs(0)}, wantErr: errAny},
		{name: "revision split", responses: []WatchResponse{evs(0), evs(1), evs(2), evs(3)}, wantErr: errAny},
		{name: "progress ahead of an event", responses: []WatchResponse{evs(0), progress(3), evs(1, 2)}, wantErr: ErrProgressOvertook},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := tt.start
			if start == 0 {
				start = 1
			}
			err := CheckWatch(tt.responses, stream, start)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("got err %v, want none", err)
			case tt.wantErr != nil && err == nil:
				t.Fatalf("got no error, want %v", tt.wantErr)
			case tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("got err %v, want %v", err, tt.wantErr)
			}
		})
	}
}

var errAny = errors.New("any error")

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p50, p99 := Percentiles(ds)
	if p50 != 50*time.Millisecond || p99 != 99*time.Millisecond {
		t.Fatalf("got p50 %s p99 %s, want 50ms 99ms", p50, p99)
	}
}
