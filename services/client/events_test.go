// This file holds the tests of the event Recorder: aggregation of similar
// events, every event accounted for, and what Stop drops.

package client

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// memSink keeps events in memory, as the API service would store them.
type memSink struct {
	mu     sync.Mutex
	events map[string]*corev1.Event
	writes int
}

func (s *memSink) Create(_ context.Context, ev *corev1.Event) (*corev1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events == nil {
		s.events = map[string]*corev1.Event{}
	}
	if _, ok := s.events[ev.GetMetadata().GetName()]; ok {
		return nil, fmt.Errorf("events %q already exists", ev.GetMetadata().GetName())
	}
	s.writes++
	s.events[ev.GetMetadata().GetName()] = proto.Clone(ev).(*corev1.Event)
	return ev, nil
}

func (s *memSink) Update(_ context.Context, ev *corev1.Event) (*corev1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.events[ev.GetMetadata().GetName()]; !ok {
		return nil, fmt.Errorf("events %q not found", ev.GetMetadata().GetName())
	}
	s.writes++
	s.events[ev.GetMetadata().GetName()] = proto.Clone(ev).(*corev1.Event)
	return ev, nil
}

func (s *memSink) list() []*corev1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*corev1.Event
	for _, ev := range s.events {
		out = append(out, ev)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetMessage() < out[j].GetMessage() })
	return out
}

func runRecorder(t *testing.T, r *Recorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func flush(t *testing.T, r *Recorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRecorderAggregation(t *testing.T) {
	rs := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "web", Uid: "u-web"}}
	other := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "db", Uid: "u-db"}}
	tests := []struct {
		name   string
		record func(r *Recorder)
		want   []string // "message xcount", sorted by message
	}{
		{"identical events are counted", func(r *Recorder) {
			for range 3 {
				r.Eventf(rs, EventWarning, "BackOff", "Back-off restarting failed container c")
			}
		}, []string{"Back-off restarting failed container c x3"}},
		{"ten different messages stay apart", func(r *Recorder) {
			for i := range 10 {
				r.Eventf(rs, EventNormal, "SuccessfulCreate", "Created pod: web-%02d", i)
			}
		}, []string{"Created pod: web-00 x1", "Created pod: web-01 x1", "Created pod: web-02 x1", "Created pod: web-03 x1", "Created pod: web-04 x1",
			"Created pod: web-05 x1", "Created pod: web-06 x1", "Created pod: web-07 x1", "Created pod: web-08 x1", "Created pod: web-09 x1"}},
		{"beyond ten they are combined, with the latest message", func(r *Recorder) {
			for i := range 25 {
				r.Eventf(rs, EventNormal, "SuccessfulCreate", "Created pod: web-%02d", i)
			}
		}, []string{"(combined from similar events): Created pod: web-24 x15",
			"Created pod: web-00 x1", "Created pod: web-01 x1", "Created pod: web-02 x1", "Created pod: web-03 x1", "Created pod: web-04 x1",
			"Created pod: web-05 x1", "Created pod: web-06 x1", "Created pod: web-07 x1", "Created pod: web-08 x1", "Created pod: web-09 x1"}},
		{"other objects and reasons are counted apart", func(r *Recorder) {
			for i := range 12 {
				r.Eventf(rs, EventNormal, "Pulled", "Pulled %d", i%2)
				r.Eventf(other, EventNormal, "Pulled", "Pulled %d", i%2)
			}
			r.Eventf(rs, EventWarning, "Failed", "Pulled 0")
		}, []string{"Pulled 0 x6", "Pulled 0 x6", "Pulled 0 x1", "Pulled 1 x6", "Pulled 1 x6"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sink := &memSink{}
			r := NewRecorder(RecorderConfig{Sink: sink, Component: "test"})
			runRecorder(t, r)
			tc.record(r)
			flush(t, r)
			var got []string
			for _, ev := range sink.list() {
				got = append(got, fmt.Sprintf("%s x%d", ev.GetMessage(), ev.GetCount()))
			}
			sort.Strings(got)
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("events:\n got %q\nwant %q", got, want)
			}
			st := r.Stats()
			if st.Written != st.Recorded || st.Dropped != 0 || st.Failed != 0 || st.Pending != 0 {
				t.Errorf("stats %+v: want everything written", st)
			}
		})
	}
}

// TestRecorderAccountsForEveryEvent records many events from several
// goroutines and checks that each is either in the store (as an event or a
// count) or counted as dropped.
func TestRecorderAccountsForEveryEvent(t *testing.T) {
	sink := &memSink{}
	r := NewRecorder(RecorderConfig{Sink: sink, Component: "test", QueueSize: 500, Writers: 4})
	runRecorder(t, r)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				p := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("p-%d-%d", g, i), Uid: fmt.Sprintf("u-%d-%d", g, i)}}
				r.Eventf(p, EventNormal, "Scheduled", "Successfully assigned default/%s to n1", p.GetMetadata().GetName())
			}
		})
	}
	wg.Wait()
	flush(t, r)
	st := r.Stats()
	var stored int64
	for _, ev := range sink.list() {
		stored += int64(ev.GetCount())
	}
	if st.Recorded != 8000 || st.Written+st.Dropped != st.Recorded || stored != st.Written || st.Pending != 0 {
		t.Errorf("stats %+v, %d counted in the store: want 8000 recorded, each written or dropped", st, stored)
	}
}

func TestRecorderStopDropsTheRest(t *testing.T) {
	sink := &memSink{}
	r := NewRecorder(RecorderConfig{Sink: sink, Component: "test"})
	p := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "p", Uid: "u"}}
	for i := range 5 {
		r.Eventf(p, EventNormal, "Scheduled", "attempt %d", i)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := r.Flush(ctx); err == nil {
		t.Fatal("Flush without Run: want a timeout error")
	}
	stopped, stop := context.WithCancel(t.Context())
	stop()
	r.Run(stopped)
	if st := r.Stats(); st.Dropped != 5 || st.Pending != 0 || len(sink.list()) != 0 {
		t.Errorf("after Run stopped: stats %+v, %d stored; want 5 dropped", st, len(sink.list()))
	}
}
