package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/nodeagent/crilog"
	"github.com/kplane/kplane/services/client"
)

// LogServer serves the container logs of the pods of one or more agents in
// this process over HTTP, at the kubelet's path:
//
//	GET /containerLogs/{namespace}/{pod}/{container}?tailLines=N&follow=true&previous=true&timestamps=true&sinceSeconds=S
//
// The body is the container's output (text/plain). previous gives the last
// terminated instance; follow streams until the instance exits or the
// client goes away. 404 when the pod or container is not on these nodes.
//
// It does no authentication of its own: bind it to an address only the API
// service can reach (the API service's pods/log is to call it, with the
// Node's address and status.daemonEndpoints.kubeletEndpoint.Port).
type LogServer struct {
	mu     sync.RWMutex
	agents []*Agent
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

// errNoLog is a pod or container this server does not know.
var errNoLog = errors.New("not found")

// logPath finds the log file of a container instance and whether that
// instance is still running.
func (s *LogServer) logPath(ns, pod, container string, previous bool) (path string, running func() bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	key := client.KeyOf(ns, pod)
	for _, a := range s.agents {
		rec := a.record(key)
		if rec == nil {
			continue
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		c := rec.ctrs[container]
		if c == nil {
			return "", nil, fmt.Errorf("container %q in pod %s: %w", container, key, errNoLog)
		}
		switch {
		case previous && c.lastLog != "":
			return c.lastLog, nil, nil
		case previous:
			return "", nil, fmt.Errorf("previous terminated container %q in pod %s: %w", container, key, errNoLog)
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
		return "", nil, fmt.Errorf("container %q in pod %s is waiting to start: %w", container, key, errNoLog)
	}
	return "", nil, fmt.Errorf("pod %s: %w", key, errNoLog)
}

// ServeHTTP implements http.Handler.
func (s *LogServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
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
		if errors.Is(err, errNoLog) {
			code = http.StatusNotFound
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
