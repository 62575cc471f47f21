// This file holds liveness, readiness and startup probes: their timing and
// thresholds with Kubernetes' defaults, and the exec, httpGet, tcpSocket
// and gRPC actions, with ports named after the container's.

package nodeagent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

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

// runProbe runs one probe action against container spec's instance
// containerID: exec through the runtime; httpGet, tcpSocket and gRPC over
// the network to host (the pod's IP; httpGet and tcpSocket may name
// another), at a port that may be a name of the container's ports; or —
// simulated — as an exec naming the probe, since nothing listens in a
// simulated container.
func runProbe(ctx context.Context, pr prober, simulated bool, spec *corev1.Container, containerID, host string, p *corev1.Probe, timeout time.Duration) (bool, string, error) {
	switch {
	case p.GetExec() != nil:
		return pr.exec(ctx, containerID, p.GetExec().GetCommand(), timeout)
	case p.GetHttpGet() != nil:
		g := p.GetHttpGet()
		if g.GetHost() != "" {
			host = g.GetHost()
		}
		port, err := resolvePort(g.GetPort(), spec)
		if err != nil {
			return false, "", err
		}
		scheme := "http"
		if g.GetScheme() == "HTTPS" {
			scheme = "https"
		}
		url := probeURL(scheme, host, port, g.GetPath())
		if simulated {
			return pr.exec(ctx, containerID, []string{"kplane-probe", "http-get", url}, timeout)
		}
		return httpProbe(ctx, url, g.GetHttpHeaders(), timeout)
	case p.GetTcpSocket() != nil:
		h := host
		if p.GetTcpSocket().GetHost() != "" {
			h = p.GetTcpSocket().GetHost()
		}
		port, err := resolvePort(p.GetTcpSocket().GetPort(), spec)
		if err != nil {
			return false, "", err
		}
		addr := hostPort(h, port)
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
	case p.GetGrpc() != nil:
		g := p.GetGrpc()
		addr := hostPort(host, int(g.GetPort()))
		if simulated {
			return pr.exec(ctx, containerID, []string{"kplane-probe", "grpc", addr, g.GetService()}, timeout)
		}
		return grpcProbe(ctx, addr, g.GetService(), timeout)
	}
	return false, "", fmt.Errorf("probe has no supported action (exec, httpGet, tcpSocket, grpc)")
}

// resolvePort gives the number of a probe's or hook's port: a number as
// it is, a name as the container port of that name (or, failing that, a
// number written as a string), as the kubelet resolves it.
func resolvePort(p interface {
	GetIntVal() int32
	GetStrVal() string
}, spec *corev1.Container) (int, error) {
	port := int(p.GetIntVal())
	if name := p.GetStrVal(); name != "" {
		port = -1
		for _, cp := range spec.GetPorts() {
			if cp.GetName() == name {
				port = int(cp.GetContainerPort())
				break
			}
		}
		if port < 0 {
			n, err := strconv.Atoi(name)
			if err != nil {
				return -1, fmt.Errorf("port %s not found in the container's ports: %w", name, err)
			}
			port = n
		}
	}
	if port <= 0 || port > 65535 {
		return port, fmt.Errorf("invalid port number: %d", port)
	}
	return port, nil
}

// hostPort joins a host and a port number.
func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// probeURL is the URL of an httpGet action: its path (with any query) at
// scheme://host:port; a path that does not parse is taken as a path, as
// the kubelet takes it.
func probeURL(scheme, host string, port int, path string) string {
	u, err := url.Parse(path)
	if err != nil {
		u = &url.URL{Path: path}
	}
	u.Scheme, u.Host = scheme, hostPort(host, port)
	return u.String()
}

// grpcProbe asks the grpc.health.v1 Health service at addr about service
// ("" is the server as a whole); it succeeds when the answer is SERVING.
// The messages are the kubelet's.
func grpcProbe(ctx context.Context, addr, service string, timeout time.Duration) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent("kube-probe/1.33"))
	if err != nil {
		return false, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		switch st, _ := status.FromError(err); st.Code() {
		case codes.Unimplemented:
			return false, fmt.Sprintf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", st.Message()), nil
		case codes.DeadlineExceeded:
			return false, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout), nil
		}
		return false, fmt.Sprintf("error: health rpc probe failed: %+v", err), nil
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return false, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String()), nil
	}
	return true, "", nil
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
