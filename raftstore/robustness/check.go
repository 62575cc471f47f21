// This file holds the end-of-run checks: linearizability, acknowledged
// writes, convergence, identical event streams and compaction.

package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// allKeys is the Range/Watch range_end that, with key "\x00", means every key.
var allKeys = []byte{0}

// ErrNotLinearizable is returned when porcupine finds no linearization.
var ErrNotLinearizable = errors.New("robustness: history is not linearizable")

// CheckLinearizable checks the records against the etcd KV model (see Model) with
// porcupine, giving up after timeout. An inconclusive check (timeout) is an
// error too. On a violation the visualization is written to vizDir (if not
// empty) and named in the error.
func CheckLinearizable(records []Record, strict bool, initialRev int64, timeout time.Duration, vizDir string) error {
	model := Model(strict, initialRev)
	ops := Operations(records)
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	if res == porcupine.Ok {
		return nil
	}
	// Keep the history for a post-mortem.
	if vizDir != "" {
		if data, err := json.Marshal(records); err == nil {
			_ = os.WriteFile(filepath.Join(vizDir, "history.json"), data, 0o644)
		}
	}
	if res == porcupine.Unknown {
		return fmt.Errorf("robustness: linearizability check of %d operations timed out after %s", len(ops), timeout)
	}
	where := ""
	if vizDir != "" {
		path := filepath.Join(vizDir, "porcupine.html")
		if err := porcupine.VisualizePath(model, info, path); err == nil {
			where = " (visualization: " + path + ")"
		}
	}
	return fmt.Errorf("%w: %d operations%s", ErrNotLinearizable, len(ops), where)
}

// FinalStream reads every event from revision 1 through rev from member i
// with a watch, at most 30 s.
func (c *Cluster) FinalStream(ctx context.Context, i int, rev int64) ([]Event, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := c.Conn(i)
	if err != nil {
		return nil, err
	}
	stream, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", c.Members()[i].Name, err)
	}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte{0}, RangeEnd: allKeys, StartRevision: 1,
	}}}); err != nil {
		return nil, fmt.Errorf("watch %s: %w", c.Members()[i].Name, err)
	}
	var events []Event
	for {
		resp, err := stream.Recv()
		if err != nil {
			return events, fmt.Errorf("watch %s from 1 to %d (got %d events): %w", c.Members()[i].Name, rev, len(events), err)
		}
		if resp.Canceled || resp.CompactRevision != 0 {
			return events, fmt.Errorf("watch %s from 1 canceled (compact revision %d): %s", c.Members()[i].Name, resp.CompactRevision, resp.CancelReason)
		}
		events = append(events, toEvents(resp.Events)...)
		if n := len(events); n > 0 && events[n-1].Revision >= rev {
			return events, nil
		}
	}
}

func toEvents(evs []*mvccpb.Event) []Event {
	out := make([]Event, 0, len(evs))
	for _, ev := range evs {
		e := Event{Revision: ev.Kv.ModRevision, Key: string(ev.Kv.Key), Value: string(ev.Kv.Value)}
		if ev.Type == mvccpb.DELETE {
			e.Delete = true
		}
		out = append(out, e)
	}
	return out
}

// CheckAcknowledged verifies that every acknowledged write of the history is
// in the final event stream at the revision the client was told.
func CheckAcknowledged(records []Record, keys []string, stream []Event) error {
	type at struct {
		rev int64
		key string
	}
	byRev := make(map[at]Event, len(stream))
	for _, ev := range stream {
		byRev[at{ev.Revision, ev.Key}] = ev
	}
	var missing []string
	for _, r := range records {
		if r.Output.Unknown {
			continue
		}
		key := keys[r.Input.Key]
		var want *Event
		switch {
		case r.Input.Kind == OpPut, r.Input.Kind == OpCAS && r.Output.Succeeded:
			want = &Event{Revision: r.Output.Revision, Key: key, Value: r.Input.Value}
		case r.Input.Kind == OpDelete && r.Output.Deleted > 0:
			want = &Event{Revision: r.Output.Revision, Key: key, Delete: true}
		default:
			continue
		}
		if got, ok := byRev[at{want.Revision, key}]; !ok || got != *want {
			missing = append(missing, describe(r.Input, r.Output))
		}
	}
	if len(missing) > 0 {
		if len(missing) > 10 {
			missing = append(missing[:10], fmt.Sprintf("... and %d more", len(missing)-10))
		}
		return fmt.Errorf("robustness: %d acknowledged writes are not in the final event stream: %v", len(missing), missing)
	}
	return nil
}

// Convergence is what each member reports at the end.
type Convergence struct {
	Member   string
	Revision int64
	// KVHash is our own hash of a serializable Range of every key at the
	// common revision on that member alone.
	KVHash uint64
	// HashKV is the member's Maintenance HashKV at the common revision;
	// HashKVErr says why it is missing (for example Unimplemented).
	HashKV    uint32
	HashKVErr error
}

// CheckConvergence waits (at most 30 s) until every member has applied rev,
// then compares what they hold at rev: a serializable Range of every key on
// each member alone, and Maintenance HashKV where it is implemented.
func (c *Cluster) CheckConvergence(ctx context.Context, rev int64) ([]Convergence, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []Convergence
	for i, m := range c.Members() {
		var st *pb.StatusResponse
		var err error
		for {
			st, err = c.Status(ctx, i)
			if err == nil && st.Header.Revision >= rev {
				break
			}
			select {
			case <-ctx.Done():
				return out, fmt.Errorf("member %s did not reach revision %d (status %v, err %v)", m.Name, rev, st, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
		conn, err := c.Conn(i)
		if err != nil {
			return out, err
		}
		cv := Convergence{Member: m.Name, Revision: st.Header.Revision}
		rng, err := pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: allKeys, Revision: rev, Serializable: true})
		if err != nil {
			return out, fmt.Errorf("range %s at %d: %w", m.Name, rev, err)
		}
		h := fnv.New64a()
		for _, kv := range rng.Kvs {
			fmt.Fprintf(h, "%q=%q c%d m%d v%d l%d\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
		}
		cv.KVHash = h.Sum64()
		hk, err := pb.NewMaintenanceClient(conn).HashKV(ctx, &pb.HashKVRequest{Revision: rev})
		if err != nil {
			cv.HashKVErr = err
		} else {
			cv.HashKV = hk.Hash
		}
		out = append(out, cv)
	}
	for _, cv := range out[1:] {
		if cv.KVHash != out[0].KVHash {
			return out, fmt.Errorf("robustness: members differ at revision %d: %s hash %x, %s hash %x", rev, out[0].Member, out[0].KVHash, cv.Member, cv.KVHash)
		}
		if cv.HashKVErr == nil && out[0].HashKVErr == nil && cv.HashKV != out[0].HashKV {
			return out, fmt.Errorf("robustness: HashKV differs at revision %d: %s %x, %s %x", rev, out[0].Member, out[0].HashKV, cv.Member, cv.HashKV)
		}
		if cv.HashKVErr != nil && status.Code(cv.HashKVErr) != codes.Unimplemented {
			return out, fmt.Errorf("robustness: HashKV on %s: %w", cv.Member, cv.HashKVErr)
		}
	}
	return out, nil
}

// CheckStreamsEqual reports whether every member's final event stream is the
// same.
func CheckStreamsEqual(names []string, streams [][]Event) error {
	for i := 1; i < len(streams); i++ {
		a, b := streams[0], streams[i]
		n := min(len(a), len(b))
		for j := range n {
			if a[j] != b[j] {
				return fmt.Errorf("robustness: event streams of %s and %s differ at event %d: %+v vs %+v", names[0], names[i], j, a[j], b[j])
			}
		}
		if len(a) != len(b) {
			return fmt.Errorf("robustness: event streams of %s and %s differ in length: %d vs %d", names[0], names[i], len(a), len(b))
		}
	}
	return nil
}

// CheckCompaction compacts the store at rev through member 0, then checks on
// every member that a watch from below rev gets a "compacted" answer naming
// the compaction point, that a Range below rev fails as compacted, and that a
// watch from rev+1 still delivers the stream's events from there on.
func (c *Cluster) CheckCompaction(ctx context.Context, rev int64, stream []Event) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := c.Conn(0)
	if err != nil {
		return err
	}
	if _, err := pb.NewKVClient(conn).Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true}); err != nil {
		return fmt.Errorf("compact at %d: %w", rev, err)
	}
	// At the compaction point itself a tombstone may be gone (etcd drops
	// it with the compacted history), so compare from rev+1 on.
	var want []Event
	for _, ev := range stream {
		if ev.Revision > rev {
			want = append(want, ev)
		}
	}
	if len(want) == 0 {
		return fmt.Errorf("compact at %d: no events after it to check", rev)
	}
	for i, m := range c.Members() {
		conn, err := c.Conn(i)
		if err != nil {
			return err
		}
		// Each member applies the compaction in its own time: retry the
		// compacted answers for a while.
		var rangeErr error
		for attempt := 0; ; attempt++ {
			_, rangeErr = pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte("/r/k0"), Revision: rev - 1, Serializable: true})
			if status.Code(rangeErr) == codes.OutOfRange || attempt == 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if status.Code(rangeErr) != codes.OutOfRange {
			return fmt.Errorf("range at %d on %s after compaction at %d: got %v, want OutOfRange (compacted)", rev-1, m.Name, rev, rangeErr)
		}
		got, compactRev, err := watchFrom(ctx, conn, rev-1, 0)
		if err != nil {
			return fmt.Errorf("watch from %d on %s: %w", rev-1, m.Name, err)
		}
		if compactRev != rev || len(got) != 0 {
			return fmt.Errorf("watch from %d on %s after compaction at %d: got compact revision %d and %d events, want compact revision %d and none", rev-1, m.Name, rev, compactRev, len(got), rev)
		}
		got, compactRev, err = watchFrom(ctx, conn, rev+1, want[len(want)-1].Revision)
		if err != nil || compactRev != 0 {
			return fmt.Errorf("watch from the compaction point %d on %s: compact revision %d, %v", rev, m.Name, compactRev, err)
		}
		if err := CheckStreamsEqual([]string{"store", m.Name}, [][]Event{want, got}); err != nil {
			return fmt.Errorf("watch from the compaction point: %w", err)
		}
	}
	return nil
}

// watchFrom watches every key from start until an event at or past until
// (until 0: until the first response) and returns the events, or the compact
// revision if the watch was refused as compacted.
func watchFrom(ctx context.Context, conn *grpc.ClientConn, start, until int64) ([]Event, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	stream, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		return nil, 0, err
	}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte{0}, RangeEnd: allKeys, StartRevision: start,
	}}}); err != nil {
		return nil, 0, err
	}
	var events []Event
	for {
		resp, err := stream.Recv()
		if err != nil {
			return events, 0, err
		}
		if resp.CompactRevision != 0 {
			return events, resp.CompactRevision, nil
		}
		if resp.Created && len(resp.Events) == 0 {
			continue
		}
		if resp.Canceled {
			return events, 0, fmt.Errorf("watch canceled: %s", resp.CancelReason)
		}
		events = append(events, toEvents(resp.Events)...)
		if n := len(events); n > 0 && (until == 0 || events[n-1].Revision >= until) {
			return events, 0, nil
		}
	}
}
