// Package robustness runs a store cluster — kplane store or etcd, anything
// started with etcd's cluster flags and speaking the etcd v3 API — as real
// processes on loopback, injects faults (SIGKILL, SIGSTOP, leadership
// transfer, member remove and re-add, catch-up from a snapshot) while clients
// send traffic, and checks what the clients saw: linearizability with
// porcupine, acknowledged writes present, replicas converged, and the watch
// guarantees.
package robustness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Flavor says how to start one member of a store.
type Flavor struct {
	// Name labels the flavor in logs and reports ("kplane", "etcd-3.4").
	Name string
	// Binary is the executable; Args come before the cluster flags (for
	// example "store" for `kplane store`); ExtraArgs after them.
	Binary    string
	Args      []string
	ExtraArgs []string
	// SnapshotCompacted matches the log line in which a member truncates
	// its Raft log after a snapshot; its first group is the last index
	// removed. SnapshotInstalled matches the line in which a member
	// installed a snapshot sent by the leader. With both set, the
	// snapshot-catchup fault makes sure that the catch-up really came from
	// a snapshot (see snapshotCatchUp).
	SnapshotCompacted *regexp.Regexp
	SnapshotInstalled *regexp.Regexp
}

// Member is one store process.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	DataDir   string
	LogPath   string

	// binary, when set, replaces the flavor's (SetBinary).
	binary string
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited
	paused bool
	conn   *grpc.ClientConn
}

// Endpoint is the member's client address, host:port.
func (m *Member) Endpoint() string { return strings.TrimPrefix(m.ClientURL, "http://") }

// Running reports whether the process is alive (it may be paused).
func (m *Member) Running() bool {
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// Cluster is a set of store processes on loopback. Its methods are not safe
// for concurrent use, except Endpoints, Conn and Close; the fault injector is
// its only user while traffic runs.
type Cluster struct {
	flavor Flavor
	dir    string
	log    *slog.Logger

	mu      sync.Mutex
	members []*Member
}

// NewCluster starts size members of the flavor with data under dir and waits
// until every member answers Status. The caller must Close it.
func NewCluster(ctx context.Context, flavor Flavor, dir string, size int, log *slog.Logger) (*Cluster, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{flavor: flavor, dir: dir, log: log}
	var initial []string
	given := map[int]bool{}
	for i := range size {
		cp, err := freePort(given)
		if err != nil {
			return nil, err
		}
		pp, err := freePort(given)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("m%d", i)
		m := &Member{
			Name:      name,
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", cp),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", pp),
			DataDir:   filepath.Join(dir, name+".data"),
			LogPath:   filepath.Join(dir, name+".log"),
		}
		c.members = append(c.members, m)
		initial = append(initial, name+"="+m.PeerURL)
	}
	for _, m := range c.members {
		if err := c.start(m, strings.Join(initial, ","), "new"); err != nil {
			c.Close()
			return nil, err
		}
	}
	for i := range c.members {
		if err := c.WaitReady(ctx, i); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// freePort picks a free loopback port below Linux's ephemeral range
// (32768–60999). A member keeps its ports across restarts, and a port from
// the ephemeral range could meanwhile be taken by some outgoing connection.
// A port in given is never picked again (the members bind theirs only when
// all are chosen), and the one picked is added to it.
func freePort(given map[int]bool) (int, error) {
	var err error
	for range 100 {
		port := 10000 + rand.IntN(22000)
		if given[port] {
			continue
		}
		var l net.Listener
		if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			l.Close()
			given[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("pick a free port: %w", err)
}

// start launches the member's process with etcd's cluster flags.
func (c *Cluster) start(m *Member, initialCluster, state string) error {
	if err := os.MkdirAll(filepath.Dir(m.DataDir), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", m.DataDir, err)
	}
	logf, err := os.OpenFile(m.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open member log: %w", err)
	}
	args := append([]string(nil), c.flavor.Args...)
	args = append(args,
		"--name="+m.Name,
		"--data-dir="+m.DataDir,
		"--listen-client-urls="+m.ClientURL,
		"--advertise-client-urls="+m.ClientURL,
		"--listen-peer-urls="+m.PeerURL,
		"--initial-advertise-peer-urls="+m.PeerURL,
		"--initial-cluster="+initialCluster,
		"--initial-cluster-state="+state,
	)
	args = append(args, c.flavor.ExtraArgs...)
	bin := c.binaryOf(m)
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Its own process group, so that a Ctrl-C of the test does not reach it
	// before Close does.
	// Pdeathsig: if the harness dies without Close (a fuzz worker is
	// killed at the end of its run), the members die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(logf, "=== %s start %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", m.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	m.cmd, m.done, m.paused = cmd, done, false
	c.log.Info("member started", "member", m.Name, "pid", cmd.Process.Pid, "state", state)
	return nil
}

// SetBinary makes member i run path from its next start on (a rolling
// upgrade); the flavor's arguments stay.
func (c *Cluster) SetBinary(i int, path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members[i].binary = path
}

// binaryOf is the executable m runs.
func (c *Cluster) binaryOf(m *Member) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.binary != "" {
		return m.binary
	}
	return c.flavor.Binary
}

// Members returns the members (the slice is a copy; the members are shared).
func (c *Cluster) Members() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Member(nil), c.members...)
}

// Endpoints returns every member's client address.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members() {
		eps = append(eps, m.Endpoint())
	}
	return eps
}

// Conn returns a gRPC connection to member i alone (created on first use and
// reused; it reconnects by itself after restarts).
func (c *Cluster) Conn(i int) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if m.conn != nil {
		return m.conn, nil
	}
	conn, err := grpc.NewClient(m.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", m.Name, err)
	}
	m.conn = conn
	return conn, nil
}

// Status asks member i for its status with a short deadline.
func (c *Cluster) Status(ctx context.Context, i int) (*pb.StatusResponse, error) {
	conn, err := c.Conn(i)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return pb.NewMaintenanceClient(conn).Status(ctx, &pb.StatusRequest{})
}

// WaitReady waits (at most 60 s) until member i answers Status.
func (c *Cluster) WaitReady(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	m := c.Members()[i]
	for {
		if !m.Running() {
			return fmt.Errorf("member %s exited while starting; log %s:\n%s", m.Name, m.LogPath, tail(m.LogPath, 30))
		}
		if _, err := c.Status(ctx, i); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("member %s not ready: %w; log:\n%s", m.Name, ctx.Err(), tail(m.LogPath, 30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Leader returns the index of the member that the running members agree is
// the leader, waiting for one (at most 30 s).
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		for i, m := range c.Members() {
			if !m.Running() || m.paused {
				continue
			}
			st, err := c.Status(ctx, i)
			if err != nil || st.Leader == 0 || st.Header == nil {
				continue
			}
			if st.Leader == st.Header.MemberId {
				return i, nil
			}
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no leader: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// MemberID returns member i's Raft member ID from its Status.
func (c *Cluster) MemberID(ctx context.Context, i int) (uint64, error) {
	st, err := c.Status(ctx, i)
	if err != nil {
		return 0, err
	}
	return st.GetHeader().GetMemberId(), nil
}

// Kill sends SIGKILL to member i and waits for it to exit.
func (c *Cluster) Kill(i int) error {
	m := c.Members()[i]
	if !m.Running() {
		return nil
	}
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", m.Name, err)
	}
	<-m.done
	m.paused = false
	c.log.Info("member killed", "member", m.Name)
	return nil
}

// Pause sends SIGSTOP to member i.
func (c *Cluster) Pause(i int) error {
	m := c.Members()[i]
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop %s: %w", m.Name, err)
	}
	m.paused = true
	c.log.Info("member paused", "member", m.Name)
	return nil
}

// Resume sends SIGCONT to member i.
func (c *Cluster) Resume(i int) error {
	m := c.Members()[i]
	if err := m.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("continue %s: %w", m.Name, err)
	}
	m.paused = false
	c.log.Info("member resumed", "member", m.Name)
	return nil
}

// Restart starts a killed member i again on its existing data and waits until
// it answers.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	m := c.Members()[i]
	if m.Running() {
		return fmt.Errorf("restart %s: still running", m.Name)
	}
	if err := c.start(m, c.initialCluster(), "existing"); err != nil {
		return err
	}
	return c.WaitReady(ctx, i)
}

func (c *Cluster) initialCluster() string {
	var parts []string
	for _, m := range c.Members() {
		parts = append(parts, m.Name+"="+m.PeerURL)
	}
	return strings.Join(parts, ",")
}

// MoveLeader transfers leadership from the current leader to member to.
func (c *Cluster) MoveLeader(ctx context.Context, leader, to int) error {
	target, err := c.MemberID(ctx, to)
	if err != nil {
		return fmt.Errorf("move leader: target id: %w", err)
	}
	conn, err := c.Conn(leader)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := pb.NewMaintenanceClient(conn).MoveLeader(ctx, &pb.MoveLeaderRequest{TargetID: target}); err != nil {
		return fmt.Errorf("move leader to %s: %w", c.Members()[to].Name, err)
	}
	c.log.Info("leadership moved", "from", c.Members()[leader].Name, "to", c.Members()[to].Name)
	return nil
}

// RemoveAndReAdd removes member i from the cluster through member via,
// stops it, wipes its data, adds it back as a new member and starts it with
// --initial-cluster-state=existing, so it must catch up from the others.
func (c *Cluster) RemoveAndReAdd(ctx context.Context, i, via int) error {
	m := c.Members()[i]
	id, err := c.MemberID(ctx, i)
	if err != nil {
		return fmt.Errorf("remove %s: id: %w", m.Name, err)
	}
	conn, err := c.Conn(via)
	if err != nil {
		return err
	}
	cl := pb.NewClusterClient(conn)
	// etcd refuses a removal until every peer has been connected for a
	// while (it would break the active quorum); retry for up to 30 s.
	var removeErr error
	for range 60 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, removeErr = cl.MemberRemove(rctx, &pb.MemberRemoveRequest{ID: id})
		cancel()
		if removeErr == nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if removeErr != nil {
		return fmt.Errorf("remove %s: %w", m.Name, removeErr)
	}
	c.log.Info("member removed", "member", m.Name)
	if err := c.Kill(i); err != nil {
		return err
	}
	if err := os.RemoveAll(m.DataDir); err != nil {
		return fmt.Errorf("wipe %s: %w", m.DataDir, err)
	}
	// A just-removed member's configuration change must commit before the
	// add; retry the add briefly (etcd refuses it while unhealthy).
	var addErr error
	for range 50 {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		_, addErr = cl.MemberAdd(actx, &pb.MemberAddRequest{PeerURLs: []string{m.PeerURL}})
		acancel()
		if addErr == nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if addErr != nil {
		return fmt.Errorf("re-add %s: %w", m.Name, addErr)
	}
	c.log.Info("member re-added", "member", m.Name)
	if err := c.start(m, c.initialCluster(), "existing"); err != nil {
		return err
	}
	return c.WaitReady(ctx, i)
}

// Close kills every member and closes the connections. Member data and logs
// stay in the cluster's directory.
func (c *Cluster) Close() {
	for i, m := range c.Members() {
		if m.Running() {
			if m.paused {
				_ = m.cmd.Process.Signal(syscall.SIGCONT)
			}
			_ = c.Kill(i)
		}
		c.mu.Lock()
		if m.conn != nil {
			_ = m.conn.Close()
			m.conn = nil
		}
		c.mu.Unlock()
	}
}

// Logs returns the last lines of every member's log, for failure reports.
func (c *Cluster) Logs(lines int) string {
	var b strings.Builder
	for _, m := range c.Members() {
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", m.Name, m.LogPath, tail(m.LogPath, lines))
	}
	return b.String()
}

func tail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
