// This file holds the summaries (nearest-rank percentiles), the SLO
// verdicts, the printing of one step and the summary table of several.

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"text/tabwriter"
	"time"
)

// Summary is the distribution of a set of durations, in seconds.
type Summary struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted; 0 for an empty slice.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(1, min(rank, len(sorted)))-1]
}

func summarize(ds []time.Duration) Summary {
	s := slices.Clone(ds)
	slices.Sort(s)
	return Summary{Count: len(s), P50: percentile(s, 50).Seconds(), P90: percentile(s, 90).Seconds(),
		P99: percentile(s, 99).Seconds(), Max: percentile(s, 100).Seconds()}
}

// podStartupSLO is Kubernetes' pod startup SLO: p99 ≤ 5 s.
const podStartupSLO = 5.0

// Verdict is one SLO's worst p99 in a step.
type Verdict struct {
	SLO       string  `json:"slo"`
	P99       float64 `json:"p99"`
	Threshold float64 `json:"threshold"`
	// Worst names the series giving P99 (API calls only).
	Worst string `json:"worst,omitempty"`
	Holds bool   `json:"holds"`
	// Measured is false when no call of the class was made.
	Measured bool `json:"measured"`
}

// Verdicts judges each SLO: the API call classes by their worst series
// (ClusterLoader2 fails a class if any series misses), the pod startup.
func (r *Result) Verdicts() []Verdict {
	var out []Verdict
	for _, c := range sloClasses {
		v := Verdict{SLO: "API " + c.name, Threshold: c.threshold, Holds: true}
		for _, a := range r.APICalls {
			if a.Class != c.name {
				continue
			}
			if !v.Measured || a.P99 > v.P99 {
				v.P99, v.Worst, v.Measured = a.P99, a.Verb+" "+a.Resource+subSuffix(a.Subresource)+" ("+a.Scope+", "+a.Source+")", true
			}
		}
		v.Holds = v.P99 <= v.Threshold
		out = append(out, v)
	}
	out = append(out, Verdict{SLO: "pod startup", P99: r.Startup.P99, Threshold: podStartupSLO,
		Holds: r.Startup.P99 <= podStartupSLO, Measured: r.Startup.Count > 0})
	return out
}

func subSuffix(s string) string {
	if s == "" {
		return ""
	}
	return "/" + s
}

// Holds says the step ran to its end and met every SLO.
func (r *Result) Holds() bool {
	if r.Error != "" {
		return false
	}
	for _, v := range r.Verdicts() {
		if !v.Holds {
			return false
		}
	}
	return true
}

type componentTotal struct {
	component string
	procs     int
	rssBytes  uint64
	cpu       float64
}

// totals sums each component's processes, in first-seen order, plus a
// "total" row.
func totals(r *Result) []componentTotal {
	var out []componentTotal
	all := componentTotal{component: "total"}
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

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func yesNo(b bool) string {
	if b {
		return "holds"
	}
	return "MISSED"
}

func storeTotal(r *Result) (n int64) {
	for _, b := range r.StoreBytes {
		n += b
	}
	return n
}

func printResult(w io.Writer, r *Result) {
	fmt.Fprintf(w, "== %s: %d nodes × %d pods = %d pods in %d namespaces, %d Deployments (load %s)\n",
		r.Label, r.Nodes, r.PodsPerNode, r.Pods, r.Namespaces, r.Deployments, r.Load)
	if r.Error != "" {
		fmt.Fprintf(w, "   BROKE: %s\n", r.Error)
	}
	fmt.Fprintf(w, "   created and all Running in %.1fs; churn: %d actions in %.1fs; deleted in %.1fs (%d pods left); %d failed calls\n",
		r.CreateSeconds, r.ChurnActions, r.ChurnSeconds, r.DeleteSeconds, r.PodsLeft, r.CallErrors)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   SLO\tp99 s\tthreshold s\tverdict\tworst series")
	for _, v := range r.Verdicts() {
		verdict := yesNo(v.Holds)
		if !v.Measured {
			verdict = "no calls"
		}
		fmt.Fprintf(tw, "   %s\t%.3f\t%.0f\t%s\t%s\n", v.SLO, v.P99, v.Threshold, verdict, v.Worst)
	}
	tw.Flush()
	fmt.Fprintf(w, "   pod startup: creationTimestamp → Running p50 %.3fs p90 %.3fs p99 %.3fs max %.3fs (%d pods); first seen → Running p50 %.3fs p99 %.3fs\n",
		r.Startup.P50, r.Startup.P90, r.Startup.P99, r.Startup.Max, r.Startup.Count, r.StartupSeen.P50, r.StartupSeen.P99)
	fmt.Fprintf(w, "   this client's pod lists (pages of 500): cluster p50 %.3fs p99 %.3fs (%d), namespace p50 %.3fs p99 %.3fs (%d), %d failed\n",
		r.ClusterList.P50, r.ClusterList.P99, r.ClusterList.Count, r.NamespaceList.P50, r.NamespaceList.P99, r.NamespaceList.Count, r.ListErrors)
	if r.UnpagedListError != "" {
		fmt.Fprintf(w, "   one unpaged list of all pods FAILED after %.3fs: %.300s\n", r.UnpagedList, r.UnpagedListError)
	} else {
		fmt.Fprintf(w, "   one unpaged list of all pods: %.3fs\n", r.UnpagedList)
	}
	fmt.Fprintln(w, "   slowest API series (p99 relative to the SLO's threshold):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "     source\tverb\tresource\tscope\tcalls\tp50 s\tp99 s\tthreshold s")
	for i, a := range r.APICalls {
		if i == 12 {
			fmt.Fprintf(tw, "     … %d more series\t\t\t\t\t\t\t\n", len(r.APICalls)-i)
			break
		}
		fmt.Fprintf(tw, "     %s\t%s\t%s%s\t%s\t%d\t%.3f\t%.3f\t%.0f\n", a.Source, a.Verb, a.Resource, subSuffix(a.Subresource), a.Scope, a.Count, a.P50, a.P99, a.Threshold)
	}
	tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "   component\tprocs\tpeak RSS MiB\tCPU s (load)\t")
	for _, c := range totals(r) {
		fmt.Fprintf(tw, "   %s\t%d\t%.0f\t%.1f\t\n", c.component, c.procs, mib(c.rssBytes), c.cpu)
	}
	tw.Flush()
	for _, p := range r.Procs {
		if p.Gone {
			fmt.Fprintf(w, "   %s (pid %d) had exited by the end\n", p.Component, p.PID)
		}
	}
	if len(r.StoreBytes) > 0 {
		fmt.Fprintf(w, "   store on disk: %.1f MiB (", mib(uint64(storeTotal(r))))
		for i, b := range r.StoreBytes {
			if i > 0 {
				fmt.Fprint(w, ", ")
			}
			fmt.Fprintf(w, "%.1f", mib(uint64(b)))
		}
		fmt.Fprintln(w, " per data directory)")
	}
	fmt.Fprintf(w, "   all SLOs: %s\n", yesNo(r.Holds()))
}

// compareFiles prints one row per result file.
func compareFiles(w io.Writer, paths []string) error {
	if len(paths) == 0 {
		return fmt.Errorf("%w: -compare wants result files", errUsage)
	}
	var overloads []*OverloadResult
	var steps []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read result: %w", err)
		}
		var o OverloadResult
		if json.Unmarshal(b, &o) == nil && o.Kind == "overload" {
			overloads = append(overloads, &o)
		} else {
			steps = append(steps, p)
		}
	}
	if len(overloads) > 0 {
		if err := compareOverload(w, overloads); err != nil {
			return err
		}
	}
	if len(steps) == 0 {
		return nil
	}
	paths = steps
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tnodes\tpods\tmutating p99 s\tread p99 s\tns list p99 s\tcluster list p99 s\tstartup p99 s\tpeak RSS MiB\tCPU s\tstore MiB\tSLOs\t")
	for _, p := range paths {
		r, err := readJSON(p)
		if err != nil {
			return err
		}
		v := r.Verdicts()
		t := totals(r)
		all := t[len(t)-1]
		verdict := yesNo(r.Holds())
		if r.Error != "" {
			verdict = "BROKE"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.0f\t%.0f\t%.1f\t%s\t\n", r.Label, r.Nodes, r.Pods,
			v[0].P99, v[1].P99, v[2].P99, v[3].P99, v[4].P99, mib(all.rssBytes), all.cpu, mib(uint64(storeTotal(r))), verdict)
	}
	return tw.Flush()
}
