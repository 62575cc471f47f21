// This file holds when the pod's probes run and what their results do:
// an exec through the runtime, the probes due at each sync (a failed
// liveness or startup probe stops the container), and the grace period a
// pod or a probe gives its containers.

package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// exec runs a probe command through the runtime.
func (a *Agent) exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (bool, string, error) {
	resp, err := a.cfg.Runtime.ExecSync(ctx, id, cmd, timeout)
	if err != nil {
		return false, "", err
	}
	if resp.GetExitCode() != 0 {
		out := strings.TrimSpace(string(resp.GetStdout()) + string(resp.GetStderr()))
		return false, fmt.Sprintf("command %q exited with %d: %s", strings.Join(cmd, " "), resp.GetExitCode(), out), nil
	}
	return true, "", nil
}

// runProbes runs the probes that are due on running containers and
// returns when the next one is due. A failed liveness (or startup) probe
// stops the container; the restart policy then restarts it.
func (a *Agent) runProbes(ctx context.Context, pod *corev1.Pod, rec *podRecord, now time.Time) time.Duration {
	ctx, span := a.tracer.Start(ctx, "probes")
	defer span.End()
	var wait time.Duration
	soonest := func(t time.Time) {
		if d := t.Sub(now); d > 0 && (wait == 0 || d < wait) {
			wait = d
		}
	}
	host := rec.podIP
	if host == "" {
		host = a.cfg.HostIP
	}
	for _, cs := range pod.GetSpec().GetContainers() {
		c := rec.ctrs[cs.GetName()]
		if !c.running() {
			continue
		}
		started := time.Unix(0, c.status.GetStartedAt())
		for _, k := range []struct {
			kind string
			p    *corev1.Probe
			st   *probeState
		}{
			{probeStartup, cs.GetStartupProbe(), &c.probes.startup},
			{probeLiveness, cs.GetLivenessProbe(), &c.probes.liveness},
			{probeReadiness, cs.GetReadinessProbe(), &c.probes.readiness},
		} {
			if k.p == nil || (k.kind == probeStartup && c.probes.startupPassed) || (k.kind != probeStartup && !c.probes.started()) {
				continue
			}
			initial, period, timeout, success, failure := probeTiming(k.p)
			if k.st.next.IsZero() {
				k.st.next = started.Add(initial)
			}
			if now.Before(k.st.next) {
				soonest(k.st.next)
				continue
			}
			ok, msg, err := runProbe(ctx, a, a.simulated, cs, c.id, host, k.p, timeout)
			if err != nil {
				ok, msg = false, err.Error()
			}
			k.st.next = now.Add(period)
			soonest(k.st.next)
			if !ok {
				a.rec.FieldEventf(pod, fieldPath(pod.GetSpec(), c), client.EventWarning, "Unhealthy", "%s probe failed: %s", k.kind, msg)
			}
			k.st.record(ok, success, failure)
			switch {
			case k.kind == probeStartup && k.st.hasResults && k.st.result:
				c.probes.startupPassed = true
				soonest(now) // the others may run now
			case (k.kind == probeStartup || k.kind == probeLiveness) && k.st.hasResults && !k.st.result:
				a.rec.FieldEventf(pod, fieldPath(pod.GetSpec(), c), client.EventNormal, "Killing",
					"Container %s failed %s probe, will be restarted", c.name, strings.ToLower(k.kind))
				// Its preStop hook runs first, within the grace period.
				a.killContainer(ctx, pod, cs, fieldPath(pod.GetSpec(), c), c.id, host, gracePeriod(pod, k.p))
				a.refresh(ctx, c, pod.GetSpec().GetRestartPolicy())
			}
			if !c.running() {
				break
			}
		}
	}
	return wait
}

// gracePeriod is the termination grace period for a pod (or a probe's own).
func gracePeriod(pod *corev1.Pod, p *corev1.Probe) time.Duration {
	if p != nil && p.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
	}
	if g := pod.GetMetadata().DeletionGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	if g := pod.GetSpec().TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}
