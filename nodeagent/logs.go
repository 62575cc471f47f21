// This file holds the log server: container logs at the kubelet's path
// (tail, follow, previous, timestamps, since), refused with the kubelet's
// messages when there is no log to give, and limited to named client
// certificates.

package nodeagent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/nodeagent/crilog"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// LogServer serves the container logs of the pods of one or more agents in
// this process over HTTP, and the kubelet's streaming endpoints (exec,
// attach, portForward: see streaming.go). Logs are at the kubelet's path:
//
//	GET /containerLogs/{namespace}/{pod}/{container}?tailLines=N&follow=true&previous=true&timestamps=true&sinceSeconds=S
//
// The body is the container's output (text/plain). previous gives the last
// terminated instance; follow streams until the instance exits or the
// client goes away. Errors are the kubelet's: 404 for a pod or container
// these nodes do not have, 400 with the kubelet's message for a container
// that has no log yet (`container "web" in pod "p" is waiting to start:
// ContainerCreating`) or no previous instance; the API service passes
// them on.
//
// After RequireClientCert only the named users may read logs: served over
// TLS (LogServerTLS), the client's verified certificate must name one of
// them (the API service's kubelet client); others get 401 or 403. Without
// it the handler serves anyone, for a listener only the API service can
// reach.
type LogServer struct {
	mu     sync.RWMutex
	agents []*Agent
	// users, if set, are the certificate CNs allowed to read logs.
	users map[string]bool
	// poll is how often a follower checks whether its container exited.
	poll time.Duration
}

// NewLogServer serves the logs of agents (more can be added with Add).
func NewLogServer(agents ...*Agent) *LogServer {
	return &LogServer{agents: agents, poll: 500 * time.Millisecond}
}

// Add serves a's pods too.
func (s *LogServer) Add(a *Agent) {
	s.mu.Lock()
	s.agents = append(s.agents, a)
	s.mu.Unlock()
}

// RequireClientCert limits the server to clients whose verified TLS
// certificate has one of users as its CN. Call it before serving.
func (s *LogServer) RequireClientCert(users ...string) *LogServer {
	s.users = map[string]bool{}
	for _, u := range users {
		s.users[u] = true
	}
	return s
}

// LogServerTLS is the TLS configuration of a LogServer: it serves cert and
// verifies the client certificates that clientCAs signed. A nil clientCAs
// verifies none (never the system's roots), so RequireClientCert then
// refuses everyone.
func LogServerTLS(cert tls.Certificate, clientCAs *x509.CertPool) *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if clientCAs == nil {
		auth = tls.NoClientCert
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    clientCAs,
		ClientAuth:   auth,
		MinVersion:   tls.VersionTLS12,
	}
}

// logError is an answer other than a log: an HTTP status and the
// kubelet's message.
type logError struct {
	code int
	msg  string
}

func (e *logError) Error() string { return e.msg }

func badLog(format string, args ...any) *logError {
	return &logError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func noLog(format string, args ...any) *logError {
	return &logError{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

// logPath finds the log file of a container instance and whether that
// instance is still running, with the kubelet's rules: the current
// instance, else the last terminated one; previous asks for the last
// terminated one only.
func (s *LogServer) logPath(ns, pod, container string, previous bool) (path string, running func() bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	key := client.KeyOf(ns, pod)
	for _, a := range s.agents {
		rec := a.record(key)
		var p *corev1.Pod
		if a.informer != nil {
			p, _ = a.informer.Store().Get(key)
		}
		if rec == nil && p == nil {
			continue
		}
		if p != nil && containerSpec(p.GetSpec(), container) == nil {
			return "", nil, noLog("container %q not found in pod %q", container, pod)
		}
		if rec == nil {
			// Bound to this node, not synced yet.
			if err := statusLogError(p, container, previous); err != nil {
				return "", nil, err
			}
			return "", nil, waitingError(container, pod, ReasonContainerCreating)
		}
		if !lockWithin(&rec.mu, time.Second) {
			// A sync holds the record (a long image pull, a graceful
			// stop): answer from the pod's status as this agent last
			// wrote it, as the kubelet does, when it says there is no
			// log; otherwise wait for the record.
			if p != nil {
				if err := statusLogError(p, container, previous); err != nil {
					return "", nil, err
				}
			}
			rec.mu.Lock()
		}
		defer rec.mu.Unlock()
		c := rec.ctrs[container]
		if c == nil {
			return "", nil, noLog("container %q not found in pod %q", container, pod)
		}
		switch {
		case previous && c.lastLog != "":
			return c.lastLog, nil, nil
		case previous:
			return "", nil, badLog("previous terminated container %q in pod %q not found", container, pod)
		case c.logPath != "":
			id := c.id
			return c.logPath, func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				return c.id == id && !c.exited()
			}, nil
		case c.lastLog != "":
			return c.lastLog, nil, nil
		}
		return "", nil, waitingError(container, pod, waitingReason(rec, c))
	}
	return "", nil, noLog("pod %q does not exist", pod)
}

// lockWithin locks mu if it can within d (most syncs hold a record for
// milliseconds; a CRI call such as an image pull may hold it for long).
func lockWithin(mu *sync.Mutex, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if mu.TryLock() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitingError is the kubelet's answer for a container with no log yet.
func waitingError(container, pod, reason string) error {
	switch reason {
	case ReasonErrImagePull:
		return badLog("container %q in pod %q is waiting to start: image can't be pulled", container, pod)
	case ReasonImagePullBackOff:
		return badLog("container %q in pod %q is waiting to start: trying and failing to pull image", container, pod)
	}
	return badLog("container %q in pod %q is waiting to start: %s", container, pod, reason)
}

// statusLogError answers from p's status when it shows that container has
// no log to serve: waiting with no terminated instance, or previous asked
// for and none terminated. nil means look at the record.
func statusLogError(p *corev1.Pod, container string, previous bool) error {
	var cs *corev1.ContainerStatus
	isInit := false
	for _, s := range p.GetStatus().GetContainerStatuses() {
		if s.GetName() == container {
			cs = s
		}
	}
	for _, s := range p.GetStatus().GetInitContainerStatuses() {
		if s.GetName() == container {
			cs, isInit = s, true
		}
	}
	name := p.GetMetadata().GetName()
	if cs == nil {
		// No status written yet: the sync has not got that far.
		if previous {
			return badLog("previous terminated container %q in pod %q not found", container, name)
		}
		for _, ic := range p.GetSpec().GetInitContainers() {
			if ic.GetName() == container {
				isInit = true
			}
		}
		if !isInit && len(p.GetSpec().GetInitContainers()) > 0 {
			return waitingError(container, name, ReasonPodInitializing)
		}
		return waitingError(container, name, ReasonContainerCreating)
	}
	hasLast := cs.GetLastTerminationState().GetTerminated() != nil
	switch {
	case previous && !hasLast:
		return badLog("previous terminated container %q in pod %q not found", container, name)
	case previous, hasLast, cs.GetState().GetRunning() != nil, cs.GetState().GetTerminated() != nil:
		return nil
	case cs.GetState().GetWaiting() != nil:
		return waitingError(container, name, cs.GetState().GetWaiting().GetReason())
	}
	return nil
}

// waitingReason is why c has not started, as its status says it; rec is
// locked.
func waitingReason(rec *podRecord, c *ctrState) string {
	if c.waiting != "" {
		return c.waiting
	}
	if !c.init {
		for _, o := range rec.ctrs {
			if o.init && !o.succeeded() {
				return ReasonPodInitializing
			}
		}
	}
	return ReasonContainerCreating
}

// authorized checks the client's certificate when RequireClientCert was
// called; false means it answered.
func (s *LogServer) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.users == nil {
		return true
	}
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return false
	}
	user := r.TLS.VerifiedChains[0][0].Subject.CommonName
	if !s.users[user] {
		verb, sub := "get", "log"
		if isStreamPath(r.URL.Path) {
			verb, sub = "create", "proxy"
		}
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=%s)", user, verb, sub), http.StatusForbidden)
		return false
	}
	return true
}

// ServeHTTP implements http.Handler.
func (s *LogServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	if isStreamPath(r.URL.Path) {
		s.serveStream(w, r)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == "/stats/summary" {
		s.serveSummary(w, r)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/containerLogs/"), "/")
	if !strings.HasPrefix(r.URL.Path, "/containerLogs/") || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		http.Error(w, "want /containerLogs/{namespace}/{pod}/{container}", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	var opts crilog.ReadOptions
	var err error
	if v := q.Get("tailLines"); v != "" {
		if opts.Tail, err = strconv.Atoi(v); err != nil || opts.Tail < 0 {
			http.Error(w, "bad tailLines", http.StatusBadRequest)
			return
		}
		if opts.Tail == 0 {
			return // no lines asked for
		}
	}
	if v := q.Get("sinceSeconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			http.Error(w, "bad sinceSeconds", http.StatusBadRequest)
			return
		}
		opts.Since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	opts.Follow = q.Get("follow") == "true"
	opts.Timestamps = q.Get("timestamps") == "true"
	previous := q.Get("previous") == "true"
	path, running, err := s.logPath(parts[0], parts[1], parts[2], previous)
	if err != nil {
		code := http.StatusInternalServerError
		var le *logError
		if errors.As(err, &le) {
			code = le.code
		}
		http.Error(w, err.Error(), code)
		return
	}
	if running == nil {
		opts.Follow = false
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	ctx := r.Context()
	var out interface{ Write([]byte) (int, error) } = w
	if opts.Follow {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			t := time.NewTicker(s.poll)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if !running() {
					// One more poll of the file, then stop.
					time.Sleep(2 * s.poll)
					cancel()
					return
				}
			}
		}()
		if f, ok := w.(http.Flusher); ok {
			out = flushWriter{w, f}
		}
	}
	if err := crilog.Read(ctx, path, opts, out); err != nil && ctx.Err() == nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// flushWriter flushes after every write, for followers.
type flushWriter struct {
	w http.ResponseWriter
	f http.Flusher
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	f.f.Flush()
	return n, err
}
