// This file holds the chaos test: a `kplane up` cluster under a Deployment
// workload while store leaders and the active scheduler and controller
// manager are killed or stalled, then checked for lost writes, broken
// watches and unfinished rollouts.

package chaos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kplane/kplane/internal/localcluster"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/raftstore/robustness"
	"github.com/kplane/kplane/services/client"
)

// A kill is one fault: SIGKILL of the store's Raft leader, or of the
// replica holding the scheduler's or the controller manager's Lease; or a
// stall of the latter (SIGSTOP until the standby has taken the Lease over,
// then SIGCONT: it finds it missed its renew deadline and exits).
type kill string

const (
	killStoreLeader  kill = "store-leader"
	killScheduler    kill = "scheduler"
	killControllers  kill = "controllers"
	stallScheduler   kill = "scheduler-stall"
	stallControllers kill = "controllers-stall"
)

// component is the kplane up component a kill's victim is.
func (k kill) component() string { return strings.TrimSuffix(string(k), "-stall") }

// stall says the victim is stopped, not killed.
func (k kill) stall() bool { return strings.HasSuffix(string(k), "-stall") }

// plan is the sequence of kills: mostly store leaders, with the active
// scheduler and controller manager in between, killed or stalled in turn.
func plan(n int) []kill {
	cycle := []kill{killStoreLeader, killScheduler, killStoreLeader, stallControllers, killStoreLeader,
		killStoreLeader, stallScheduler, killStoreLeader, killControllers, killStoreLeader}
	out := make([]kill, n)
	for i := range out {
		out[i] = cycle[i%len(cycle)]
	}
	return out
}

// outcome is what one kill did.
type outcome struct {
	Kind   kill   `json:"kind"`
	Victim string `json:"victim"`
	// Unavailable is the time from the SIGKILL to the first write the API
	// service acknowledged after it (writes attempted back to back, each
	// bounded by 1 s).
	Unavailable time.Duration `json:"unavailableNs"`
	// Takeover, for the scheduler and controllers, is the time until a
	// live replica renewed the Lease: the standby, or the victim restarted
	// by kplane up's supervisor (same identity: it renews its own Lease at
	// once, as only one incarnation of a replica ever runs).
	Takeover time.Duration `json:"takeoverNs,omitempty"`
	// NewHolder is the replica holding the Lease after the takeover.
	NewHolder string `json:"newHolder,omitempty"`
	// Back is the time from the kill until kplane up's supervisor started
	// the victim again.
	Back time.Duration `json:"backNs"`
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func buildKplane(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(t.TempDir(), "kplane")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/kplane")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build kplane: %v\n%s", err, out)
	}
	return bin
}

// adminConn connects to one API service replica as the admin kplane up
// wrote credentials for.
func adminConn(t *testing.T, dataDir, addr string) *grpc.ClientConn {
	t.Helper()
	pki := filepath.Join(dataDir, "pki")
	pair, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestChaosLeaderKills is the control plane's chaos test; see the package
// comment. KPLANE_CHAOS_KILLS sets the number of kills (default 5: three
// store leaders, the active scheduler and the active controller manager),
// KPLANE_CHAOS_DIR keeps the cluster's data, logs and outcomes.json.
func TestChaosLeaderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole kplane up cluster")
	}
	kills := plan(envInt(t, "KPLANE_CHAOS_KILLS", 5))
	dir := os.Getenv("KPLANE_CHAOS_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))

	cp, err := localcluster.Up(ctx, localcluster.UpConfig{Binary: buildKplane(t), DataDir: dir, BasePort: 0, Logger: log})
	if err != nil {
		t.Fatalf("kplane up: %v", err)
	}
	defer cp.Stop()
	var apis []*localcluster.Process
	for _, p := range cp.Procs {
		if p.Component == "apiserver" {
			apis = append(apis, p)
		}
	}
	// The workload and the probe use one API service replica, the watcher
	// the other: both see every store failover.
	conn := adminConn(t, dir, apis[0].Addr)
	watchConn := adminConn(t, dir, apis[len(apis)-1].Addr)
	storeCli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(cp.Store.Endpoints(), ","),
		TLS: cp.Store.ClientTLS(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer storeCli.Close()

	const ns = "chaos"
	nss := client.Must[*corev1.Namespace](conn)
	if _, err := nss.Create(ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	deploys := client.Must[*appsv1.Deployment](conn)
	_, rv, err := client.Must[*appsv1.Deployment](watchConn).List(ctx, ns, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	startRV, _ := strconv.ParseInt(rv, 10, 64)
	watcher := &deploymentWatcher{deploys: client.Must[*appsv1.Deployment](watchConn), ns: ns}
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() { defer close(wdone); watcher.run(wctx, startRV) }()
	defer func() { wcancel(); <-wdone }()

	w := newWorkload(deploys, ns)
	stop := make(chan struct{})
	const workers = 2
	werrs := make(chan error, workers)
	for i := range workers {
		go func() { werrs <- w.run(ctx, i, 6, stop) }()
	}
	stopped := false
	stopWorkload := func() {
		if stopped {
			return
		}
		stopped = true
		close(stop)
		for range workers {
			if err := <-werrs; err != nil {
				t.Errorf("workload: %v", err)
			}
		}
	}
	defer stopWorkload()

	// The kills, every few seconds while the workload runs.
	probe := &prober{cms: client.Must[*corev1.ConfigMap](conn), ns: ns}
	var outcomes []outcome
	for i, k := range kills {
		select {
		case <-time.After(3 * time.Second):
		case err := <-werrs:
			t.Fatalf("workload stopped during the kills: %v", err)
		}
		if err := allRunning(ctx, cp); err != nil {
			t.Fatalf("before kill %d: %v", i+1, err)
		}
		o, err := inject(ctx, cp, storeCli, conn, probe, k)
		if err != nil {
			t.Fatalf("kill %d (%s): %v", i+1, k, err)
		}
		t.Logf("kill %d: %s %s: writes unavailable %v, restarted after %v, takeover %v %s", i+1, o.Kind, o.Victim,
			o.Unavailable.Round(time.Millisecond), o.Back.Round(time.Millisecond), o.Takeover.Round(time.Millisecond), o.NewHolder)
		outcomes = append(outcomes, o)
	}
	time.Sleep(2 * time.Second)
	stopWorkload()
	if err := allRunning(ctx, cp); err != nil {
		t.Error(err)
	}
	// kplane up's supervisor restarted each victim; any other restart is
	// a process that exited by itself (e.g. lost its Lease) and came back.
	restarts := 0
	for _, m := range cp.Store.Members {
		restarts += m.Restarts()
	}
	for _, p := range cp.Procs {
		restarts += p.Restarts()
		if p.Restarts() > 0 {
			t.Logf("%s: restarted %d times", p.Name, p.Restarts())
		}
	}
	// Every victim but a stalled controller manager (which stays up as a
	// standby) was restarted once.
	victims := 0
	for _, k := range kills {
		if k != stallControllers {
			victims++
		}
	}
	t.Logf("the supervisor restarted %d processes: the %d victims and %d that exited by themselves", restarts, victims, restarts-victims)
	live, deleted, ops, retries := w.snapshot()
	t.Logf("workload: %v acknowledged, %d attempts retried; %d Deployments live, %d deleted", ops, retries, len(live), len(deleted))

	// Nothing acknowledged is lost: exactly the live Deployments exist,
	// each with the replicas of its last acknowledged write.
	list, _, err := deploys.List(ctx, ns, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, d := range list {
		name := d.GetMetadata().GetName()
		seen[name] = true
		want, ok := live[name]
		switch {
		case deleted[name]:
			t.Errorf("deployment %s exists, but its delete was acknowledged", name)
		case !ok:
			t.Errorf("deployment %s exists, but no create was acknowledged", name)
		case d.GetSpec().GetReplicas() != want:
			t.Errorf("deployment %s has %d replicas, the last acknowledged write set %d", name, d.GetSpec().GetReplicas(), want)
		}
	}
	for name := range live {
		if !seen[name] {
			t.Errorf("deployment %s was acknowledged and never deleted, but is gone", name)
		}
	}

	// Every Deployment converges to its replicas Running, and the pods of
	// deleted ones are collected.
	if err := converge(ctx, client.Must[*corev1.Pod](conn), ns, live, 3*time.Minute); err != nil {
		t.Error(err)
	}

	// The resumed watch streams saw exactly the store's events.
	storeRev, err := storeCli.Get(ctx, "/registry/deployments/"+ns+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	var responses []robustness.WatchResponse
	var last int64
	var resumes int
	for deadline := time.Now().Add(30 * time.Second); ; {
		var fatal error
		responses, last, resumes, fatal = watcher.result()
		if fatal != nil {
			t.Fatal(fatal)
		}
		latest, err := latestRevision(ctx, storeCli, ns, startRV+1, storeRev.Header.Revision)
		if err != nil {
			t.Fatal(err)
		}
		if last >= latest || time.Now().After(deadline) {
			if last < latest {
				t.Errorf("the watcher stopped at revision %d; the store's last Deployment event is at %d", last, latest)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	stream, err := storeStream(ctx, storeCli, ns, startRV+1, last)
	if err != nil {
		t.Fatal(err)
	}
	if err := robustness.CheckWatch(responses, stream, startRV+1); err != nil {
		t.Errorf("watch: %v", err)
	}
	t.Logf("watch: %d events through revision %d over %d streams, checked against the store", len(stream), last, resumes+1)

	report(t, outcomes)
	if d := os.Getenv("KPLANE_CHAOS_DIR"); d != "" {
		b, _ := json.MarshalIndent(outcomes, "", "  ")
		if err := os.WriteFile(filepath.Join(d, "outcomes.json"), b, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// latestRevision is the revision of the last store event on the
// namespace's Deployments up to rev (start-1 if none).
func latestRevision(ctx context.Context, cli *clientv3.Client, ns string, start, rev int64) (int64, error) {
	evs, err := storeStream(ctx, cli, ns, start, rev)
	if err != nil && len(evs) == 0 {
		// No event at or after start up to rev: the stream waits for one.
		return start - 1, nil
	}
	last := start - 1
	for _, e := range evs {
		if e.Revision <= rev {
			last = e.Revision
		}
	}
	return last, nil
}

// report logs per kill kind the write unavailability and the Lease
// takeovers (count, p50, p99, max), and how soon the supervisor restarted
// the killed victims.
func report(t *testing.T, outcomes []outcome) {
	t.Helper()
	unavailable := map[kill][]time.Duration{}
	takeovers := map[kill][]time.Duration{}
	byVictim := map[kill]int{}
	var backs []time.Duration
	for _, o := range outcomes {
		unavailable[o.Kind] = append(unavailable[o.Kind], o.Unavailable)
		if !o.Kind.stall() {
			backs = append(backs, o.Back)
		}
		if o.Kind != killStoreLeader {
			takeovers[o.Kind] = append(takeovers[o.Kind], o.Takeover)
			if o.NewHolder == o.Victim {
				byVictim[o.Kind]++
			}
		}
	}
	for _, k := range []kill{killStoreLeader, killScheduler, killControllers, stallScheduler, stallControllers} {
		if ds := unavailable[k]; len(ds) > 0 {
			p50, p99, mx := percentiles(ds)
			t.Logf("write unavailability after %s kills (n=%d): p50 %v, p99 %v, max %v", k, len(ds), p50, p99, mx)
		}
	}
	for _, k := range []kill{killScheduler, killControllers, stallScheduler, stallControllers} {
		if ds := takeovers[k]; len(ds) > 0 {
			p50, p99, mx := percentiles(ds)
			t.Logf("lease takeover after %s kills (n=%d, %d by the restarted victim): p50 %v, p99 %v, max %v", k, len(ds), byVictim[k], p50, p99, mx)
		}
	}
	if len(backs) > 0 {
		p50, p99, mx := percentiles(backs)
		t.Logf("SIGKILLed victim restarted by kplane up's supervisor (n=%d): p50 %v, p99 %v, max %v", len(backs), p50, p99, mx)
	}
}

// percentiles returns the nearest-rank p50 and p99 and the maximum.
func percentiles(ds []time.Duration) (p50, p99, mx time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))].Round(time.Millisecond)
	}
	return rank(0.50), rank(0.99), s[len(s)-1].Round(time.Millisecond)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// prober measures write availability: it creates ConfigMaps back to back.
type prober struct {
	cms *client.Client[*corev1.ConfigMap]
	ns  string
	n   int
}

// untilWrite writes until one write is acknowledged and returns the time
// from since to that acknowledgement.
func (p *prober) untilWrite(ctx context.Context, since time.Time) (time.Duration, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		p.n++
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := p.cms.Create(actx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: fmt.Sprintf("probe-%d", p.n), Namespace: p.ns}})
		cancel()
		if err == nil {
			return time.Since(since), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no write acknowledged for a minute: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inject performs one kill, measures it, and restarts the victim.
func inject(ctx context.Context, cp *localcluster.ControlPlane, storeCli *clientv3.Client, conn *grpc.ClientConn, probe *prober, k kill) (outcome, error) {
	o := outcome{Kind: k}
	switch k {
	case killStoreLeader:
		m, err := storeLeader(ctx, cp, storeCli)
		if err != nil {
			return o, err
		}
		o.Victim = m.Name
		restarts := m.Restarts()
		at := time.Now()
		m.Kill()
		if o.Unavailable, err = probe.untilWrite(ctx, at); err != nil {
			return o, err
		}
		// kplane up's supervisor restarts it; the next kill waits until
		// the member is back and a leader is known.
		if o.Back, err = restarted(ctx, m.Name, m, at, restarts); err != nil {
			return o, err
		}
		return o, waitFor(ctx, 30*time.Second, func(ctx context.Context) error {
			_, err := storeCli.Status(ctx, memberEndpoint(m))
			if err != nil {
				return err
			}
			_, err = storeLeader(ctx, cp, storeCli)
			return err
		})
	default:
		lease := "kube-scheduler"
		if k.component() == "controllers" {
			lease = "kube-controller-manager"
		}
		leases := client.Must[*coordv1.Lease](conn)
		get := func(ctx context.Context) (*coordv1.Lease, error) { return leases.Get(ctx, "kube-system", lease) }
		var active string
		if err := waitFor(ctx, 60*time.Second, func(ctx context.Context) (err error) {
			l, err := get(ctx)
			active = l.GetSpec().GetHolderIdentity()
			if err == nil && active == "" {
				err = fmt.Errorf("lease %s has no holder", lease)
			}
			return err
		}); err != nil {
			return o, err
		}
		var victim *localcluster.Process
		for _, p := range cp.Procs {
			if p.Component == k.component() && p.Identity == active {
				victim = p
			}
		}
		if victim == nil {
			return o, fmt.Errorf("lease %s is held by %q, which is none of kplane up's processes", lease, active)
		}
		o.Victim = victim.Name
		restarts := victim.Restarts()
		at := time.Now()
		if k.stall() {
			if err := victim.Pause(); err != nil {
				return o, fmt.Errorf("%s: %w", victim.Name, err)
			}
			// Resumed once the standby leads (or on failure): it must then
			// stop leading and exit, and be restarted.
			defer func() { _ = victim.Resume() }()
		} else {
			victim.Kill()
		}
		var err error
		if o.Unavailable, err = probe.untilWrite(ctx, at); err != nil {
			return o, err
		}
		// A live replica leads again once it renews the Lease after the
		// kill (the victim's renewals all started before it); after a
		// stall, that is the standby, once the Lease has expired.
		if err := waitFor(ctx, 2*time.Minute, func(ctx context.Context) error {
			l, err := get(ctx)
			if err != nil {
				return err
			}
			h, renewed := l.GetSpec().GetHolderIdentity(), l.GetSpec().GetRenewTime().AsTime()
			if h == "" || !renewed.After(at) {
				return fmt.Errorf("lease %s held by %q, last renewed %v, before the kill", lease, h, renewed)
			}
			o.NewHolder = h
			return nil
		}); err != nil {
			return o, err
		}
		o.Takeover = time.Since(at)
		if !k.stall() {
			o.Back, err = restarted(ctx, victim.Name, victim, at, restarts)
			return o, err
		}
		if o.NewHolder == victim.Identity {
			return o, fmt.Errorf("lease %s renewed by the stalled %s", lease, victim.Name)
		}
		lost := strings.Count(readFile(victim.LogPath), leaseLost)
		if err := victim.Resume(); err != nil {
			return o, fmt.Errorf("%s: %w", victim.Name, err)
		}
		// Resumed, it finds it missed its renew deadline and stops
		// leading. The scheduler then exits with an error (as
		// kube-scheduler does) and must be restarted; the controller
		// manager campaigns again in the same process, as a standby.
		if k.component() == "scheduler" {
			o.Back, err = restarted(ctx, victim.Name, victim, at, restarts)
			return o, err
		}
		pid := victim.PID()
		return o, waitFor(ctx, time.Minute, func(context.Context) error {
			if strings.Count(readFile(victim.LogPath), leaseLost) == lost {
				return fmt.Errorf("%s has not logged that it stopped leading", victim.Name)
			}
			if victim.PID() != pid || !victim.Running() {
				return fmt.Errorf("%s exited after losing its Lease (it campaigns again)", victim.Name)
			}
			return nil
		})
	}
}

// leaseLost is what a leader-elected component logs when it has not
// renewed its Lease within the renew deadline (client.LeaderElector).
const leaseLost = "failed to renew the lease within the renew deadline"

// readFile returns a file's content ("" if unreadable).
func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// supervised is a store member or another process of kplane up.
type supervised interface {
	Restarts() int
	Running() bool
	Started() time.Time
}

// restarted waits until kplane up's supervisor has restarted a victim
// (its restart count past before and a new incarnation running) and
// returns the time from the kill at to that start.
func restarted(ctx context.Context, name string, p supervised, at time.Time, before int) (time.Duration, error) {
	err := waitFor(ctx, time.Minute, func(context.Context) error {
		if p.Restarts() <= before || !p.Running() {
			return fmt.Errorf("kplane up's supervisor has not restarted %s", name)
		}
		return nil
	})
	return p.Started().Sub(at), err
}

// allRunning waits (up to a minute: the supervisor's backoff) until every
// process of the cluster runs.
func allRunning(ctx context.Context, cp *localcluster.ControlPlane) error {
	return waitFor(ctx, time.Minute, func(context.Context) error { return cp.Down() })
}

// storeLeader returns the member that says it is the Raft leader.
func storeLeader(ctx context.Context, cp *localcluster.ControlPlane, cli *clientv3.Client) (*localcluster.Member, error) {
	for _, m := range cp.Store.Members {
		if !m.Running() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, memberEndpoint(m))
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no store member is the leader")
}

// waitFor calls f until it succeeds (each call bounded by 2 s) or timeout.
func waitFor(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// converge waits until every live Deployment has exactly its replicas of
// pods, all Running, and no other pods are left in the namespace.
func converge(ctx context.Context, pods *client.Client[*corev1.Pod], ns string, live map[string]int32, timeout time.Duration) error {
	return waitFor(ctx, timeout, func(ctx context.Context) error {
		list, _, err := pods.List(ctx, ns, client.ListOptions{})
		if err != nil {
			return err
		}
		running := map[string]int32{}
		for _, p := range list {
			app := p.GetMetadata().GetLabels()["app"]
			if _, ok := live[app]; !ok {
				return fmt.Errorf("pod %s of deleted deployment %q is still there", p.GetMetadata().GetName(), app)
			}
			if p.GetStatus().GetPhase() != "Running" || p.GetMetadata().GetDeletionTimestamp() != nil {
				return fmt.Errorf("pod %s is %s", p.GetMetadata().GetName(), p.GetStatus().GetPhase())
			}
			running[app]++
		}
		for name, want := range live {
			if running[name] != want {
				return fmt.Errorf("deployment %s: %d pods Running, want %d", name, running[name], want)
			}
		}
		return nil
	})
}

// memberEndpoint is a member's client address as clientv3 takes it.
func memberEndpoint(m *localcluster.Member) string {
	return strings.TrimPrefix(strings.TrimPrefix(m.ClientURL, "https://"), "http://")
}
