// Command frozenbench measures how a cluster's API answers while one store
// member is frozen (SIGSTOP: its TCP connections stay up, nothing answers),
// for scripts/bench-frozen.sh. Clients list and create ConfigMaps through
// the kubeconfig's server for -duration; with -freeze-pid the process is
// stopped when the measured window starts and continued when it ends. It
// prints one row: requests, errors, latency p50/p99/max, the write gap (the
// longest time without a create succeeding) and how many times the
// kube-scheduler and kube-controller-manager Leases changed holder. With
// -kill-pid a process (the store's leader) is SIGKILLed -kill-after into
// the window instead.
// The same code runs against kplane and against Kubernetes.
//
//	go run ./internal/frozenbench -kubeconfig K -label frozen -freeze-pid 1234
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type config struct {
	kubeconfig, label string
	clients           int
	duration          time.Duration
	freezePID         int
	killPID           int
	killAfter         time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster under test")
	flag.StringVar(&cfg.label, "label", "cluster", "name of this row")
	flag.IntVar(&cfg.clients, "clients", 8, "concurrent clients, each alternating a list and a create")
	flag.DurationVar(&cfg.duration, "duration", 60*time.Second, "length of the measured window")
	flag.IntVar(&cfg.freezePID, "freeze-pid", 0, "process to SIGSTOP for the window (0: none)")
	flag.IntVar(&cfg.killPID, "kill-pid", 0, "process to SIGKILL -kill-after into the window (0: none), e.g. the store's leader")
	flag.DurationVar(&cfg.killAfter, "kill-after", 5*time.Second, "when to kill -kill-pid")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), cfg, log); err != nil {
		log.Error("frozenbench", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, log *slog.Logger) error {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = -1, 0 // no client-side limit: measure the server
	rc.Timeout = 90 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ns := "frozenbench-" + cfg.label
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace: %w", err)
	}
	holders := leaseHolders(ctx, cs)
	if cfg.freezePID > 0 {
		if err := syscall.Kill(cfg.freezePID, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("freeze %d: %w", cfg.freezePID, err)
		}
		log.Info("froze", "pid", cfg.freezePID)
		defer func() {
			_ = syscall.Kill(cfg.freezePID, syscall.SIGCONT)
			log.Info("thawed", "pid", cfg.freezePID)
		}()
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var (
		mu     sync.Mutex
		lat    []time.Duration
		errs   int
		writes []time.Time // when each successful create returned
		wg     sync.WaitGroup
	)
	if cfg.killPID > 0 {
		kill := time.AfterFunc(cfg.killAfter, func() {
			if err := syscall.Kill(cfg.killPID, syscall.SIGKILL); err != nil {
				log.Error("kill", "pid", cfg.killPID, "err", err)
				return
			}
			log.Info("killed", "pid", cfg.killPID)
		})
		defer kill.Stop()
	}
	windowStart := time.Now()
	for c := range cfg.clients {
		wg.Go(func() {
			for i := 0; wctx.Err() == nil; i++ {
				start := time.Now()
				var err error
				if i%2 == 0 {
					_, err = cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{Limit: 50})
				} else {
					_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d-%d-%d", c, i, start.UnixNano())}}, metav1.CreateOptions{})
				}
				d := time.Since(start)
				mu.Lock()
				lat = append(lat, d)
				if err != nil {
					errs++
				} else if i%2 == 1 {
					writes = append(writes, time.Now())
				}
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	windowEnd := time.Now()
	if len(lat) == 0 {
		return fmt.Errorf("no request finished")
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(time.Millisecond) }
	changes := 0
	for name, before := range holders {
		if after := leaseHolders(ctx, cs)[name]; after != before {
			changes++
		}
	}
	// The write gap: the longest time without a create succeeding, from
	// the start of the window to its end.
	slices.SortFunc(writes, func(a, b time.Time) int { return a.Compare(b) })
	writes = append(append([]time.Time{windowStart}, writes...), windowEnd)
	var gap time.Duration
	for i := 1; i < len(writes); i++ {
		gap = max(gap, writes[i].Sub(writes[i-1]))
	}
	fmt.Printf("%-12s requests %5d  errors %4d (%.1f%%)  p50 %-8v p99 %-8v max %-8v  write gap %-8v lease holders changed %d\n",
		cfg.label, len(lat), errs, 100*float64(errs)/float64(len(lat)), q(0.5), q(0.99), lat[len(lat)-1].Round(time.Millisecond),
		gap.Round(time.Millisecond), changes)
	return nil
}

// leaseHolders reads who holds the scheduler's and the controller
// manager's Leases (kube-system), by Lease name.
func leaseHolders(ctx context.Context, cs kubernetes.Interface) map[string]string {
	out := map[string]string{}
	for _, name := range []string{"kube-scheduler", "kube-controller-manager"} {
		l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			out[name] = ""
			continue
		}
		out[name] = *l.Spec.HolderIdentity
	}
	return out
}
