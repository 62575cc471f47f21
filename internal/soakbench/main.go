// Command soakbench watches a running `kplane up` under steady churn for
// scripts/bench-soak.sh: a Deployment scaled between -low and -high
// replicas every -churn, and every -sample a row of what must stay bounded
// when a cluster runs for months — the store's revision and compacted
// revision (their difference is the history kept), each store member's RSS,
// Raft log (raft.db and the WAL's segments) and latest snapshot size, each API service's RSS. At the
// end it prints, per process, the growth from the sample at -settle to the
// last one.
//
//	go run ./internal/soakbench -data-dir .kplane -duration 60m
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kplane/kplane/internal/localcluster"
)

type config struct {
	dataDir               string
	duration, sample      time.Duration
	churn, settle         time.Duration
	low, high             int32
	namespace, deployment string
}

func main() {
	var cfg config
	var low, high int
	flag.StringVar(&cfg.dataDir, "data-dir", ".kplane", "data directory of the running kplane up")
	flag.DurationVar(&cfg.duration, "duration", 60*time.Minute, "how long to run")
	flag.DurationVar(&cfg.sample, "sample", time.Minute, "time between two rows")
	flag.DurationVar(&cfg.churn, "churn", time.Minute, "time between two scalings of the Deployment")
	flag.DurationVar(&cfg.settle, "settle", 10*time.Minute, "growth is measured from the row at this time to the last")
	flag.IntVar(&low, "low", 10, "replicas after a scale down")
	flag.IntVar(&high, "high", 100, "replicas after a scale up")
	flag.StringVar(&cfg.namespace, "namespace", "soak", "namespace of the Deployment")
	flag.StringVar(&cfg.deployment, "deployment", "churn", "name of the Deployment")
	flag.Parse()
	cfg.low, cfg.high = int32(low), int32(high)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), cfg, log); err != nil {
		log.Error("soakbench", "err", err)
		os.Exit(1)
	}
}

// row is one sample.
type row struct {
	at             time.Duration
	rev, compacted int64
	rss            map[string]int64 // process name → bytes
	raftDB, snap   map[string]int64 // store member → bytes
}

func run(ctx context.Context, cfg config, log *slog.Logger) error {
	st, err := localcluster.ReadState(cfg.dataDir)
	if err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	store, err := storeClient(st)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := createDeployment(ctx, cs, cfg); err != nil {
		return err
	}

	fmt.Printf("%-6s %9s %9s %8s", "min", "revision", "compacted", "window")
	for _, p := range st.Processes {
		if p.Component == "store" || p.Component == "apiserver" {
			fmt.Printf(" %14s", p.Name+" MB")
		}
	}
	for _, p := range st.Processes {
		if p.Component == "store" {
			fmt.Printf(" %18s", p.Name+" raft/snap MB")
		}
	}
	fmt.Println()

	start := time.Now()
	var rows []row
	replicas := cfg.low
	nextChurn, nextSample := start.Add(cfg.churn), start
	for time.Since(start) < cfg.duration {
		now := time.Now()
		if !now.Before(nextChurn) {
			replicas = cfg.high + cfg.low - replicas
			if err := scale(ctx, cs, cfg, replicas); err != nil {
				log.Warn("scale", "replicas", replicas, "err", err)
			}
			nextChurn = nextChurn.Add(cfg.churn)
		}
		if !now.Before(nextSample) {
			r, err := sampleRow(ctx, st, store, cfg.dataDir)
			if err != nil {
				log.Warn("sample", "err", err)
			} else {
				r.at = time.Since(start)
				rows = append(rows, r)
				printRow(st, r)
			}
			nextSample = nextSample.Add(cfg.sample)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	summarize(st, rows, cfg.settle)
	return cs.AppsV1().Deployments(cfg.namespace).Delete(ctx, cfg.deployment, metav1.DeleteOptions{})
}

func createDeployment(ctx context.Context, cs kubernetes.Interface, cfg config) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cfg.namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace: %w", err)
	}
	labels := map[string]string{"app": cfg.deployment}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: cfg.deployment},
		Spec: appsv1.DeploymentSpec{
			Replicas: &cfg.low,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(cfg.namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("deployment: %w", err)
	}
	return nil
}

func scale(ctx context.Context, cs kubernetes.Interface, cfg config, replicas int32) error {
	s, err := cs.AppsV1().Deployments(cfg.namespace).GetScale(ctx, cfg.deployment, metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.Spec.Replicas = replicas
	_, err = cs.AppsV1().Deployments(cfg.namespace).UpdateScale(ctx, cfg.deployment, s, metav1.UpdateOptions{})
	return err
}

// storeClient dials every member with the operator's store certificate.
func storeClient(st *localcluster.State) (*clientv3.Client, error) {
	caPEM, err := os.ReadFile(st.StoreCAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(st.StoreCertFile, st.StoreKeyFile)
	if err != nil {
		return nil, err
	}
	var eps []string
	for _, p := range st.Processes {
		if p.Component == "store" {
			eps = append(eps, strings.TrimPrefix(p.ClientURL, "https://"))
		}
	}
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
}

func sampleRow(ctx context.Context, st *localcluster.State, store *clientv3.Client, dataDir string) (row, error) {
	r := row{rss: map[string]int64{}, raftDB: map[string]int64{}, snap: map[string]int64{}}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := store.Get(rctx, "compact_rev_key")
	if err != nil {
		return r, fmt.Errorf("revision: %w", err)
	}
	r.rev = resp.Header.Revision
	// A watch from revision 1 is answered with the compacted revision.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	for wr := range store.Watch(wctx, "compact_rev_key", clientv3.WithRev(1)) {
		r.compacted = wr.CompactRevision
		break
	}
	wcancel()
	for _, p := range st.Processes {
		if p.Component != "store" && p.Component != "apiserver" {
			continue
		}
		r.rss[p.Name] = rss(p.PID)
		if p.Component == "store" {
			dir := filepath.Join(dataDir, p.Name, "raft")
			r.raftDB[p.Name] = fileSize(filepath.Join(dir, "raft.db")) + globSize(filepath.Join(dir, "wal", "*.wal"))
			r.snap[p.Name] = latestSnapshot(filepath.Join(dir, "snapshots"))
		}
	}
	return r, nil
}

func printRow(st *localcluster.State, r row) {
	fmt.Printf("%-6.1f %9d %9d %8d", r.at.Minutes(), r.rev, r.compacted, r.rev-r.compacted)
	for _, p := range st.Processes {
		if p.Component == "store" || p.Component == "apiserver" {
			fmt.Printf(" %14.1f", mb(r.rss[p.Name]))
		}
	}
	for _, p := range st.Processes {
		if p.Component == "store" {
			fmt.Printf(" %18s", fmt.Sprintf("%.1f/%.1f", mb(r.raftDB[p.Name]), mb(r.snap[p.Name])))
		}
	}
	fmt.Println()
}

// summarize prints each process's RSS growth from the first row at or
// after settle to the last row.
func summarize(st *localcluster.State, rows []row, settle time.Duration) {
	if len(rows) < 2 {
		return
	}
	first := rows[0]
	for _, r := range rows {
		if r.at >= settle {
			first = r
			break
		}
	}
	last := rows[len(rows)-1]
	fmt.Printf("\ngrowth from minute %.0f to minute %.0f (goal: under 10 %%):\n", first.at.Minutes(), last.at.Minutes())
	for _, p := range st.Processes {
		if p.Component != "store" && p.Component != "apiserver" {
			continue
		}
		a, b := first.rss[p.Name], last.rss[p.Name]
		fmt.Printf("  %-14s RSS %7.1f → %7.1f MB  %+6.1f %%\n", p.Name, mb(a), mb(b), pct(a, b))
		if p.Component == "store" {
			fmt.Printf("  %-14s snapshot %5.1f → %5.1f MB  raft log (raft.db + WAL segments) %5.1f → %5.1f MB\n", "",
				mb(first.snap[p.Name]), mb(last.snap[p.Name]), mb(first.raftDB[p.Name]), mb(last.raftDB[p.Name]))
		}
	}
	fmt.Printf("  history kept (revision - compacted): %d → %d revisions\n", first.rev-first.compacted, last.rev-last.compacted)
}

func pct(a, b int64) float64 {
	if a == 0 {
		return 0
	}
	return 100 * float64(b-a) / float64(a)
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// rss is a process's resident set in bytes (0 if it cannot be read).
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// globSize is the total size of the files matching pattern (the WAL's
// segments, each preallocated).
func globSize(pattern string) int64 {
	paths, _ := filepath.Glob(pattern)
	var total int64
	for _, p := range paths {
		total += fileSize(p)
	}
	return total
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// latestSnapshot is the size of the newest snapshot under dir (hashicorp
// raft's file snapshot store: one directory per snapshot).
func latestSnapshot(dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return 0
	}
	newest := entries[len(entries)-1].Name() // names sort by term, index, time
	var total int64
	_ = filepath.WalkDir(filepath.Join(dir, newest), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			total += info.Size()
		}
		return nil
	})
	return total
}
