// This file holds the tests of watches on an in-process cluster: events
// through every member, responses fragmented past the size limit, and
// require-leader watches.

package raftstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestClusterWatch watches on one follower while another follower writes:
// events arrive in order with prev_kv, a watch from a past revision replays
// history, filters drop what they should, and a watch below the compaction
// point is told so.
func TestClusterWatch(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{})
	ctx := ctxT(t)
	f := c.followers()
	w, r := f[0].client, f[1].client

	first, err := w.Put(ctx, "/w/a", "0")
	if err != nil {
		t.Fatal(err)
	}
	// A watch without a revision starts after the revision the watching
	// member has applied, which may lag the write just acknowledged by
	// another member; ask for the revision after it explicitly.
	live := r.Watch(ctx, "/w/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify(), clientv3.WithRev(first.Header.Revision+1))
	if resp := <-live; !resp.Created {
		t.Fatalf("first watch response: got %+v, want created", resp)
	}
	noDel := r.Watch(ctx, "/w/", clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(first.Header.Revision))

	for i := 1; i <= 3; i++ {
		if _, err := w.Put(ctx, "/w/a", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	del, err := w.Delete(ctx, "/w/a")
	if err != nil {
		t.Fatal(err)
	}

	type ev struct {
		typ   mvccpb.Event_EventType
		value string
		prev  string
	}
	want := []ev{{mvccpb.PUT, "1", "0"}, {mvccpb.PUT, "2", "1"}, {mvccpb.PUT, "3", "2"}, {mvccpb.DELETE, "", "3"}}
	var got []ev
	var lastRev int64
	timeout := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case resp := <-live:
			if err := resp.Err(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			for _, e := range resp.Events {
				if e.Kv.ModRevision <= lastRev {
					t.Fatalf("event at revision %d after one at %d", e.Kv.ModRevision, lastRev)
				}
				lastRev = e.Kv.ModRevision
				g := ev{typ: e.Type, value: string(e.Kv.Value)}
				if e.PrevKv != nil {
					g.prev = string(e.PrevKv.Value)
				}
				got = append(got, g)
			}
		case <-timeout:
			t.Fatalf("live watch: got %v before timing out, want %v", got, want)
		}
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if lastRev != del.Header.Revision {
		t.Errorf("last event revision: got %d, want %d", lastRev, del.Header.Revision)
	}

	// The filtered watch from the first put's revision replays four puts.
	var puts []string
	timeout = time.After(10 * time.Second)
	for len(puts) < 4 {
		select {
		case resp := <-noDel:
			for _, e := range resp.Events {
				if e.Type != mvccpb.PUT {
					t.Fatalf("filtered watch got a %v event", e.Type)
				}
				puts = append(puts, string(e.Kv.Value))
			}
		case <-timeout:
			t.Fatalf("replaying watch: got %v before timing out, want 4 puts", puts)
		}
	}
	if fmt.Sprint(puts) != "[0 1 2 3]" {
		t.Errorf("replayed puts: got %v, want [0 1 2 3]", puts)
	}

	// Progress request: answered with the current revision.
	if err := r.RequestProgress(ctx); err != nil {
		t.Fatalf("request progress: %v", err)
	}
	timeout = time.After(10 * time.Second)
	for progressed := false; !progressed; {
		select {
		case resp := <-live:
			if resp.IsProgressNotify() {
				if resp.Header.Revision < del.Header.Revision {
					t.Errorf("progress revision: got %d, want >= %d", resp.Header.Revision, del.Header.Revision)
				}
				progressed = true
			}
		case <-timeout:
			t.Fatal("no progress notification within 10s")
		}
	}

	// Compacted: a watch from below the compaction point is cancelled with
	// the compact revision.
	if _, err := w.Compact(ctx, del.Header.Revision); err != nil {
		t.Fatal(err)
	}
	// Watches are served from the member's applied state: a linearizable
	// read first makes sure r applied the compaction.
	if _, err := r.Get(ctx, "/w/a"); err != nil {
		t.Fatal(err)
	}
	old := r.Watch(ctx, "/w/", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision))
	select {
	case resp := <-old:
		if resp.CompactRevision != del.Header.Revision || !resp.Canceled {
			t.Errorf("watch below compaction: got compact revision %d canceled %v (%+v), want %d true", resp.CompactRevision, resp.Canceled, resp, del.Header.Revision)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to a compacted watch within 10s")
	}
}

// TestWatchFragment: a watch response larger than --max-request-bytes is
// sent in fragments to a watcher that asked for them, and etcd's client
// joins them into one response.
func TestWatchFragment(t *testing.T) {
	c := newCluster(t, 1, clusterOptions{maxRequestBytes: 16 * 1024})
	ctx := ctxT(t)
	cli := c.members[0].client
	big := strings.Repeat("x", 10*1024)
	for i := 0; i < 10; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("/frag/%d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	del, err := cli.Delete(ctx, "/frag/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	// Raw gRPC, to see the fragments themselves.
	stream, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte("/frag/"), RangeEnd: []byte("/frag0"), PrevKv: true, Fragment: true, StartRevision: del.Header.Revision,
	}}}); err != nil {
		t.Fatal(err)
	}
	var events, fragments int
	for events < 10 {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if resp.Fragment {
			fragments++
		}
		for _, e := range resp.Events {
			if e.PrevKv == nil || len(e.PrevKv.Value) != len(big) {
				t.Fatal("delete event without its 10 KiB previous value")
			}
			events++
		}
		if resp.Size() > 16*1024+11*1024 {
			t.Errorf("response of %d bytes, want at most about the 16 KiB limit", resp.Size())
		}
	}
	if fragments == 0 {
		t.Error("a 100 KiB response was not fragmented")
	}
}

// TestWatchRequireLeader: a watch opened with clientv3.WithRequireLeader on
// a member that loses its leader ends with "no leader", so that the client
// can move to another member instead of waiting on a silent stream.
func TestWatchRequireLeader(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{})
	ctx := ctxT(t)
	lone := c.followers()[0]
	// A linearizable read through it: it knows the leader now.
	if _, err := lone.client.Get(ctx, "/rl/x"); err != nil {
		t.Fatal(err)
	}
	wch := lone.client.Watch(clientv3.WithRequireLeader(ctx), "/rl/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		t.Fatalf("first response: got %+v, want created", resp)
	}
	for _, m := range c.members {
		if m != lone {
			c.stop(m)
		}
	}
	select {
	case resp, ok := <-wch:
		if ok && !errors.Is(resp.Err(), rpctypes.ErrNoLeader) {
			t.Fatalf("watch without a leader: got %v, want %v", resp.Err(), rpctypes.ErrNoLeader)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("watch requiring a leader still open 20s after the member lost it")
	}
}
