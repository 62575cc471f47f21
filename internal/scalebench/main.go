// Command scalebench puts a ClusterLoader2-style load on any cluster
// reachable through a kubeconfig, for scripts/bench-scale.sh, and measures
// Kubernetes' scalability SLOs as Kubernetes measures them: namespaces,
// Deployments of mixed sizes with a Service, a ConfigMap and a Secret each,
// created at a fixed rate; then for -duration the pods are churned (scale,
// rollout, delete and recreate) at a fixed pod rate; then everything is
// deleted. It reports
//
//   - API call latency p99 per verb, resource, subresource and scope, from
//     the API endpoint's apiserver_request_duration_seconds histogram (read
//     from /metrics before and after the load, the difference taken), judged
//     against the SLO: mutating calls and single-object reads ≤ 1 s,
//     namespace lists ≤ 5 s, cluster-wide lists ≤ 30 s;
//   - pod startup latency from a pod watch (creationTimestamp → Running
//     observed, ≤ 5 s at p99; neither runtime measured pulls an image, so
//     nothing is subtracted), plus first seen → Running at sub-second
//     resolution;
//   - cluster-wide and namespace list latency as this client sees it;
//   - each control-plane process's peak RSS and CPU seconds (/proc), and the
//     store's size on disk.
//
// The same code runs against kplane and against Kubernetes, so the rows
// compare.
//
//	go run ./internal/scalebench -kubeconfig K -label kplane-500 -nodes 500 -pods-per-node 30 \
//	    -duration 5m -kplane-status status.json -store-dirs d/store0,d/store1,d/store2 -out r.json
//	go run ./internal/scalebench -compare r1.json r2.json ...
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
	flag.IntVar(&cfg.nodes, "nodes", 50, "Ready nodes to wait for before starting")
	flag.IntVar(&cfg.kwokNodes, "kwok-nodes", 0, "first create this many fake nodes for KWOK to manage (annotation kwok.x-k8s.io/node=fake)")
	flag.IntVar(&cfg.podsPerNode, "pods-per-node", 30, "pods per node once everything is created")
	flag.IntVar(&cfg.nodesPerNamespace, "nodes-per-namespace", 100, "one namespace per this many nodes (ClusterLoader2's load test: 100)")
	flag.Float64Var(&cfg.qps, "qps", 20, "object creations and deletions per second (ClusterLoader2's load test: 20 by default)")
	flag.Float64Var(&cfg.podRate, "pod-rate", 20, "pods per second created or replaced by the churn")
	flag.DurationVar(&cfg.duration, "duration", 2*time.Minute, "how long to churn once everything runs")
	flag.DurationVar(&cfg.listEvery, "list-every", 10*time.Second, "time between two cluster-wide pod lists (and namespace lists) by this client")
	flag.StringVar(&cfg.procs, "procs", "", "processes to measure, component=pid,... (a component may repeat)")
	flag.StringVar(&cfg.kplaneStat, "kplane-status", "", "also measure the processes listed in this `kplane status -o json` output")
	flag.StringVar(&cfg.storeDirs, "store-dirs", "", "the store's data directories, comma-separated (their size on disk is reported)")
	flag.StringVar(&cfg.out, "out", "", "also write the result as JSON to this file")
	flag.DurationVar(&cfg.timeout, "timeout", 20*time.Minute, "give up after")
	flag.DurationVar(&cfg.overload, "overload", 0, "instead of the scale load, flood the API for this long (overload.go)")
	flag.DurationVar(&cfg.baseline, "baseline", 15*time.Second, "with -overload: how long to probe before the flood")
	flag.IntVar(&cfg.floodClients, "flood-clients", 100, "with -overload: clients listing at once")
	flag.IntVar(&cfg.floodObjects, "flood-objects", 3000, "with -overload: ConfigMaps each flood list returns")
	flag.IntVar(&cfg.floodObjectBytes, "flood-object-bytes", 1000, "with -overload: bytes of data in each ConfigMap")
	compare := flag.Bool("compare", false, "print the result files given as arguments as one summary table")
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
	if cfg.overload > 0 {
		code := mainOverload(ctx, logger, cfg)
		cancel()
		os.Exit(code)
	}
	res, err := run(ctx, logger, cfg)
	if res != nil {
		printResult(os.Stdout, res)
		if cfg.out != "" {
			if werr := writeJSON(cfg.out, res); werr != nil {
				logger.Error("write result", "err", werr)
				os.Exit(1)
			}
		}
	}
	if err == nil && res.Error != "" {
		err = errors.New(res.Error)
	}
	if err != nil {
		logger.Error("scale", "label", cfg.label, "err", err)
		os.Exit(1)
	}
	if !res.Holds() {
		// The script stops stepping up a cluster that missed an SLO.
		os.Exit(3)
	}
}

func writeJSON(path string, res any) error {
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

// mainOverload runs the overload benchmark and returns the exit status.
func mainOverload(ctx context.Context, logger *slog.Logger, cfg config) int {
	res, err := runOverload(ctx, logger, cfg)
	if res != nil {
		printOverload(os.Stdout, res)
		if cfg.out != "" {
			if werr := writeJSON(cfg.out, res); werr != nil {
				logger.Error("write result", "err", werr)
				return 1
			}
		}
	}
	if err != nil {
		logger.Error("overload", "label", cfg.label, "err", err)
		return 1
	}
	return 0
}
