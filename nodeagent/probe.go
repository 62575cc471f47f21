// This file holds liveness, readiness and startup probes: their timing and
// thresholds with Kubernetes' defaults, and the exec, httpGet and tcpSocket
// actions.

package nodeagent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// Probe kinds.
const (
	probeStartup   = "Startup"
	probeReadiness = "Readiness"
	probeLiveness  = "Liveness"
)

// prober runs one probe action; ok false with a message when it fails.
type prober interface {
	exec(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (ok bool, msg string, err error)
}

// probeState counts consecutive results of one probe of one container.
type probeState struct {
	next               time.Time // when it is due
	successes, fails   int32
	result, hasResults bool
}

// probeStates are a container's three probes; the zero value is "nothing
// probed yet".
type probeStates struct {
	startup, readiness, liveness   probeState
	hasStartup, hasReadiness       bool
	startupPassed, livenessFailure bool
}

// started: the startup probe passed, or there is none.
func (p *probeStates) started() bool { return !p.hasStartup || p.startupPassed }

// ready: started and the readiness probe passed, or there is none.
func (p *probeStates) ready() bool {
	return p.started() && (!p.hasReadiness || (p.readiness.hasResults && p.readiness.result))
}

// probeDefaults fills Kubernetes' defaults.
func probeTiming(p *corev1.Probe) (initial, period, timeout time.Duration, success, failure int32) {
	period, timeout, success, failure = 10*time.Second, time.Second, 1, 3
	if p.GetPeriodSeconds() > 0 {
		period = time.Duration(p.GetPeriodSeconds()) * time.Second
	}
	if p.GetTimeoutSeconds() > 0 {
		timeout = time.Duration(p.GetTimeoutSeconds()) * time.Second
	}
	if p.GetSuccessThreshold() > 0 {
		success = p.GetSuccessThreshold()
	}
	if p.GetFailureThreshold() > 0 {
		failure = p.GetFailureThreshold()
	}
	return time.Duration(p.GetInitialDelaySeconds()) * time.Second, period, timeout, success, failure
}

// record applies one result to st with the probe's thresholds and reports
// whether the probe's overall result changed.
func (st *probeState) record(ok bool, success, failure int32) bool {
	if ok {
		st.successes++
		st.fails = 0
	} else {
		st.fails++
		st.successes = 0
	}
	old, had := st.result, st.hasResults
	switch {
	case ok && st.successes >= success:
		st.result, st.hasResults = true, true
	case !ok && st.fails >= failure:
		st.result, st.hasResults = false, true
	}
	return st.result != old || st.hasResults != had
}

// runProbe runs one probe action against a container: exec through the
// runtime; httpGet and tcpSocket over the network to host, or — simulated —
// as an exec naming the probe, since nothing listens in a simulated
// container.
func runProbe(ctx context.Context, pr prober, simulated bool, containerID, host string, p *corev1.Probe, timeout time.Duration) (bool, string, error) {
	switch {
	case p.GetExec() != nil:
		return pr.exec(ctx, containerID, p.GetExec().GetCommand(), timeout)
	case p.GetHttpGet() != nil:
		g := p.GetHttpGet()
		if g.GetHost() != "" {
			host = g.GetHost()
		}
		scheme := "http"
		if g.GetScheme() == "HTTPS" {
			scheme = "https"
		}
		url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, portOf(g.GetPort())), g.GetPath())
		if simulated {
			return pr.exec(ctx, containerID, []string{"kplane-probe", "http-get", url}, timeout)
		}
		return httpProbe(ctx, url, g.GetHttpHeaders(), timeout)
	case p.GetTcpSocket() != nil:
		h := host
		if p.GetTcpSocket().GetHost() != "" {
			h = p.GetTcpSocket().GetHost()
		}
		addr := net.JoinHostPort(h, portOf(p.GetTcpSocket().GetPort()))
		if simulated {
			return pr.exec(ctx, containerID, []string{"kplane-probe", "tcp-socket", addr}, timeout)
		}
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return false, err.Error(), nil
		}
		c.Close()
		return true, "", nil
	}
	return false, "", fmt.Errorf("probe has no supported action (exec, httpGet, tcpSocket)")
}

// portOf gives a probe's port (a named port is not resolved: it is used
// as given, and fails to dial).
func portOf(p interface {
	GetIntVal() int32
	GetStrVal() string
}) string {
	if p.GetStrVal() != "" {
		return p.GetStrVal()
	}
	return strconv.Itoa(int(p.GetIntVal()))
}

// httpProbe succeeds on a status from 200 to 399, as the kubelet's.
func httpProbe(ctx context.Context, url string, headers []*corev1.HTTPHeader, timeout time.Duration) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, "", err
	}
	req.Header.Set("User-Agent", "kplane-probe/1")
	for _, h := range headers {
		req.Header.Add(h.GetName(), h.GetValue())
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error(), nil
	}
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 400 {
		return true, "", nil
	}
	return false, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode), nil
}
