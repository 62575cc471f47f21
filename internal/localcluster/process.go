// This file holds one supervised child process: each incarnation's command,
// log file and exit, and what the supervisor and `kplane status` read of it.

package localcluster

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proc is one child process of the kplane binary, run again (by the
// supervisor, or by Cluster.StartMember) with the same arguments after
// it exits: each run is an incarnation with its own PID, and every
// incarnation appends to the same log. Its methods are safe for concurrent
// use.
type proc struct {
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current incarnation exits
	started  time.Time
	restarts int
}

// run starts a new incarnation of binary with args, its stdout and stderr
// appended to logPath.
func (p *proc) run(binary string, args, env []string, logPath string) error {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	// Its own process group: a Ctrl-C in the terminal reaches `kplane up`
	// only, which stops everything itself, in order. If `kplane up` dies
	// without stopping it, the process gets SIGTERM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.started = cmd, done, time.Now()
	p.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	return nil
}

// current returns the current incarnation's command and exit channel
// (nil before the first start).
func (p *proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// PID returns the current incarnation's process ID (0 before it starts).
func (p *proc) PID() int {
	cmd, _ := p.current()
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	return cmd.Process.Pid
}

// Running reports whether the current incarnation is alive.
func (p *proc) Running() bool {
	_, done := p.current()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Done is closed when the current incarnation exits (nil before the
// first start). A restart makes a new channel.
func (p *proc) Done() <-chan struct{} {
	_, done := p.current()
	return done
}

// Started returns when the current incarnation started.
func (p *proc) Started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// Restarts returns how many times the supervisor has restarted the
// process since `kplane up` started it.
func (p *proc) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// signal sends sig to the current incarnation if it is alive.
func (p *proc) signal(sig syscall.Signal) error {
	cmd, done := p.current()
	if cmd == nil {
		return fmt.Errorf("not started")
	}
	select {
	case <-done:
		return fmt.Errorf("not running")
	default:
	}
	return cmd.Process.Signal(sig)
}

// Pause stops the current incarnation with SIGSTOP: it keeps its sockets
// and connections but answers nothing, as a process the machine stalled.
// Resume continues it with SIGCONT.
func (p *proc) Pause() error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	return nil
}

// Resume continues a paused incarnation.
func (p *proc) Resume() error {
	if err := p.signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	return nil
}

// Kill sends SIGKILL to the current incarnation and waits for it to exit.
// Under a supervisor, the process is then restarted.
func (p *proc) Kill() {
	_, done := p.current()
	if p.signal(syscall.SIGKILL) == nil {
		<-done
	}
}

// stop sends SIGTERM to the current incarnation and waits until it exits,
// killing it if it still runs once deadline is closed (which a group of
// processes stopped together shares).
func (p *proc) stop(deadline <-chan struct{}) {
	_, done := p.current()
	if p.signal(syscall.SIGTERM) != nil {
		return
	}
	select {
	case <-done:
	case <-deadline:
		_ = p.signal(syscall.SIGKILL)
		<-done
	}
}

// exitStatus describes how the current incarnation ended, and whether it
// failed (a non-zero exit or a signal), which is what the supervisor
// restarts; "" while it runs.
func (p *proc) exitStatus() (status string, failed bool) {
	cmd, done := p.current()
	if cmd == nil {
		return "", false
	}
	select {
	case <-done:
	default:
		return "", false
	}
	ps := cmd.ProcessState
	if ps == nil {
		return "exit status unknown", true
	}
	return ps.String(), !ps.Success()
}
