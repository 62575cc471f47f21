// This file holds what the store's end-to-end tests share: the kplane binary
// built once, and a 3-member store started as `kplane store` processes.

package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
)

// kplaneBin is the kplane binary built once for the package by TestMain.
var kplaneBin string

func TestMain(m *testing.M) {
	os.Exit(testutil.RunWithKplane(m, &kplaneBin))
}

// startCluster starts a 3-member store as kplane store processes, stops it
// when the test ends and shows the members' logs if the test failed.
func startCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	c, err := localcluster.Start(context.Background(), localcluster.Config{
		Binary:  kplaneBin,
		DataDir: t.TempDir(),
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, m := range c.Members {
				b, _ := os.ReadFile(m.LogPath)
				lines := strings.Split(string(b), "\n")
				if len(lines) > 40 {
					lines = lines[len(lines)-40:]
				}
				t.Logf("--- %s log (tail) ---\n%s", m.Name, strings.Join(lines, "\n"))
			}
		}
	})
	waitReady(t, c)
	return c
}

// waitReady waits (bounded) until a write through the cluster succeeds.
func waitReady(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	cli := newClient(t, c)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Put(ctx, "/e2e/ready", "1")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready within 30s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func newClient(t *testing.T, c *localcluster.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(c.Endpoints(), ","),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
