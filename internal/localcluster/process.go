package localcluster

import (
	"fmt"
	"syscall"
)

// Kill sends SIGKILL to the process and waits for it to exit.
func (p *Process) Kill() {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Restart starts a process that has exited again, with its original
// arguments, appending to its log.
func (cp *ControlPlane) Restart(p *Process) error {
	if p.Running() {
		return fmt.Errorf("%s is still running", p.Name)
	}
	return cp.launch(p)
}
