// Command crbench measures custom-resource creates beside pod creates on
// any cluster reachable through a kubeconfig, for scripts/bench-crd.sh: it
// creates a CustomResourceDefinition from a file (a large published one,
// with CEL rules), waits until it is Established, then runs closed-loop
// creates of the custom resource and of pods from -clients clients for
// -duration each, and reports creates/s and latency percentiles. The same
// code runs against kplane and against kube-apiserver, so their rows
// compare.
//
//	go run ./internal/crbench -kubeconfig K -label kplane -crd httproutes-crd.yaml -out kplane.json
//	go run ./internal/crbench -compare kplane.json k8s.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster under test")
	flag.StringVar(&cfg.label, "label", "cluster", "name of this row in the report")
	flag.StringVar(&cfg.crd, "crd", "", "the CustomResourceDefinition (YAML) whose kind is created")
	flag.StringVar(&cfg.namespace, "namespace", "crbench", "namespace of the objects (created if missing)")
	flag.IntVar(&cfg.clients, "clients", 20, "concurrent clients, each creating one object at a time")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long each kind is created for")
	flag.DurationVar(&cfg.warmup, "warmup", 2*time.Second, "creates before each measured run, not counted")
	flag.StringVar(&cfg.out, "out", "", "also write the result as JSON to this file")
	compare := flag.Bool("compare", false, "print the result files given as arguments side by side, with the ratios of the first to each other")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *compare {
		if err := compareFiles(os.Stdout, flag.Args()); err != nil {
			log.Error("crbench", "err", err)
			os.Exit(1)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg, log)
	if err != nil {
		log.Error("crbench", "err", err)
		os.Exit(1)
	}
	printResult(os.Stdout, res)
	if cfg.out != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err == nil {
			err = os.WriteFile(cfg.out, b, 0o644)
		}
		if err != nil {
			log.Error("crbench: write result", "err", err)
			os.Exit(1)
		}
	}
}

// config is what one measurement is run with.
type config struct {
	kubeconfig, label, crd, namespace, out string
	clients                                int
	duration, warmup                       time.Duration
}

// result is one cluster's figures, per kind created.
type result struct {
	Label   string `json:"label"`
	Clients int    `json:"clients"`
	CRD     string `json:"crd"`
	Kinds   []kind `json:"kinds"`
}

// kind is the figures of one kind's closed-loop creates.
type kind struct {
	Kind    string  `json:"kind"`
	Creates int     `json:"creates"`
	Errors  int     `json:"errors"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"perSec"`
	P50ms   float64 `json:"p50ms"`
	P99ms   float64 `json:"p99ms"`
}

func printResult(w *os.File, r *result) {
	for _, k := range r.Kinds {
		fmt.Fprintf(w, "%-12s %-24s %6d creates in %5.1fs: %8.1f/s  p50 %6.1f ms  p99 %6.1f ms  errors %d\n",
			r.Label, k.Kind, k.Creates, k.Seconds, k.PerSec, k.P50ms, k.P99ms, k.Errors)
	}
}

func compareFiles(w *os.File, files []string) error {
	if len(files) == 0 {
		return errors.New("-compare needs result files")
	}
	var rs []*result
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		rs = append(rs, &r)
	}
	fmt.Fprintf(w, "%-12s %-24s %10s %10s %10s\n", "cluster", "kind", "creates/s", "p50 ms", "p99 ms")
	for _, r := range rs {
		for _, k := range r.Kinds {
			fmt.Fprintf(w, "%-12s %-24s %10.1f %10.1f %10.1f\n", r.Label, k.Kind, k.PerSec, k.P50ms, k.P99ms)
		}
	}
	first := rs[0]
	for _, other := range rs[1:] {
		for i, k := range first.Kinds {
			if i >= len(other.Kinds) || other.Kinds[i].Kind != k.Kind {
				continue
			}
			o := other.Kinds[i]
			fmt.Fprintf(w, "%s / %s, %s: creates/s %.2fx, p99 %.2fx\n", first.Label, other.Label, k.Kind,
				k.PerSec/o.PerSec, k.P99ms/o.P99ms)
		}
	}
	if len(first.Kinds) == 2 {
		cr, pod := first.Kinds[0], first.Kinds[1]
		fmt.Fprintf(w, "%s: %s creates/s are %.2fx its pod creates/s, p99 %.2fx\n", first.Label, cr.Kind, cr.PerSec/pod.PerSec, cr.P99ms/pod.P99ms)
	}
	return nil
}
