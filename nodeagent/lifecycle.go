// This file holds containers' lifecycle hooks as the kubelet runs them:
// postStart right after a container starts (a failure kills the
// container), preStop before a container is stopped, within its grace
// period, and the exec, httpGet and sleep handlers both run.

package nodeagent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/nodeagent/cri"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// ReasonPostStartHookError is a container's waiting reason after its
// postStart hook failed and it was killed, until its back-off shows as
// CrashLoopBackOff (the kubelet's error name).
const ReasonPostStartHookError = "PostStartHookError"

// minStopGrace is the least a container is given to stop after its
// preStop hook used up the grace period: the kubelet's minimum shutdown
// window, so that a hook does not turn a stop into a SIGKILL.
const minStopGrace = 2 * time.Second

// hookHTTPMaxBody is how much of an httpGet hook's answer is read (the
// rest is dropped), as the kubelet bounds it.
const hookHTTPMaxBody = 10 << 10

// hookUserAgent is the User-Agent of httpGet hooks, the kubelet's
// "kube-lifecycle/<major>.<minor>" of the Kubernetes version kplane follows.
const hookUserAgent = "kube-lifecycle/1.33"

// errHookSleepCut: a sleep hook ended early because its container was
// being stopped (the kubelet's message).
var errHookSleepCut = errors.New("container terminated before sleep hook finished")

// hookHTTPClient is the client of httpGet hooks: like the kubelet's, it
// does not verify a server's certificate (the pod's own server, reached
// by IP, has none the node could check).
func hookHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
}

// runHook runs one lifecycle handler of container spec (its running
// instance id) of pod: an exec through the runtime, an HTTP GET (to the
// handler's host or podIP, at its port, a name resolved from the
// container's ports), or a sleep (cut short when ctx ends). On failure it
// returns the kubelet's message beside the error. On the built-in runtime
// nothing listens in a container, so an httpGet hook is an ExecSync naming
// it (`kplane-hook http-get URL`) and follows the runtime's exec rules, as
// its httpGet probes do.
func (a *Agent) runHook(ctx context.Context, pod *corev1.Pod, spec *corev1.Container, id, podIP string, h *corev1.LifecycleHandler) (string, error) {
	switch {
	case h.GetExec() != nil:
		cmd := h.GetExec().GetCommand()
		out, err := a.hookExec(ctx, id, cmd)
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				cmd, spec.GetName(), podDesc(pod), err, out), err
		}
		return "", nil
	case h.GetHttpGet() != nil:
		g := h.GetHttpGet()
		err := a.hookHTTP(ctx, pod, spec, id, podIP, g)
		if err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v",
				g.GetPath(), spec.GetName(), podDesc(pod), err), err
		}
		return "", nil
	case h.GetSleep() != nil:
		secs := h.GetSleep().GetSeconds()
		t := time.NewTimer(time.Duration(secs) * time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v",
				secs, spec.GetName(), podDesc(pod), errHookSleepCut), errHookSleepCut
		case <-t.C:
			return "", nil
		}
	}
	// tcpSocket is kept in the API for compatibility only: the kubelet
	// refuses it when it runs, as here.
	err := fmt.Errorf("invalid handler: %v", h)
	return fmt.Sprintf("Cannot run handler: %v", err), err
}

// hookExec runs cmd in the container, with no time limit but ctx's; a
// non-zero exit is an error worded as the kubelet's CRI client words it,
// and out is the command's stdout then stderr.
func (a *Agent) hookExec(ctx context.Context, id string, cmd []string) (string, error) {
	resp, err := a.cfg.Runtime.ExecSync(ctx, id, cmd, 0)
	if err != nil {
		return "", err
	}
	out := string(resp.GetStdout()) + string(resp.GetStderr())
	if resp.GetExitCode() != 0 {
		return out, fmt.Errorf("command '%s' exited with %d: %s", strings.Join(cmd, " "), resp.GetExitCode(), resp.GetStderr())
	}
	return out, nil
}

// hookHTTP makes an httpGet hook's request. Only a request that gets no
// answer fails: the answer's status does not matter, as in the kubelet.
// An HTTPS request answered in plain HTTP is made again in HTTP, with a
// LifecycleHTTPFallback event.
func (a *Agent) hookHTTP(ctx context.Context, pod *corev1.Pod, spec *corev1.Container, id, podIP string, g *corev1.HTTPGetAction) error {
	host := g.GetHost()
	if host == "" {
		host = podIP
	}
	if host == "" {
		return errors.New("failed to find networking container: the pod has no IP")
	}
	port, err := resolvePort(g.GetPort(), spec)
	if err != nil {
		return err
	}
	scheme := strings.ToLower(g.GetScheme())
	if scheme == "" {
		scheme = "http"
	}
	url := probeURL(scheme, host, port, g.GetPath())
	if a.simulated {
		_, err := a.hookExec(ctx, id, []string{"kplane-hook", "http-get", url})
		return err
	}
	hc := hookHTTPClient()
	defer hc.CloseIdleConnections()
	get := func(url string, auth bool) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("User-Agent", hookUserAgent)
		req.Header.Set("Accept", "*/*")
		for _, h := range g.GetHttpHeaders() {
			if strings.EqualFold(h.GetName(), "Host") {
				req.Host = h.GetValue()
				continue
			}
			req.Header.Add(h.GetName(), h.GetValue())
		}
		if !auth {
			req.Header.Del("Authorization")
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, hookHTTPMaxBody))
		return nil
	}
	err = get(url, true)
	if err != nil && scheme == "https" && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		if get("http"+strings.TrimPrefix(url, "https"), false) == nil {
			a.rec.FieldEventf(pod, "", client.EventWarning, "LifecycleHTTPFallback",
				"request to HTTPS lifecycle hook %s got HTTP response, retry with HTTP succeeded", hostPort(host, port))
			return nil
		}
	}
	return err
}

// postStart runs container spec's postStart hook on its new instance id.
// It blocks the pod's sync, as the kubelet's does, until the hook ends or
// the pod is deleted (which cuts it short: the kubelet cancels the sync
// of a pod being terminated). On failure the container is killed (its
// preStop hook runs first) with FailedPostStartHook and Killing events;
// the returned message is the kubelet's.
func (a *Agent) postStart(ctx context.Context, pod *corev1.Pod, rec *podRecord, spec *corev1.Container, fp, id string) (string, error) {
	h := spec.GetLifecycle().GetPostStart()
	if h == nil {
		return "", nil
	}
	hctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.cancelOnDeletion(hctx, cancel, client.Key(pod), pod.GetMetadata().GetUid())
	}()
	msg, err := a.runHook(hctx, pod, spec, id, rec.podIP, h)
	cancel()
	wg.Wait()
	if err == nil {
		return "", nil
	}
	a.log.Info("postStart hook failed", "pod", client.Key(pod), "container", spec.GetName(), "err", err)
	// The event does not carry the message, which may hold secrets.
	a.rec.FieldEventf(pod, fp, client.EventWarning, "FailedPostStartHook", "PostStartHook failed")
	a.rec.FieldEventf(pod, fp, client.EventNormal, "Killing", "FailedPostStartHook")
	a.killContainer(ctx, pod, spec, fp, id, rec.podIP, gracePeriod(pod, nil))
	return msg, err
}

// cancelOnDeletion calls cancel when the informer shows the pod uid
// deleted or being deleted; it returns when ctx ends.
func (a *Agent) cancelOnDeletion(ctx context.Context, cancel context.CancelFunc, key, uid string) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, ok := a.informer.Store().Get(key)
		if !ok || p.GetMetadata().GetUid() != uid || p.GetMetadata().GetDeletionTimestamp() != nil {
			cancel()
			return
		}
	}
}

// killContainer stops container spec's running instance id, as the
// kubelet kills one: its preStop hook first, when it has one and grace is
// not 0, for at most grace (a failure is a FailedPreStopHook event); then
// StopContainer with the grace left, in whole seconds used, and at least
// minStopGrace when a hook ran. spec nil (a container no longer in the
// spec) is stopped with grace. The caller records the Killing event.
func (a *Agent) killContainer(ctx context.Context, pod *corev1.Pod, spec *corev1.Container, fp, id, podIP string, grace time.Duration) {
	if h := spec.GetLifecycle().GetPreStop(); h != nil && grace > 0 {
		start := time.Now()
		hctx, cancel := context.WithTimeout(ctx, grace)
		_, err := a.runHook(hctx, pod, spec, id, podIP, h)
		cut := hctx.Err() != nil
		cancel()
		switch {
		case err != nil && !(cut && h.GetSleep() != nil):
			// A sleep cut by the grace period is not a failure: the
			// kubelet's goes on sleeping, unseen, while the container stops.
			a.log.Info("preStop hook failed", "pod", client.Key(pod), "container", spec.GetName(), "err", err)
			a.rec.FieldEventf(pod, fp, client.EventWarning, "FailedPreStopHook", "PreStopHook failed")
		case cut:
			a.log.Info("preStop hook not completed in the grace period", "pod", client.Key(pod), "container", spec.GetName(), "grace", grace)
		}
		grace = max(grace-time.Since(start).Truncate(time.Second), minStopGrace)
	}
	if err := a.cfg.Runtime.StopContainer(ctx, id, grace); err != nil && !cri.IsNotFound(err) {
		a.log.Warn("stop container failed", "id", id, "err", err)
	}
}

// podDesc is a pod as the kubelet names it in messages: name_namespace(uid).
func podDesc(pod *corev1.Pod) string {
	m := pod.GetMetadata()
	return fmt.Sprintf("%s_%s(%s)", m.GetName(), m.GetNamespace(), m.GetUid())
}
