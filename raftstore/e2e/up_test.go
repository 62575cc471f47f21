package e2e

import (
	"bufio"
	"context"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestUp runs `kplane up`, uses the endpoints it prints, and stops it with
// SIGINT (Ctrl-C): it exits cleanly and takes its members with it.
func TestUp(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(kplaneBin, "up", "--base-port=0", "--data-dir", dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
		}
	}()
	re := regexp.MustCompile(`etcdctl --endpoints=(\S+)`)
	var endpoints string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			endpoints = m[1]
			break
		}
	}
	if endpoints == "" {
		t.Fatal("kplane up printed no etcdctl --endpoints line")
	}
	go func() {
		for sc.Scan() {
		}
		exited <- cmd.Wait()
	}()

	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Put(ctx, "/up", "ok")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write through kplane up's endpoints within 30s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	list, err := cli.MemberList(context.Background())
	if err != nil || len(list.Members) != 3 {
		t.Fatalf("member list: got %v (%v), want 3 members", list, err)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("kplane up after Ctrl-C: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("kplane up still running 30s after Ctrl-C")
	}
	// Its members are gone: nothing answers on the endpoints.
	for _, ep := range strings.Split(endpoints, ",") {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = c.Status(ctx, ep)
		cancel()
		c.Close()
		if err == nil {
			t.Errorf("member at %s still answers after kplane up stopped", ep)
		}
	}
}
