// This file holds the scoreboard itself: the counts and the Markdown page
// (CONFORMANCE.md) written from the runs' outcomes.
package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// pageInfo describes what every run of the page shares.
type pageInfo struct {
	Date    string
	Machine string
	Commit  string
	Focus   string // Ginkgo --focus of the runs
	Skip    string // Ginkgo --skip of the runs, if any
	Procs   int
	Timeout string // the per-test timeout
	Version string // Kubernetes version of e2e.test
	Nodes   int    // simulated nodes of kplane up
	Notes   []string
}

// run is one pass over the selected tests: one column of the page.
type run struct {
	Label   string
	Wall    string
	Results map[string]outcome
}

// row is one test on the scoreboard: its result in each run and the first
// failure line of the last run that has a result for it (none if that run
// passed it).
type row struct {
	Name    string
	Results []string
	Detail  string
}

// counts are one run's summary numbers. Failed counts every outcome that
// is not a pass or a skip (failed, timeout, interrupted, panicked, error).
type counts struct {
	Selected, Passed, Failed, Skipped, ListedApart, NotRun int
	// Common is the failure line most failed tests share, and how many.
	Common      string
	CommonCount int
}

const (
	resultListedApart = "listed apart"
	resultNotRun      = "not run"
)

// scoreboard puts every selected test (those of the dry run) in a row with
// its outcome in each run: "listed apart" when the list of tests that are
// not run names it, "not run" when a run has no result for it (the run was
// cut short). Rows are sorted by name so that two pages diff line by line.
func scoreboard(selected []string, runs []run, apart listedApart) ([]row, []counts) {
	cs := make([]counts, len(runs))
	failures := make([]map[string]int, len(runs))
	for i := range runs {
		cs[i].Selected = len(selected)
		failures[i] = map[string]int{}
	}
	rows := make([]row, 0, len(selected))
	for _, name := range selected {
		r := row{Name: name, Results: make([]string, len(runs))}
		for i, rn := range runs {
			r.Results[i] = classify(name, rn, apart, &cs[i], failures[i], &r.Detail)
		}
		rows = append(rows, r)
	}
	for i := range cs {
		cs[i].Common, cs[i].CommonCount = mostCommon(failures[i])
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(a.Name, b.Name) })
	return rows, cs
}

// classify returns the result of test name in run rn, counts it, and sets
// detail to its failure line (empty for a pass), so that the last run with
// a result for the test decides the row's line.
func classify(name string, rn run, apart listedApart, c *counts, failures map[string]int, detail *string) string {
	if reason, ok := apart[name]; ok {
		c.ListedApart++
		*detail = reason
		return resultListedApart
	}
	o, ok := rn.Results[name]
	if !ok {
		c.NotRun++
		return resultNotRun
	}
	switch o.Status {
	case "passed":
		c.Passed++
		*detail = ""
	case "skipped", "pending":
		c.Skipped++
		*detail = o.Detail
	default:
		c.Failed++
		failures[failureKey(o.Detail)]++
		*detail = o.Detail
	}
	return o.Status
}

// generatedName matches the random suffix of a test namespace's name
// ("discovery-8729"), which would make the same failure differ from test
// to test.
var generatedName = regexp.MustCompile(`\b([a-z][a-z0-9.-]*?)-[0-9]+\b`)

// failureKey is a failure line with test namespaces' random suffixes
// replaced by N, for counting failures that are the same.
func failureKey(detail string) string {
	return generatedName.ReplaceAllString(detail, "$1-N")
}

// mostCommon returns the failure line shared by the most tests (the
// smallest such line on a tie, so that the page is stable).
func mostCommon(failures map[string]int) (string, int) {
	best, n := "", 0
	for _, d := range slices.Sorted(maps.Keys(failures)) {
		if failures[d] > n {
			best, n = d, failures[d]
		}
	}
	return best, n
}

// maxDetail bounds the failure line shown in a row; the full failure is in
// the run's JUnit report and log.
const maxDetail = 300

// writeMarkdown writes CONFORMANCE.md: what the page is and how to redo it,
// the summary table, the rows of the tests that ran, then the tests listed
// apart.
func writeMarkdown(w io.Writer, info pageInfo, runs []run, rows []row, cs []counts) error {
	var b strings.Builder
	writeIntro(&b, info)
	fmt.Fprintf(&b, "## Summary\n\n")
	fmt.Fprintf(&b, "| run | selected | passed | failed | skipped | listed apart | not run | date | machine | commit | wall time |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---|---|---|---|\n")
	for i, rn := range runs {
		c := cs[i]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %s | %s | %s | %s |\n",
			cell(rn.Label), c.Selected, c.Passed, c.Failed, c.Skipped, c.ListedApart, c.NotRun,
			cell(info.Date), cell(info.Machine), cell(info.Commit), cell(rn.Wall))
	}
	fmt.Fprintf(&b, "\nThe most common failure of each run:\n\n")
	for i, rn := range runs {
		if cs[i].CommonCount > 0 {
			fmt.Fprintf(&b, "- %s: %d of %d failures: `%s`\n", rn.Label, cs[i].CommonCount, cs[i].Failed, clip(cs[i].Common))
		}
	}
	fmt.Fprintf(&b, "\n## Tests\n\n| test |")
	for _, rn := range runs {
		fmt.Fprintf(&b, " %s |", cell(rn.Label))
	}
	fmt.Fprintf(&b, " first failure line |\n|---|%s---|\n", strings.Repeat("---|", len(runs)))
	for _, r := range rows {
		if slices.Contains(r.Results, resultListedApart) {
			continue
		}
		fmt.Fprintf(&b, "| %s |", cell(r.Name))
		for _, res := range r.Results {
			fmt.Fprintf(&b, " %s |", res)
		}
		fmt.Fprintf(&b, " %s |\n", cell(clip(r.Detail)))
	}
	writeListedApart(&b, rows)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write scoreboard: %w", err)
	}
	return nil
}

func writeIntro(b *strings.Builder, info pageInfo) {
	fmt.Fprintf(b, "# Conformance scoreboard\n\n")
	fmt.Fprintf(b, "Kubernetes' own conformance tests (the `[Conformance]` specs of `e2e.test` %s, the suite Kubernetes certifies clusters with) run against `kplane up` (%d simulated nodes, built-in runtime). ", info.Version, info.Nodes)
	fmt.Fprintf(b, "Written by `scripts/conformance.sh`; do not edit by hand, run it again. ")
	fmt.Fprintf(b, "Ginkgo focus `%s`", info.Focus)
	if info.Skip != "" {
		fmt.Fprintf(b, ", skip `%s`", info.Skip)
	}
	fmt.Fprintf(b, ". Each test is its own Ginkgo run of e2e.test, %d at a time, stopped after %s; `[Serial]` tests run afterwards, one at a time. ", info.Procs, info.Timeout)
	fmt.Fprintf(b, "Tests in `conformance/listed-apart.txt` are listed at the end with the reason and left out of the counts (the script does not run them); a test is \"not run\" in a run that reached its time budget (`--max-time`) before starting it.\n\n")
	fmt.Fprintf(b, "Runs: **kplane up** is the cluster as it starts. e2e.test's suite setup reads the ClusterIP of `default/kubernetes`, the Service kube-apiserver keeps for itself, and each test waits for the `default` ServiceAccount of its namespace; kplane keeps that Service (since issue 24) and its controllers create that ServiceAccount (since the ServiceAccount controller), as Kubernetes' do. ")
	fmt.Fprintf(b, "**kplane up, setup assisted** is the same cluster after the script created that Service if it was missing (port 443, no selector; kplane binaries from before issue 24), with e2e.test told not to wait for the `default` ServiceAccount of each test namespace (`--e2e-verify-service-account=false`; kplane binaries from before the ServiceAccount controller do not create it, and the framework otherwise gives up after 2 minutes in every test's BeforeEach). `conformance/expected-passes.txt` (the CI tier, `scripts/conformance.sh --ci`) comes from this run.\n\n")
	fmt.Fprintf(b, "**Kubernetes %s + KWOK** (`RUNS=k8s`) is the same tests against etcd, kube-apiserver, kube-controller-manager and kube-scheduler %s with KWOK simulating the same number of nodes: the reference. Nothing runs in KWOK's pods either, so a test that needs a real container fails there too.\n\n", info.Version, info.Version)
	for _, n := range info.Notes {
		fmt.Fprintf(b, "%s\n\n", n)
	}
	fmt.Fprintf(b, "%s\n\n", "Kubernetes' own components (kube-scheduler, KWOK, kube-controller-manager, Helm, and kube-apiserver on kplane's store) run unchanged against kplane by `scripts/components.sh`: one pass/fail row each in [COMPONENTS.md](COMPONENTS.md).")
}

func writeListedApart(b *strings.Builder, rows []row) {
	header := false
	for _, r := range rows {
		if !slices.Contains(r.Results, resultListedApart) {
			continue
		}
		if !header {
			fmt.Fprintf(b, "\n## Listed apart (not run)\n\n| test | why |\n|---|---|\n")
			header = true
		}
		fmt.Fprintf(b, "| %s | %s |\n", cell(r.Name), cell(r.Detail))
	}
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

func clip(s string) string {
	if len(s) <= maxDetail {
		return s
	}
	return strings.ToValidUTF8(s[:maxDetail], "") + "…"
}
