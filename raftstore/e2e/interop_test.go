// The interop scenario: the same steps driven through etcd's Go client and
// through the real etcdctl (etcd 3.4's, from Debian's etcd-client), against
// a 3-member kplane store running as separate processes.

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
)

type kv struct{ Key, Value string }

type event struct {
	Type             string // PUT or DELETE
	Key, Value, Prev string
}

type memberStatus struct {
	ID, Leader uint64
	Version    string
	RaftIndex  uint64
}

// driver is one way of talking to the store.
type driver interface {
	Put(ctx context.Context, key, value string, lease int64) (rev int64, err error)
	Get(ctx context.Context, key string, prefix bool, rev int64) ([]kv, error)
	Delete(ctx context.Context, key string, prefix bool) (deleted int64, err error)
	// CAS puts newValue if key's value is expect; otherwise it reads key.
	CAS(ctx context.Context, key, expect, newValue string) (succeeded bool, err error)
	// Watch returns the first n events from rev on under prefix, with
	// previous values.
	Watch(ctx context.Context, prefix string, rev int64, n int) ([]event, error)
	Grant(ctx context.Context, ttl int64) (id int64, err error)
	KeepAliveOnce(ctx context.Context, id int64) (ttl int64, err error)
	MemberNames(ctx context.Context) ([]string, error)
	Status(ctx context.Context) ([]memberStatus, error)
	Compact(ctx context.Context, rev int64) error
}

func TestInteropClientV3(t *testing.T) {
	testutil.SkipShort(t, "runs a store of `kplane store` processes of the built binary")
	c := startCluster(t)
	runScenario(t, c, &clientDriver{cli: newClient(t, c)})
}

func TestInteropEtcdctl(t *testing.T) {
	testutil.SkipShort(t, "runs a store of `kplane store` processes of the built binary")
	bin := testutil.RequireBinary(t, "etcdctl", "apt-get install -y etcd-client")
	c := startCluster(t)
	runScenario(t, c, &etcdctlDriver{bin: bin, endpoints: c.Endpoints()})
}

func runScenario(t *testing.T, c *localcluster.Cluster, d driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// put/get/del with --prefix
	first, err := d.Put(ctx, "/app/a", "1", 0)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	for _, k := range []string{"/app/b", "/app/c", "/other"} {
		if _, err := d.Put(ctx, k, "x", 0); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	got, err := d.Get(ctx, "/app/", true, 0)
	if err != nil {
		t.Fatalf("get --prefix: %v", err)
	}
	if want := []kv{{"/app/a", "1"}, {"/app/b", "x"}, {"/app/c", "x"}}; !slices.Equal(got, want) {
		t.Fatalf("get --prefix: got %v, want %v", got, want)
	}
	n, err := d.Delete(ctx, "/app/", true)
	if err != nil || n != 3 {
		t.Fatalf("del --prefix: got %d (%v), want 3", n, err)
	}
	if got, err := d.Get(ctx, "/app/", true, 0); err != nil || len(got) != 0 {
		t.Fatalf("get after del: got %v (%v), want nothing", got, err)
	}
	if got, err := d.Get(ctx, "/app/a", false, first); err != nil || !slices.Equal(got, []kv{{"/app/a", "1"}}) {
		t.Fatalf("get at revision %d: got %v (%v), want [/app/a 1]", first, got, err)
	}

	// txn with compares
	if _, err := d.Put(ctx, "/cas", "v1", 0); err != nil {
		t.Fatal(err)
	}
	if ok, err := d.CAS(ctx, "/cas", "v1", "v2"); err != nil || !ok {
		t.Fatalf("txn (value = v1): got %v (%v), want success", ok, err)
	}
	if ok, err := d.CAS(ctx, "/cas", "v1", "v3"); err != nil || ok {
		t.Fatalf("txn (value = v1, now v2): got %v (%v), want failure", ok, err)
	}
	if got, _ := d.Get(ctx, "/cas", false, 0); !slices.Equal(got, []kv{{"/cas", "v2"}}) {
		t.Fatalf("after txns: got %v, want [/cas v2]", got)
	}

	// watch with --prev-kv, replaying from a revision
	wrev, err := d.Put(ctx, "/w/k", "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(ctx, "/w/k", "b", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Delete(ctx, "/w/k", false); err != nil {
		t.Fatal(err)
	}
	evs, err := d.Watch(ctx, "/w/", wrev, 3)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	wantEvs := []event{{"PUT", "/w/k", "a", ""}, {"PUT", "/w/k", "b", "a"}, {"DELETE", "/w/k", "", "b"}}
	if !slices.Equal(evs, wantEvs) {
		t.Fatalf("watch --prev-kv: got %v, want %v", evs, wantEvs)
	}

	// lease grant / keep-alive / expiry
	id, err := d.Grant(ctx, 2)
	if err != nil {
		t.Fatalf("lease grant: %v", err)
	}
	if _, err := d.Put(ctx, "/leased", "v", id); err != nil {
		t.Fatalf("put --lease: %v", err)
	}
	if ttl, err := d.KeepAliveOnce(ctx, id); err != nil || ttl != 2 {
		t.Fatalf("lease keep-alive: got TTL %d (%v), want 2", ttl, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := d.Get(ctx, "/leased", false, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("leased key still present 20s after the last keep-alive")
		}
		time.Sleep(200 * time.Millisecond)
	}

	// member list, endpoint status
	names, err := d.MemberNames(ctx)
	if err != nil {
		t.Fatalf("member list: %v", err)
	}
	slices.Sort(names)
	if want := []string{"store0", "store1", "store2"}; !slices.Equal(names, want) {
		t.Fatalf("member list: got %v, want %v", names, want)
	}
	sts, err := d.Status(ctx)
	if err != nil {
		t.Fatalf("endpoint status: %v", err)
	}
	if len(sts) != 3 {
		t.Fatalf("endpoint status: got %d members, want 3", len(sts))
	}
	leaders := 0
	for _, st := range sts {
		if st.Version == "" || st.RaftIndex == 0 || st.Leader == 0 {
			t.Errorf("endpoint status: incomplete %+v", st)
		}
		if st.ID == st.Leader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("endpoint status: %d members say they lead, want 1", leaders)
	}

	// compaction
	last, err := d.Put(ctx, "/compact", "v", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Compact(ctx, last); err != nil {
		t.Fatalf("compaction: %v", err)
	}
	if _, err := d.Get(ctx, "/app/a", false, first); err == nil || !strings.Contains(err.Error(), "compacted") {
		t.Fatalf("get below the compaction: got %v, want a compacted error", err)
	}
}

// clientDriver drives etcd's Go client.
type clientDriver struct{ cli *clientv3.Client }

func (d *clientDriver) Put(ctx context.Context, key, value string, lease int64) (int64, error) {
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(clientv3.LeaseID(lease)))
	}
	resp, err := d.cli.Put(ctx, key, value, opts...)
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func (d *clientDriver) Get(ctx context.Context, key string, prefix bool, rev int64) ([]kv, error) {
	var opts []clientv3.OpOption
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := d.cli.Get(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	var out []kv
	for _, x := range resp.Kvs {
		out = append(out, kv{string(x.Key), string(x.Value)})
	}
	return out, nil
}

func (d *clientDriver) Delete(ctx context.Context, key string, prefix bool) (int64, error) {
	var opts []clientv3.OpOption
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := d.cli.Delete(ctx, key, opts...)
	if err != nil {
		return 0, err
	}
	return resp.Deleted, nil
}

func (d *clientDriver) CAS(ctx context.Context, key, expect, newValue string) (bool, error) {
	resp, err := d.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", expect)).
		Then(clientv3.OpPut(key, newValue)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

func (d *clientDriver) Watch(ctx context.Context, prefix string, rev int64, n int) ([]event, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []event
	for resp := range d.cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(rev)) {
		if err := resp.Err(); err != nil {
			return out, err
		}
		for _, e := range resp.Events {
			ev := event{Type: e.Type.String(), Key: string(e.Kv.Key), Value: string(e.Kv.Value)}
			if e.PrevKv != nil {
				ev.Prev = string(e.PrevKv.Value)
			}
			out = append(out, ev)
		}
		if len(out) >= n {
			return out, nil
		}
	}
	return out, errors.New("watch ended early")
}

func (d *clientDriver) Grant(ctx context.Context, ttl int64) (int64, error) {
	resp, err := d.cli.Grant(ctx, ttl)
	if err != nil {
		return 0, err
	}
	return int64(resp.ID), nil
}

func (d *clientDriver) KeepAliveOnce(ctx context.Context, id int64) (int64, error) {
	resp, err := d.cli.KeepAliveOnce(ctx, clientv3.LeaseID(id))
	if err != nil {
		return 0, err
	}
	return resp.TTL, nil
}

func (d *clientDriver) MemberNames(ctx context.Context) ([]string, error) {
	resp, err := d.cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range resp.Members {
		out = append(out, m.Name)
	}
	return out, nil
}

func (d *clientDriver) Status(ctx context.Context) ([]memberStatus, error) {
	var out []memberStatus
	for _, ep := range d.cli.Endpoints() {
		st, err := d.cli.Status(ctx, ep)
		if err != nil {
			return nil, err
		}
		out = append(out, memberStatus{ID: st.Header.MemberId, Leader: st.Leader, Version: st.Version, RaftIndex: st.RaftIndex})
	}
	return out, nil
}

func (d *clientDriver) Compact(ctx context.Context, rev int64) error {
	_, err := d.cli.Compact(ctx, rev)
	return err
}

// etcdctlDriver runs the etcdctl binary, mostly with -w json.
type etcdctlDriver struct{ bin, endpoints string }

func (d *etcdctlDriver) run(ctx context.Context, stdin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, d.bin, append([]string{"--endpoints=" + d.endpoints, "--command-timeout=10s"}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("etcdctl %s: %w: %s", strings.Join(args, " "), err, lastLine(stderr.String()))
	}
	return stdout.Bytes(), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

type jsonHeader struct {
	Revision int64  `json:"revision"`
	MemberID uint64 `json:"member_id"`
}

type jsonKV struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

func (d *etcdctlDriver) Put(ctx context.Context, key, value string, lease int64) (int64, error) {
	args := []string{"put", "-w", "json", key, value}
	if lease != 0 {
		args = append(args, "--lease="+strconv.FormatInt(lease, 16))
	}
	out, err := d.run(ctx, "", args...)
	if err != nil {
		return 0, err
	}
	var resp struct{ Header jsonHeader }
	if err := json.Unmarshal(out, &resp); err != nil {
		return 0, fmt.Errorf("decode %q: %w", out, err)
	}
	return resp.Header.Revision, nil
}

func (d *etcdctlDriver) Get(ctx context.Context, key string, prefix bool, rev int64) ([]kv, error) {
	args := []string{"get", "-w", "json", key}
	if prefix {
		args = append(args, "--prefix")
	}
	if rev != 0 {
		args = append(args, "--rev="+strconv.FormatInt(rev, 10))
	}
	out, err := d.run(ctx, "", args...)
	if err != nil {
		return nil, err
	}
	var resp struct{ Kvs []jsonKV }
	if err := json.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("decode %q: %w", out, err)
	}
	var res []kv
	for _, x := range resp.Kvs {
		res = append(res, kv{string(x.Key), string(x.Value)})
	}
	return res, nil
}

func (d *etcdctlDriver) Delete(ctx context.Context, key string, prefix bool) (int64, error) {
	args := []string{"del", key}
	if prefix {
		args = append(args, "--prefix")
	}
	out, err := d.run(ctx, "", args...)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
}

func (d *etcdctlDriver) CAS(ctx context.Context, key, expect, newValue string) (bool, error) {
	// etcdctl's interactive txn: compares, blank line, success ops, blank
	// line, failure ops, blank line.
	stdin := fmt.Sprintf("value(%q) = %q\n\nput %s %s\n\nget %s\n\n", key, expect, key, newValue, key)
	out, err := d.run(ctx, stdin, "txn", "-w", "json")
	if err != nil {
		return false, err
	}
	var resp struct{ Succeeded bool }
	if err := json.Unmarshal(out, &resp); err != nil {
		return false, fmt.Errorf("decode %q: %w", out, err)
	}
	return resp.Succeeded, nil
}

func (d *etcdctlDriver) Watch(ctx context.Context, prefix string, rev int64, n int) ([]event, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin, "--endpoints="+d.endpoints, "watch", "-w", "json", "--prefix", "--prev-kv",
		"--rev="+strconv.FormatInt(rev, 10), prefix)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	dec := json.NewDecoder(stdout)
	var out []event
	for len(out) < n {
		var resp struct {
			Events []struct {
				Type   mvccpb.Event_EventType `json:"type"`
				Kv     jsonKV                 `json:"kv"`
				PrevKv *jsonKV                `json:"prev_kv"`
			}
		}
		if err := dec.Decode(&resp); err != nil {
			return out, fmt.Errorf("etcdctl watch output: %w", err)
		}
		for _, e := range resp.Events {
			ev := event{Type: e.Type.String(), Key: string(e.Kv.Key), Value: string(e.Kv.Value)}
			if e.PrevKv != nil {
				ev.Prev = string(e.PrevKv.Value)
			}
			out = append(out, ev)
		}
	}
	return out, nil
}

var leaseRE = regexp.MustCompile(`lease ([0-9a-f]+) (granted|keepalived) with TTL\((\d+)s?\)`)

func (d *etcdctlDriver) Grant(ctx context.Context, ttl int64) (int64, error) {
	out, err := d.run(ctx, "", "lease", "grant", strconv.FormatInt(ttl, 10))
	if err != nil {
		return 0, err
	}
	m := leaseRE.FindStringSubmatch(string(out))
	if m == nil {
		return 0, fmt.Errorf("lease grant output %q", out)
	}
	return strconv.ParseInt(m[1], 16, 64)
}

func (d *etcdctlDriver) KeepAliveOnce(ctx context.Context, id int64) (int64, error) {
	out, err := d.run(ctx, "", "lease", "keep-alive", "--once", strconv.FormatInt(id, 16))
	if err != nil {
		return 0, err
	}
	m := leaseRE.FindStringSubmatch(string(out))
	if m == nil {
		return 0, fmt.Errorf("lease keep-alive output %q", out)
	}
	return strconv.ParseInt(m[3], 10, 64)
}

func (d *etcdctlDriver) MemberNames(ctx context.Context) ([]string, error) {
	out, err := d.run(ctx, "", "member", "list", "-w", "json")
	if err != nil {
		return nil, err
	}
	var resp struct {
		Members []struct{ Name string }
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("decode %q: %w", out, err)
	}
	var names []string
	for _, m := range resp.Members {
		names = append(names, m.Name)
	}
	return names, nil
}

func (d *etcdctlDriver) Status(ctx context.Context) ([]memberStatus, error) {
	out, err := d.run(ctx, "", "endpoint", "status", "-w", "json")
	if err != nil {
		return nil, err
	}
	var resp []struct {
		Status struct {
			Header    jsonHeader `json:"header"`
			Version   string     `json:"version"`
			Leader    uint64     `json:"leader"`
			RaftIndex uint64     `json:"raftIndex"`
		}
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("decode %q: %w", out, err)
	}
	var res []memberStatus
	for _, r := range resp {
		res = append(res, memberStatus{ID: r.Status.Header.MemberID, Leader: r.Status.Leader, Version: r.Status.Version, RaftIndex: r.Status.RaftIndex})
	}
	return res, nil
}

func (d *etcdctlDriver) Compact(ctx context.Context, rev int64) error {
	_, err := d.run(ctx, "", "compaction", strconv.FormatInt(rev, 10))
	return err
}
