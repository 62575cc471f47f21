// Command densitybench measures pod startup on any cluster reachable
// through a kubeconfig, for scripts/bench-density.sh: it creates a
// Deployment of -replicas pods (or, with -workload, a Parallel StatefulSet,
// a DaemonSet's rolling update or one-pod Jobs, timed until done) and,
// through a pod watch (an informer),
// records when each pod is first seen, bound to a node and Running. It
// reports pod startup latency (p50/p90/p99), the pod creation rate and the
// throughput to all Running, and the peak RSS and CPU seconds of the
// control plane's processes read from /proc. The same code runs against
// kplane and against Kubernetes, so their rows compare.
//
//	go run ./internal/densitybench -kubeconfig K -label kplane -nodes 100 -replicas 3000 \
//	    -procs store=1234,apiserver=1240 -out kplane.json
//	go run ./internal/densitybench -kubeconfig K -kwok-nodes 100 ...   (creates KWOK's fake nodes first)
//	go run ./internal/densitybench -workload jobs -replicas 1000 ...   (or statefulset, daemonset)
//	go run ./internal/densitybench -compare kplane.json k8s-stock.json k8s-tuned.json
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
	flag.StringVar(&cfg.namespace, "namespace", "density", "namespace of the workload (created if missing)")
	flag.IntVar(&cfg.nodes, "nodes", 100, "Ready nodes to wait for before starting")
	flag.IntVar(&cfg.kwokNodes, "kwok-nodes", 0, "first create this many fake nodes for KWOK to manage (annotation kwok.x-k8s.io/node=fake)")
	flag.IntVar(&cfg.replicas, "replicas", 3000, "replicas of the Deployment or StatefulSet, or number of Jobs")
	flag.StringVar(&cfg.workload, "workload", workloadDeployment, "what to measure: deployment (until all pods Running), statefulset (Parallel, until all Ready), daemonset (a rolling update of its template over -nodes nodes, until all updated and available), jobs (-replicas one-pod Jobs, until all Complete)")
	flag.StringVar(&cfg.maxUnavailable, "max-unavailable", "10%", "the DaemonSet's rollingUpdate.maxUnavailable")
	flag.StringVar(&cfg.procs, "procs", "", "processes to measure, component=pid,... (a component may repeat)")
	flag.StringVar(&cfg.kplaneStat, "kplane-status", "", "also measure the processes listed in this `kplane status -o json` output")
	flag.StringVar(&cfg.out, "out", "", "also write the result as JSON to this file")
	flag.DurationVar(&cfg.timeout, "timeout", 20*time.Minute, "give up after")
	compare := flag.Bool("compare", false, "print the result files given as arguments side by side, with the ratios of the first to each other")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *compare {
		if err := compareFiles(os.Stdout, flag.Args()); err != nil {
			logger.Error("compare", "err", err)
			os.Exit(1)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	res, err := run(ctx, logger, cfg)
	if err != nil {
		logger.Error("density", "label", cfg.label, "err", err)
		os.Exit(1)
	}
	printResult(os.Stdout, res)
	if cfg.out != "" {
		if err := writeJSON(cfg.out, res); err != nil {
			logger.Error("write result", "err", err)
			os.Exit(1)
		}
	}
}

func writeJSON(path string, res *Result) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

func readJSON(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read result: %w", err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return &r, nil
}

var errUsage = errors.New("usage")
