// This file holds the kubelet's streaming endpoints on the node agent's
// HTTPS server: exec, attach and port-forward into a pod's containers,
// resolved to a CRI Exec, Attach or PortForward whose URL (the runtime's
// streaming server: containerd's, or the built-in runtime's) the request is
// proxied to, as the kubelet does.

package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/apimachinery/pkg/util/proxy"
	apiproxy "k8s.io/apiserver/pkg/util/proxy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubelet/pkg/cri/streaming"
	"k8s.io/kubelet/pkg/cri/streaming/remotecommand"

	"github.com/kplane/kplane/services/client"
)

// streamKinds are the streaming endpoints, by their path's first element.
var streamKinds = map[string]bool{"exec": true, "attach": true, "portForward": true}

// isStreamPath tells whether p is one of the streaming endpoints.
func isStreamPath(p string) bool {
	first, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	return streamKinds[first]
}

// serveStream serves the kubelet's streaming endpoints:
//
//	POST|GET /exec/{namespace}/{pod}/{container}?command=...&stdin=1&stdout=1&stderr=1&tty=1
//	POST|GET /attach/{namespace}/{pod}/{container}?stdin=1&stdout=1&stderr=1&tty=1
//	POST|GET /portForward/{namespace}/{pod}[?port=N] (WebSocket clients name the ports)
//
// The request is checked as the kubelet checks it (400 for bad options,
// 404 "pod does not exist", 500 `container not found ("c")` for a container
// with no running instance), then the runtime is asked for a streaming URL
// and the upgrade is proxied to it. Two WebSocket protocols the runtimes'
// streaming servers do not speak are translated here, as kube-apiserver
// does in front of the kubelet: exec and attach over v5.channel.k8s.io
// (kubectl 1.30+) become a SPDY session with the runtime, and
// port-forward's SPDY-over-WebSocket tunnel (kubectl 1.31+) is unwrapped.
func (s *LogServer) serveStream(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	kind := parts[0]
	want := 4
	if kind == "portForward" {
		want = 3
	}
	if len(parts) != want || parts[1] == "" || parts[2] == "" || (want == 4 && parts[3] == "") {
		http.Error(w, "want /exec|attach/{namespace}/{pod}/{container} or /portForward/{namespace}/{pod}", http.StatusNotFound)
		return
	}
	ns, pod := parts[1], parts[2]
	var opts *remotecommand.Options
	if kind != "portForward" {
		var err error
		if opts, err = remotecommand.NewOptions(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	a, rec := s.podRecord(ns, pod)
	if rec == nil {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return
	}
	ctx := r.Context()
	var target string
	var err error
	switch kind {
	case "exec", "attach":
		id := runningContainer(rec, parts[3])
		if id == "" {
			http.Error(w, fmt.Sprintf("container not found (%q)", parts[3]), http.StatusInternalServerError)
			return
		}
		target, err = a.streamURL(ctx, a.cfg.Runtime.Runtime(), kind, id, r.URL.Query()["command"], opts)
	case "portForward":
		rec.mu.Lock()
		sandbox := rec.sandboxID
		rec.mu.Unlock()
		if sandbox == "" {
			http.Error(w, fmt.Sprintf("pod %q has no sandbox", pod), http.StatusInternalServerError)
			return
		}
		var resp *runtimeapi.PortForwardResponse
		if resp, err = a.cfg.Runtime.Runtime().PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: sandbox}); err == nil {
			target = resp.GetUrl()
		}
	}
	if err != nil {
		_ = streaming.WriteError(err, w)
		return
	}
	loc, err := url.Parse(target)
	if err != nil {
		http.Error(w, fmt.Sprintf("the runtime's streaming URL %q: %v", target, err), http.StatusInternalServerError)
		return
	}
	// The runtime's streaming servers are on loopback; no proxy between.
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	switch {
	case kind != "portForward" && wsstream.IsWebSocketRequestWithStreamCloseProtocol(r):
		apiproxy.NewStreamTranslatorHandler(loc, transport, 0, apiproxy.Options{
			Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, Tty: opts.TTY,
		}).ServeHTTP(w, r)
	case kind == "portForward" && wsstream.IsWebSocketRequestWithTunnelingProtocol(r):
		apiproxy.NewTunnelingHandler(upgradeProxy(loc, transport)).ServeHTTP(w, r)
	default:
		upgradeProxy(loc, transport).ServeHTTP(w, r)
	}
}

// upgradeProxy proxies an upgrade request to the runtime's streaming URL
// loc (its token path replaces the request's), as the kubelet does.
func upgradeProxy(loc *url.URL, transport http.RoundTripper) http.Handler {
	return proxy.NewUpgradeAwareHandler(loc, transport, false, true, streamErrorResponder{})
}

// streamErrorResponder answers a failed proxy with a 500 and the error.
type streamErrorResponder struct{}

func (streamErrorResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// streamURL asks the runtime for the URL of an exec or attach session.
func (a *Agent) streamURL(ctx context.Context, rt runtimeapi.RuntimeServiceClient, kind, containerID string, cmd []string, o *remotecommand.Options) (string, error) {
	if kind == "attach" {
		resp, err := rt.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: containerID, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr, Tty: o.TTY})
		if err != nil {
			return "", err
		}
		return resp.GetUrl(), nil
	}
	if len(cmd) == 0 {
		return "", errors.New("no command given")
	}
	resp, err := rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: containerID, Cmd: cmd, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr, Tty: o.TTY})
	if err != nil {
		return "", err
	}
	return resp.GetUrl(), nil
}

// podRecord finds the agent running ns/pod and its record.
func (s *LogServer) podRecord(ns, pod string) (*Agent, *podRecord) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	key := client.KeyOf(ns, pod)
	for _, a := range s.agents {
		if rec := a.record(key); rec != nil {
			return a, rec
		}
	}
	return nil, nil
}

// runningContainer is the ID of the running instance of container in rec,
// "" if there is none.
func runningContainer(rec *podRecord, container string) string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	c := rec.ctrs[container]
	if c == nil || c.id == "" || c.exited() {
		return ""
	}
	return c.id
}
