// Package storetest starts a store for the API service's tests: by default a
// single-member etcd (/usr/bin/etcd, Debian's etcd-server) on free loopback
// ports in a temporary directory; with KPLANE_TEST_STORE=kplane a
// single-member kplane store, in process. Both speak the etcd v3 API, so the
// same tests run against either.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/raftstore"
)

// Kind is the store the tests run against: "etcd" or "kplane".
func Kind() string {
	if k := os.Getenv("KPLANE_TEST_STORE"); k != "" {
		return k
	}
	return "etcd"
}

// Start starts a store for t and returns its client endpoints; it is
// stopped when t ends.
func Start(t testing.TB) []string {
	t.Helper()
	var eps []string
	switch Kind() {
	case "etcd":
		eps = startEtcd(t)
	case "kplane":
		eps = startKplane(t)
	default:
		t.Fatalf("KPLANE_TEST_STORE=%q: want etcd or kplane", Kind())
	}
	waitHealthy(t, eps)
	return eps
}

// StartKplane starts a single-member kplane store in process for t,
// whatever KPLANE_TEST_STORE says, and returns its client endpoints once it
// takes writes; it is stopped when t ends. It is for tests outside the API
// service's own suite (services/apiserver/apiservertest), which need no
// etcd binary.
func StartKplane(t testing.TB) []string {
	t.Helper()
	eps := startKplane(t)
	waitHealthy(t, eps)
	return eps
}

func startEtcd(t testing.TB) []string {
	bin := testutil.RequireBinary(t, "etcd", "apt-get install -y etcd-server")
	dir := t.TempDir()
	ports := testutil.FreePorts(t, 2)
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	cmd := exec.Command(bin,
		"--name", "test",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test="+peer,
		"--log-level", "error", "--logger", "zap",
	)
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
	})
	return []string{client}
}

func startKplane(t testing.TB) []string {
	dir := t.TempDir()
	// The ports are free when picked but released before the store binds
	// them, so another test process may take one meanwhile: pick afresh
	// and try again when that happens.
	var (
		s      *raftstore.Store
		client string
		err    error
	)
	for try := 0; ; try++ {
		ports := testutil.FreePorts(t, 2)
		client = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
		s, err = raftstore.New(raftstore.Config{
			Name: "test", DataDir: filepath.Join(dir, fmt.Sprintf("data%d", try)),
			ListenClientURLs: []string{client}, ListenPeerURL: peer,
			InitialCluster: "test=" + peer, InitialClusterState: "new",
		})
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EADDRINUSE) || try == 4 {
			t.Fatalf("kplane store: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return []string{client}
}

// waitHealthy waits (bounded) until a write succeeds.
func waitHealthy(t testing.TB, eps []string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var last error
	for range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, last = cli.Put(ctx, "/storetest/health", "ok")
		cancel()
		if last == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("store at %v not healthy: %v", eps, last)
}
