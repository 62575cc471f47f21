// This file measures the processes under test: their CPU time and peak
// memory, sampled from /proc, found from a list of PIDs or from `kplane
// status -o json`; and the store's size on disk.

package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// proc is one process to measure.
type proc struct {
	component string
	pid       int
}

// ProcUsage is one process's resource use.
type ProcUsage struct {
	Component string `json:"component"`
	PID       int    `json:"pid"`
	// PeakRSSBytes is VmHWM: the resident set's high-water mark over the
	// process's life (each step runs a fresh cluster).
	PeakRSSBytes uint64 `json:"peakRSSBytes"`
	// CPUSeconds is user+sys during the load.
	CPUSeconds float64 `json:"cpuSeconds"`
	// Gone: the process had exited by the end of the load.
	Gone bool `json:"gone,omitempty"`
}

// parseProcs parses "component=pid,component=pid".
func parseProcs(s string) ([]proc, error) {
	var ps []proc
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		c, p, ok := strings.Cut(kv, "=")
		pid, err := strconv.Atoi(p)
		if !ok || c == "" || err != nil || pid <= 0 {
			return nil, fmt.Errorf("%w: -procs wants component=pid, got %q", errUsage, kv)
		}
		ps = append(ps, proc{component: c, pid: pid})
	}
	return ps, nil
}

// kplaneComponents are the process groups of `kplane status -o json`.
var kplaneComponents = []string{"store", "apiserver", "gateway", "scheduler", "controllers", "nodeagent"}

// procsFromKplaneStatus reads the processes of `kplane status -o json`.
func procsFromKplaneStatus(path string) ([]proc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kplane status: %w", err)
	}
	var st map[string]json.RawMessage
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("decode kplane status %s: %w", path, err)
	}
	var ps []proc
	for _, c := range kplaneComponents {
		var members []struct {
			PID int `json:"pid"`
		}
		if raw, ok := st[c]; ok {
			if err := json.Unmarshal(raw, &members); err != nil {
				return nil, fmt.Errorf("decode kplane status %s: %s: %w", path, c, err)
			}
		}
		for _, m := range members {
			if m.PID > 0 {
				ps = append(ps, proc{component: c, pid: m.PID})
			}
		}
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("kplane status %s lists no process", path)
	}
	return ps, nil
}

// sample is a process's CPU time and peak RSS at one moment.
type sample struct {
	cpu  float64
	hwm  uint64
	dead bool
}

func sampleProcs(logger *slog.Logger, ps []proc) []sample {
	out := make([]sample, len(ps))
	for i, p := range ps {
		pr, err := procfs.NewProc(p.pid)
		if err == nil {
			var st procfs.ProcStat
			var status procfs.ProcStatus
			if st, err = pr.Stat(); err == nil {
				if status, err = pr.NewStatus(); err == nil {
					out[i] = sample{cpu: st.CPUTime(), hwm: status.VmHWM}
					continue
				}
			}
		}
		logger.Warn("process gone", "component", p.component, "pid", p.pid, "err", err)
		out[i].dead = true
	}
	return out
}

// usage combines the samples at the start and the end of the load; a
// process that died meanwhile keeps its last peak (taken from peaks, the
// highest VmHWM sampled while it lived).
func usage(ps []proc, before, after []sample, peaks []uint64) []ProcUsage {
	out := make([]ProcUsage, len(ps))
	for i, p := range ps {
		u := ProcUsage{Component: p.component, PID: p.pid, PeakRSSBytes: peaks[i], Gone: after[i].dead}
		if !after[i].dead && !before[i].dead {
			u.CPUSeconds = after[i].cpu - before[i].cpu
		}
		out[i] = u
	}
	return out
}

// dirSize is the bytes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}

// apiserverMetricsURLs reads the API services' metrics URLs from `kplane
// status -o json`.
func apiserverMetricsURLs(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kplane status: %w", err)
	}
	var st struct {
		APIServer []struct {
			Metrics string `json:"metrics"`
		} `json:"apiserver"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("decode kplane status %s: %w", path, err)
	}
	var urls []string
	for _, a := range st.APIServer {
		if a.Metrics != "" {
			urls = append(urls, a.Metrics)
		}
	}
	return urls, nil
}
