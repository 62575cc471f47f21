// This file holds a whole chaos run: cluster, watchers, traffic, faults,
// then every check.

package robustness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Scenario is one chaos run: a cluster, traffic, faults, then every check.
type Scenario struct {
	Flavor  Flavor
	Dir     string // member data and logs, and the porcupine visualization
	Members int    // default 3
	Traffic TrafficConfig
	Faults  FaultConfig
	// CheckTimeout bounds porcupine (default 2 min).
	CheckTimeout time.Duration
	// Check, if set, runs once the final write succeeded, before the
	// other checks; its error is a failed check.
	Check func(ctx context.Context, c *Cluster) error
	Log   *slog.Logger
}

// Result is what a run found. Err joins every failed check; the other
// fields describe the run whatever it found.
type Result struct {
	Faults      FaultReport
	Stats       Stats
	Checked     int // operations given to porcupine
	FinalRev    int64
	Convergence []Convergence
	// WatchEvents and WatchResumes are per member.
	WatchEvents  []int
	WatchResumes []int
	// Errors counts the failed requests' errors by message.
	Errors map[string]int
	// Linearizability is porcupine's verdict (nil: linearizable).
	Linearizability error
	// OtherErrs are the failed checks of convergence, final streams,
	// acknowledged writes and watch progress.
	OtherErrs []error
	// WatchErrs are the watch checker's findings.
	WatchErrs []error
	// Err joins every failed check, including the above.
	Err error
}

// Keys of the history: five traffic keys, then the probe's and the burst's.
var scenarioKeys = []string{"/r/k0", "/r/k1", "/r/k2", "/r/k3", "/r/k4", "/r/probe", "/r/burst"}

// Run starts the cluster, runs traffic and watchers while the faults are
// injected, then checks the history. It returns an error only when the run
// itself could not be carried out; check failures are in Result.Err.
func (s Scenario) Run(ctx context.Context) (Result, error) {
	var res Result
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if s.Members == 0 {
		s.Members = 3
	}
	if s.CheckTimeout == 0 {
		s.CheckTimeout = 2 * time.Minute
	}
	h, err := NewHistory(scenarioKeys)
	if err != nil {
		return res, err
	}
	const trafficKeys = 5
	s.Faults.ProbeKey, s.Faults.BurstKey = trafficKeys, trafficKeys+1
	c, err := NewCluster(ctx, s.Flavor, s.Dir, s.Members, log)
	if err != nil {
		return res, err
	}
	defer c.Close()
	if _, err := c.Leader(ctx); err != nil {
		return res, fmt.Errorf("%w\n%s", err, c.Logs(20))
	}

	// The history starts from the revision the cluster has now.
	initialRev, err := c.currentRevision(ctx)
	if err != nil {
		return res, err
	}

	// Watchers start at revision 1 so they see everything.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchers := make([]*Watcher, s.Members)
	var wwg sync.WaitGroup
	for i := range watchers {
		watchers[i] = &Watcher{}
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			c.WatchMember(watchCtx, i, 1, watchers[i])
		}()
	}

	// Traffic runs until the faults are done (and at least a little).
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	trafficDone := make(chan error, 1)
	go func() {
		trafficDone <- runTrafficOn(trafficCtx, c.Endpoints(), h, s.Traffic, trafficKeys)
	}()
	s.Faults.ProbeClient, s.Faults.BurstClient = 1000, 2000
	rep, faultErr := InjectFaults(ctx, c, h, s.Faults)
	res.Faults = rep
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	stopTraffic()
	if err := <-trafficDone; err != nil {
		faultErr = errors.Join(faultErr, err)
	}
	if faultErr != nil {
		stopWatch()
		wwg.Wait()
		return res, fmt.Errorf("%w\n%s", faultErr, c.Logs(20))
	}
	res.Stats = h.Stats()
	res.Errors = h.Errors()

	// A final write must succeed; its revision is the end of the history.
	cli, err := NewClient(c.Endpoints())
	if err != nil {
		return res, err
	}
	defer cli.Close()
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	var final int64
	for fctx.Err() == nil {
		rctx, rcancel := context.WithTimeout(fctx, 2*time.Second)
		resp, err := cli.Put(rctx, "/r/final", "done")
		rcancel()
		if err == nil {
			final = resp.Header.Revision
			break
		}
	}
	cancel()
	if final == 0 {
		return res, fmt.Errorf("the final write did not succeed within 30 s\n%s", c.Logs(20))
	}
	res.FinalRev = final
	if s.Check != nil {
		if err := s.Check(ctx, c); err != nil {
			res.OtherErrs = append(res.OtherErrs, err)
		}
	}

	res.Convergence, err = c.CheckConvergence(ctx, final)
	if err != nil {
		res.OtherErrs = append(res.OtherErrs, err)
	}
	var names []string
	var streams [][]Event
	for i, m := range c.Members() {
		st, err := c.FinalStream(ctx, i, final)
		if err != nil {
			res.OtherErrs = append(res.OtherErrs, err)
		}
		names = append(names, m.Name)
		streams = append(streams, st)
	}
	if err := CheckStreamsEqual(names, streams); err != nil {
		res.OtherErrs = append(res.OtherErrs, err)
	}
	stream := streams[0]
	records := h.Records()
	if err := CheckAcknowledged(records, h.Keys(), stream); err != nil {
		res.OtherErrs = append(res.OtherErrs, err)
	}

	// Watchers: let them catch up to the final revision (at most 30 s),
	// then check each against the stream.
	deadline := time.Now().Add(30 * time.Second)
	for _, w := range watchers {
		for w.LastRevision() < final && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	stopWatch()
	wwg.Wait()
	for _, w := range watchers {
		res.WatchEvents = append(res.WatchEvents, len(slices.Concat(eventsOf(w.Responses())...)))
		res.WatchResumes = append(res.WatchResumes, w.Resumes())
		if w.LastRevision() < final {
			res.OtherErrs = append(res.OtherErrs, fmt.Errorf("watcher on %s reached only revision %d of %d", w.Member, w.LastRevision(), final))
		}
		if err := CheckWatch(w.Responses(), stream, 1); err != nil {
			err = fmt.Errorf("watcher on %s: %w", w.Member, err)
			res.WatchErrs = append(res.WatchErrs, err)
		}
	}

	// Compaction: below the compaction point, a compacted answer.
	if len(stream) > 0 {
		if err := c.CheckCompaction(ctx, final/2+1, stream); err != nil {
			res.OtherErrs = append(res.OtherErrs, err)
		}
	}

	// Linearizability.
	checked := ResolveUnknown(records, h.Keys(), stream)
	res.Checked = len(checked)
	// Every write is in the history, so revisions are checked exactly.
	res.Linearizability = CheckLinearizable(checked, true, initialRev, s.CheckTimeout, s.Dir)
	res.Err = errors.Join(append(append(res.OtherErrs, res.WatchErrs...), res.Linearizability)...)
	return res, nil
}

func eventsOf(rs []WatchResponse) [][]Event {
	out := make([][]Event, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Events)
	}
	return out
}

// runTrafficOn runs traffic over the first n keys of h only.
func runTrafficOn(ctx context.Context, endpoints []string, h *History, cfg TrafficConfig, n int) error {
	sub := &History{start: h.start, keys: h.keys[:n]}
	err := RunTraffic(ctx, endpoints, sub, cfg, 0)
	for _, r := range sub.Records() {
		h.Add(r)
	}
	h.mu.Lock()
	for msg, n := range sub.Errors() {
		if h.errs == nil {
			h.errs = make(map[string]int)
		}
		h.errs[msg] += n
	}
	h.mu.Unlock()
	return err
}

// Summary is a one-paragraph description of a result for logs and reports.
func (r Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "faults %d %v; ", len(r.Faults.Injected), r.Faults.Injected)
	fmt.Fprintf(&b, "ops %d (acked %d, unknown %d; gets %d, puts %d, deletes %d, cas %d of which %d succeeded); ",
		r.Stats.Total, r.Stats.Acked, r.Stats.Unknown, r.Stats.Gets, r.Stats.Puts, r.Stats.Deletes, r.Stats.CASs, r.Stats.CASSucceeded)
	fmt.Fprintf(&b, "checked %d ops; final revision %d; watch events %v, resumes %v", r.Checked, r.FinalRev, r.WatchEvents, r.WatchResumes)
	if len(r.Errors) > 0 {
		fmt.Fprintf(&b, "; request errors %v", r.Errors)
	}
	if len(r.Faults.Unavailability) > 0 {
		p50, p99 := Percentiles(r.Faults.Unavailability)
		fmt.Fprintf(&b, "; unavailability after leader kill p50 %s p99 %s (n=%d)", p50, p99, len(r.Faults.Unavailability))
	}
	return b.String()
}

// Percentiles returns the 50th and 99th percentiles (nearest rank).
func Percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.99)
}

// currentRevision asks the cluster for its revision with a linearizable
// read (at most 30 s of retries).
func (c *Cluster) currentRevision(ctx context.Context) (int64, error) {
	cli, err := NewClient(c.Endpoints())
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cli.Get(rctx, "/r/")
		rcancel()
		if err == nil {
			return resp.Header.Revision, nil
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("read the initial revision: %w", err)
		}
	}
}
