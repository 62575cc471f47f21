// This file holds the tests of the comparison: result files of different
// workloads side by side, and files written before workloads existed read
// as Deployments timed to all Running.

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestCompareFilesWorkloads(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.json")
	jobs := filepath.Join(dir, "jobs.json")
	// A file from before workloads: no workload, no doneSeconds.
	if err := writeJSON(old, &Result{Label: "k8s", Replicas: 100, RunningSeconds: 20, CreateRate: 5, Throughput: 5}); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(jobs, &Result{Label: "kplane", Workload: workloadJobs, Replicas: 100, DoneSeconds: 5, RunningSeconds: 4, CreateRate: 25, Throughput: 25}); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := compareFiles(&b, []string{jobs, old}); err != nil {
		t.Fatal(err)
	}
	// Rows as their fields: label, workload, replicas, done s, ...
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	if len(rows) != 4 {
		t.Fatalf("want a header, two rows and a ratio row, got:\n%s", b.String())
	}
	for i, want := range [][]string{{"kplane", "jobs", "100", "5.00"}, {"k8s", "deployment", "100", "20.00"}, {"kplane/k8s", "0.25x"}} {
		if got := rows[i+1][:len(want)]; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("row %d begins %q, want %q", i+1, got, want)
		}
	}
	if err := compareFiles(&b, []string{jobs}); err == nil {
		t.Error("comparing one file: no error")
	}
}
