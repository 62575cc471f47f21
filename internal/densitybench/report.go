// This file prints a run's figures, each component's CPU and memory totals,
// and a comparison of several result files.

package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// componentTotals sums the processes of each component, in first-seen
// order, plus a "total" row.
type componentTotal struct {
	component string
	procs     int
	rssBytes  uint64
	cpu       float64
}

func totals(r *Result) []componentTotal {
	var out []componentTotal
	var all componentTotal
	all.component = "total"
	for _, p := range r.Procs {
		i := slices.IndexFunc(out, func(c componentTotal) bool { return c.component == p.Component })
		if i < 0 {
			out = append(out, componentTotal{component: p.Component})
			i = len(out) - 1
		}
		out[i].procs++
		out[i].rssBytes += p.PeakRSSBytes
		out[i].cpu += p.CPUSeconds
		all.procs++
		all.rssBytes += p.PeakRSSBytes
		all.cpu += p.CPUSeconds
	}
	return append(out, all)
}

// workloadOf is r's workload; files from before workloads are Deployments.
func workloadOf(r *Result) string {
	if r.Workload == "" {
		return workloadDeployment
	}
	return r.Workload
}

func doneMeaning(workload string) string {
	switch workload {
	case workloadStatefulSet:
		return "all Ready"
	case workloadDaemonSet:
		return "rolling update: all updated and available"
	case workloadJobs:
		return "all Jobs Complete"
	}
	return "all Running"
}

// doneSeconds is r's time to done; older files only have RunningSeconds.
func doneSeconds(r *Result) float64 {
	if r.DoneSeconds == 0 {
		return r.RunningSeconds
	}
	return r.DoneSeconds
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func printResult(w io.Writer, r *Result) {
	fmt.Fprintf(w, "== %s: %s, %d replicas on %d nodes (load %s)\n", r.Label, workloadOf(r), r.Replicas, r.Nodes, r.Load)
	fmt.Fprintf(w, "   done (%s) in %.2fs\n", doneMeaning(workloadOf(r)), r.DoneSeconds)
	fmt.Fprintf(w, "   all created in %.1fs (%.1f pods/s), all Running in %.1fs (%.1f pods/s)\n",
		r.CreateSeconds, r.CreateRate, r.RunningSeconds, r.Throughput)
	fmt.Fprintf(w, "   startup (seen -> Running)       p50 %.3fs p90 %.3fs p99 %.3fs max %.3fs\n", r.Startup.P50, r.Startup.P90, r.Startup.P99, r.Startup.Max)
	fmt.Fprintf(w, "   startup (creationTimestamp, 1 s resolution) p50 %.3fs p99 %.3fs\n", r.StartupFromCreation.P50, r.StartupFromCreation.P99)
	fmt.Fprintf(w, "   scheduling (seen -> bound)      p50 %.3fs p90 %.3fs p99 %.3fs\n", r.Scheduling.P50, r.Scheduling.P90, r.Scheduling.P99)
	fmt.Fprintf(w, "   starting (bound -> Running)     p50 %.3fs p90 %.3fs p99 %.3fs\n", r.Starting.P50, r.Starting.P90, r.Starting.P99)
	fmt.Fprintf(w, "   events in the namespace: %d (%.1f per pod)\n", r.Events, float64(r.Events)/float64(max(r.Replicas, 1)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "   component\tprocs\tpeak RSS MiB\tCPU s (run)\t")
	for _, c := range totals(r) {
		fmt.Fprintf(tw, "   %s\t%d\t%.0f\t%.1f\t\n", c.component, c.procs, mib(c.rssBytes), c.cpu)
	}
	tw.Flush()
	all := totals(r)
	fmt.Fprintf(w, "   control plane CPU per pod: %.1f ms (all measured processes, during the run)\n", cpuPerPod(r, all[len(all)-1]))
}

// cpuPerPod is the measured processes' CPU milliseconds per pod during the
// run: on a shared machine it varies less than the rates do.
func cpuPerPod(r *Result, all componentTotal) float64 {
	if r.Replicas == 0 {
		return 0
	}
	return all.cpu * 1000 / float64(r.Replicas)
}

// compareFiles prints one row per result file and, for every file after the
// first, the ratios first/that file.
func compareFiles(w io.Writer, paths []string) error {
	if len(paths) < 2 {
		return fmt.Errorf("%w: -compare wants at least two result files", errUsage)
	}
	rs := make([]*Result, len(paths))
	for i, p := range paths {
		r, err := readJSON(p)
		if err != nil {
			return err
		}
		rs[i] = r
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tworkload\treplicas\tdone s\tcreate pods/s\tRunning pods/s\tstartup p50 s\tstartup p99 s\tpeak RSS MiB\tCPU s\tCPU ms/pod\tload\t")
	for _, r := range rs {
		t := totals(r)
		all := t[len(t)-1]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.1f\t%.1f\t%.3f\t%.3f\t%.0f\t%.1f\t%.1f\t%s\t\n", r.Label, workloadOf(r), r.Replicas, doneSeconds(r), r.CreateRate, r.Throughput,
			r.Startup.P50, r.Startup.P99, mib(all.rssBytes), all.cpu, cpuPerPod(r, all), r.Load)
	}
	base := rs[0]
	bt := totals(base)
	ball := bt[len(bt)-1]
	for _, r := range rs[1:] {
		t := totals(r)
		all := t[len(t)-1]
		fmt.Fprintf(tw, "%s/%s\t\t\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t\t\n", base.Label, r.Label,
			doneSeconds(base)/doneSeconds(r),
			base.CreateRate/r.CreateRate, base.Throughput/r.Throughput,
			base.Startup.P50/r.Startup.P50, base.Startup.P99/r.Startup.P99,
			mib(ball.rssBytes)/mib(all.rssBytes), ball.cpu/all.cpu, cpuPerPod(base, ball)/cpuPerPod(r, all))
	}
	return tw.Flush()
}
