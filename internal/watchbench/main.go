// Command watchbench measures what many watchers of a large object cost a
// running cluster, for scripts/bench-watchers.sh: it puts a ConfigMap of
// -size bytes in a namespace, opens -watchers watches of that namespace's
// ConfigMaps through the kubeconfig's server (each receives the object as
// its initial ADDED event), waits until every watcher has it, then closes
// them all. It prints the resident memory of the processes given with
// -pid name=PID before, with the watchers open, and -after the watchers
// left; and how long the watchers took to receive the object.
//
//	go run ./internal/watchbench -kubeconfig K -watchers 2000 -pid apiserver-1=123 -pid gateway=456
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// pids is the repeated -pid name=PID flag.
type pids []struct {
	name string
	pid  int
}

func (p *pids) String() string { return fmt.Sprint(*p) }

func (p *pids) Set(v string) error {
	name, num, ok := strings.Cut(v, "=")
	pid, err := strconv.Atoi(num)
	if !ok || err != nil {
		return fmt.Errorf("want name=PID, got %q", v)
	}
	*p = append(*p, struct {
		name string
		pid  int
	}{name, pid})
	return nil
}

type config struct {
	kubeconfig, namespace string
	watchers, size        int
	after                 time.Duration
	procs                 pids
}

func main() {
	var cfg config
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster under test")
	flag.StringVar(&cfg.namespace, "namespace", "watchbench", "namespace holding the large ConfigMap")
	flag.IntVar(&cfg.watchers, "watchers", 2000, "watches to open")
	flag.IntVar(&cfg.size, "size", 1<<20, "bytes of data in the ConfigMap")
	flag.DurationVar(&cfg.after, "after", 70*time.Second, "wait after the watchers left before the last sample")
	flag.Var(&cfg.procs, "pid", "name=PID of a process to sample (repeat)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), cfg, log); err != nil {
		log.Error("watchbench", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, log *slog.Logger) error {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cfg.namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace: %w", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "large"}, Data: map[string]string{"blob": strings.Repeat("x", cfg.size)}}
	if _, err := cs.CoreV1().ConfigMaps(cfg.namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("configmap: %w", err)
	}
	time.Sleep(2 * time.Second)
	before := sample(cfg.procs)

	// One HTTP/2 transport: the watches share a few connections.
	tc, err := rest.TLSConfigFor(rc)
	if err != nil {
		return err
	}
	if tc == nil {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 100}
	hc := &http.Client{Transport: tr}
	url := strings.TrimSuffix(rc.Host, "/") + "/api/v1/namespaces/" + cfg.namespace + "/configmaps?watch=1&allowWatchBookmarks=true"
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	var firstMu sync.Mutex
	var firsts []time.Duration
	for i := 0; i < cfg.watchers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := watchOne(wctx, hc, url, rc.BearerToken, func() {
				got.Add(1)
				firstMu.Lock()
				firsts = append(firsts, time.Since(start))
				firstMu.Unlock()
			}); err != nil && wctx.Err() == nil {
				if failed.Add(1) <= 3 {
					log.Warn("watch", "err", err)
				}
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Minute)
	for got.Load()+failed.Load() < int64(cfg.watchers) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	delivered := time.Since(start)
	open := sample(cfg.procs)
	cancel()
	wg.Wait()
	tr.CloseIdleConnections()
	time.Sleep(cfg.after)
	after := sample(cfg.procs)
	_ = cs.CoreV1().Namespaces().Delete(ctx, cfg.namespace, metav1.DeleteOptions{})

	slices.Sort(firsts)
	p := func(q float64) time.Duration {
		if len(firsts) == 0 {
			return 0
		}
		return firsts[min(len(firsts)-1, int(q*float64(len(firsts))))]
	}
	fmt.Printf("%d watchers of a %d KiB ConfigMap: %d received it (%d failed) in %s (p50 %s, p99 %s)\n",
		cfg.watchers, cfg.size>>10, got.Load(), failed.Load(), delivered.Round(time.Millisecond), p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond))
	fmt.Printf("%-14s %12s %12s %12s\n", "process", "before MB", "open MB", fmt.Sprintf("after %s MB", cfg.after))
	for i, pr := range cfg.procs {
		fmt.Printf("%-14s %12.0f %12.0f %12.0f\n", pr.name, before[i], open[i], after[i])
	}
	return nil
}

// watchOne streams one watch, calling first once the first ADDED event
// has arrived whole, and reads (and drops) the rest until ctx ends.
func watchOne(ctx context.Context, hc *http.Client, url, token string, first func()) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("watch: %s", resp.Status)
	}
	// Read and drop the stream, keeping only the first event's opening
	// bytes (to check it is the ADDED one) until its end of line.
	buf := make([]byte, 32<<10)
	var head []byte
	seen := false
	for {
		n, err := resp.Body.Read(buf)
		if !seen && n > 0 {
			chunk := buf[:n]
			if len(head) < 64 {
				head = append(head, chunk[:min(len(chunk), 64-len(head))]...)
			}
			if bytes.IndexByte(chunk, '\n') >= 0 {
				seen = true
				if bytes.Contains(head, []byte(`"type":"ADDED"`)) {
					first()
				}
			}
		}
		if err != nil {
			return err
		}
	}
}

// sample returns each process's RSS in MiB.
func sample(ps pids) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				out[i] = kb / 1024
			}
		}
	}
	return out
}
