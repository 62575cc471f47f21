// This file holds the state file `kplane up` writes into its data
// directory, from which `kplane down` and `kplane status` find the running
// cluster, and Down itself.

package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StateFile is the name of the state file in the data directory.
const StateFile = "up.json"

// StatePath returns the state file's path in dataDir.
func StatePath(dataDir string) string { return filepath.Join(dataDir, StateFile) }

// State is what a running `kplane up` records about itself.
type State struct {
	// PID is the `kplane up` process; Binary the executable every process
	// runs (checked before signalling a PID, which may have been reused).
	PID     int    `json:"pid"`
	Binary  string `json:"binary"`
	DataDir string `json:"dataDir"`
	// The cluster CA (it verifies the API services' certificates), the
	// store CA (the members'), the store client's and the admin's
	// certificates.
	CAFile        string `json:"caFile"`
	StoreCAFile   string `json:"storeCAFile"`
	StoreCertFile string `json:"storeCertFile"`
	StoreKeyFile  string `json:"storeKeyFile"`
	AdminCertFile string `json:"adminCertFile"`
	AdminKeyFile  string `json:"adminKeyFile"`
	Kubeconfig    string `json:"kubeconfig"`
	// Processes are every started process, store members first.
	Processes []ProcessState `json:"processes"`
}

// ProcessState is one process of the cluster.
type ProcessState struct {
	Component string `json:"component"` // store, apiserver, gateway, scheduler, controllers, nodeagent
	Name      string `json:"name"`
	PID       int    `json:"pid"` // the current incarnation
	// Restarts counts the supervisor's restarts of the process.
	Restarts  int    `json:"restarts"`
	ClientURL string `json:"clientURL,omitempty"` // store members
	PeerURL   string `json:"peerURL,omitempty"`   // store members
	Addr      string `json:"addr,omitempty"`      // what the others serve on
	Identity  string `json:"identity,omitempty"`  // leader-elected replicas' Lease holder identity
	Metrics   string `json:"metrics,omitempty"`   // its Prometheus /metrics URL
	Log       string `json:"log"`
}

// writeState writes the state file (atomically: a temporary file renamed)
// with every process's current PID and restart count.
func (cp *ControlPlane) writeState() error {
	cp.stateMu.Lock()
	defer cp.stateMu.Unlock()
	st := State{
		PID: os.Getpid(), Binary: cp.cfg.Binary, DataDir: cp.cfg.DataDir,
		CAFile:        cp.caFile,
		StoreCAFile:   cp.Store.CAFile,
		StoreCertFile: cp.Store.ClientCertFile, StoreKeyFile: cp.Store.ClientKeyFile,
		AdminCertFile: cp.admin.certFile, AdminKeyFile: cp.admin.keyFile,
		Kubeconfig: cp.Kubeconfig,
	}
	for _, m := range cp.Store.Members {
		st.Processes = append(st.Processes, ProcessState{Component: "store", Name: m.Name, PID: m.PID(), Restarts: m.Restarts(),
			ClientURL: m.ClientURL, PeerURL: m.PeerURL, Metrics: metricsURL(m.MetricsAddr), Log: m.LogPath})
	}
	for _, p := range cp.Procs {
		st.Processes = append(st.Processes, ProcessState{Component: p.Component, Name: p.Name, PID: p.PID(), Restarts: p.Restarts(),
			Addr: p.Addr, Identity: p.Identity, Metrics: metricsURL(p.MetricsAddr), Log: p.LogPath})
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	path := StatePath(cp.cfg.DataDir)
	if err := os.WriteFile(path+".tmp", append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// ErrNotRunning says there is no `kplane up` state in the data directory.
var ErrNotRunning = errors.New("no kplane up is running here")

// ReadState reads the state file of the `kplane up` in dataDir.
func ReadState(dataDir string) (*State, error) {
	b, err := os.ReadFile(StatePath(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w (no %s)", dataDir, ErrNotRunning, StateFile)
	}
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", StatePath(dataDir), err)
	}
	return &st, nil
}

// Alive reports whether pid is a running process of the state's binary
// (so that a PID reused by another program is left alone).
func (st *State) Alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		// No /proc at all: trust the PID. With /proc, the process is a
		// zombie (exited, not yet reaped) or not ours to read.
		_, noProc := os.Stat("/proc/self/exe")
		return noProc != nil
	}
	return strings.TrimSuffix(exe, " (deleted)") == st.Binary
}

// Down stops the `kplane up` recorded in dataDir: SIGTERM to `kplane up`
// (which stops its processes in order), or to each process if `kplane up`
// itself is gone; after grace, SIGKILL to whatever still runs. It returns
// the names of the processes it had to kill.
func Down(ctx context.Context, dataDir string, grace time.Duration) (killed []string, err error) {
	st, err := ReadState(dataDir)
	if err != nil {
		return nil, err
	}
	all := append([]ProcessState{{Component: "up", Name: "kplane up", PID: st.PID}}, st.Processes...)
	if st.Alive(st.PID) {
		_ = syscall.Kill(st.PID, syscall.SIGTERM)
	} else {
		for _, p := range st.Processes {
			if st.Alive(p.PID) {
				_ = syscall.Kill(p.PID, syscall.SIGTERM)
			}
		}
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		running := false
		for _, p := range all {
			if st.Alive(p.PID) {
				running = true
			}
		}
		if !running {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			break wait
		case <-tick.C:
		}
	}
	for _, p := range all {
		if st.Alive(p.PID) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			killed = append(killed, p.Name)
		}
	}
	if err := os.Remove(StatePath(dataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return killed, err
	}
	return killed, nil
}

// metricsURL is the /metrics URL of a process serving it on addr ("" if it
// serves none).
func metricsURL(addr string) string {
	if addr == "" {
		return ""
	}
	return "http://" + addr + "/metrics"
}
