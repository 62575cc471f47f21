// Package jaeger starts a local Jaeger v2 (built by scripts/install-jaeger.sh)
// bound to loopback only, and reads traces back through its query API. The
// tracing tests, `kplane up --jaeger` and `kplane trace` use it.
//
// The Jaeger built from its Go module serves the query API
// (/api/traces/<id>, /api/services) but no web UI; the docker-compose file
// uses the official image, which has the UI.
package jaeger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/kplane/kplane/internal/freeport"
)

// Version is the Jaeger release scripts/install-jaeger.sh builds.
const Version = "v1.76.0"

// Binary returns the path of the jaeger binary: $KPLANE_JAEGER if set, else
// where scripts/install-jaeger.sh puts it under the cache directory
// ($KPLANE_CACHE_DIR, else $XDG_CACHE_HOME/kplane or ~/.cache/kplane), else
// jaeger on the PATH. It returns an error saying how to build it when there
// is none.
func Binary() (string, error) {
	if p := os.Getenv("KPLANE_JAEGER"); p != "" {
		return p, nil
	}
	cache := os.Getenv("KPLANE_CACHE_DIR")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err == nil {
			cache = filepath.Join(base, "kplane")
		}
	}
	if cache != "" {
		p := filepath.Join(cache, "jaeger-"+Version, "bin", "jaeger")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("jaeger"); err == nil {
		return p, nil
	}
	return "", errors.New("jaeger: no Jaeger binary; build it with scripts/install-jaeger.sh (or set KPLANE_JAEGER)")
}

// Config says where Jaeger runs.
type Config struct {
	// Binary is the jaeger executable (default: Binary()).
	Binary string
	// Dir holds its config file and log (required).
	Dir string
	// Host to bind (default 127.0.0.1). QueryPort, OTLPPort and
	// OTLPHTTPPort are the query API's HTTP port, the OTLP gRPC receiver's
	// and the OTLP/HTTP receiver's; zero picks free ports (16686, 4317 and
	// 4318 are Jaeger's defaults).
	Host                              string
	QueryPort, OTLPPort, OTLPHTTPPort int
	// MaxTraces is how many traces the memory store keeps, the oldest
	// dropped first (default DefaultMaxTraces).
	MaxTraces int
	// GCPercent is Jaeger's Go GC target, GOGC (default DefaultGCPercent;
	// negative: Go's own, 100). GOGC in the environment wins.
	GCPercent int
}

// DefaultGCPercent is the GC target Jaeger runs with unless Config says
// otherwise. A quarter of Jaeger's CPU per span went to its garbage
// collector, marking the memory store's ring (some 100 MB at 10,000
// traces) over and over at Go's default of 100: at 400 it does a quarter
// of that work for some 150 MB more heap. Measured with spanload, 30,000
// create-shaped traces a round (BENCHMARKS.md, Tracing): Jaeger's CPU per
// trace 38-41 µs at 100, 29-31 at 200, 25-29 at 400; RSS 141, 182 and
// 289 MB. Jaeger shares the machine with the control plane it traces
// under `kplane up --jaeger`, so its CPU is the control plane's loss.
const DefaultGCPercent = 400

// DefaultMaxTraces is the memory store's capacity unless Config says
// otherwise. Jaeger's own all-in-one keeps 100,000, which at kplane's
// span sizes is some 800 MB of heap (8 KB a create's trace) and, at the
// 2,000 traced creates a second of scripts/bench-tracing.sh, takes 50 s
// to fill: until the ring is full every stored trace is fresh heap
// (zeroed pages, a growing GC), which made Jaeger's ingest cost about
// 55 µs a trace instead of the 30 µs it costs once the ring recycles
// (BENCHMARKS.md, Tracing). 10,000 traces (about 150 MB) is hours of a
// development cluster's activity and fills in seconds under load.
const DefaultMaxTraces = 10000

// Jaeger is a running Jaeger process.
type Jaeger struct {
	// QueryURL is the query API's base URL (http://127.0.0.1:16686).
	QueryURL string
	// OTLPEndpoint is the OTLP gRPC receiver's URL (http://127.0.0.1:4317),
	// what OTEL_EXPORTER_OTLP_ENDPOINT should say.
	OTLPEndpoint string
	// OTLPHTTPEndpoint is the OTLP/HTTP receiver's base URL
	// (http://127.0.0.1:4318), for OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf.
	OTLPHTTPEndpoint string
	// LogPath is Jaeger's log file.
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// config is a trimmed copy of Jaeger's all-in-one configuration: OTLP gRPC
// and HTTP in, memory storage, the query API, every port on the given host.
const config = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: %[1]s:%[2]d
    grpc:
      endpoint: %[1]s:%[4]d
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: %[6]d
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %[1]s:%[3]d
      http:
        endpoint: %[1]s:%[5]d
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// Start runs Jaeger and waits until its query API answers. Stop ends it.
func Start(ctx context.Context, cfg Config) (*Jaeger, error) {
	if cfg.Dir == "" {
		return nil, errors.New("jaeger: Config.Dir is required")
	}
	if cfg.Binary == "" {
		b, err := Binary()
		if err != nil {
			return nil, err
		}
		cfg.Binary = b
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.MaxTraces <= 0 {
		cfg.MaxTraces = DefaultMaxTraces
	}
	var err error
	grpcPort := 0
	free := freeport.New(cfg.Host)
	free.Reserve(cfg.QueryPort, cfg.OTLPPort, cfg.OTLPHTTPPort)
	for _, p := range []*int{&cfg.QueryPort, &cfg.OTLPPort, &cfg.OTLPHTTPPort, &grpcPort} {
		if *p == 0 {
			if *p, err = free.Pick(); err != nil {
				return nil, fmt.Errorf("jaeger: %w", err)
			}
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("jaeger: %w", err)
	}
	confPath := filepath.Join(cfg.Dir, "jaeger.yaml")
	if err := os.WriteFile(confPath, fmt.Appendf(nil, config, cfg.Host, cfg.QueryPort, cfg.OTLPPort, grpcPort, cfg.OTLPHTTPPort, cfg.MaxTraces), 0o644); err != nil {
		return nil, fmt.Errorf("jaeger: %w", err)
	}
	j := &Jaeger{
		QueryURL:         "http://" + net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.QueryPort)),
		OTLPEndpoint:     "http://" + net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.OTLPPort)),
		OTLPHTTPEndpoint: "http://" + net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.OTLPHTTPPort)),
		LogPath:          filepath.Join(cfg.Dir, "jaeger.log"),
		done:             make(chan struct{}),
	}
	logf, err := os.Create(j.LogPath)
	if err != nil {
		return nil, fmt.Errorf("jaeger: %w", err)
	}
	j.cmd = exec.Command(cfg.Binary, "--config", "file:"+confPath)
	if _, set := os.LookupEnv("GOGC"); !set {
		if cfg.GCPercent == 0 {
			cfg.GCPercent = DefaultGCPercent
		}
		if cfg.GCPercent > 0 {
			j.cmd.Env = append(os.Environ(), "GOGC="+strconv.Itoa(cfg.GCPercent))
		}
	}
	j.cmd.Stdout, j.cmd.Stderr = logf, logf
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := j.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("jaeger: start %s: %w", cfg.Binary, err)
	}
	go func() {
		_ = j.cmd.Wait()
		logf.Close()
		close(j.done)
	}()
	if err := j.waitReady(ctx); err != nil {
		j.Stop()
		return nil, err
	}
	return j, nil
}

func (j *Jaeger) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, j.QueryURL+"/api/services", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-j.done:
			b, _ := os.ReadFile(j.LogPath)
			return fmt.Errorf("jaeger exited at start-up:\n%s", b)
		case <-ctx.Done():
			return fmt.Errorf("jaeger: query API at %s not ready: %w (log %s)", j.QueryURL, ctx.Err(), j.LogPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Env is the environment that makes kplane's components export their spans
// to this Jaeger (internal/telemetry reads it), every request traced: a
// sampler ratio of 1 for the components that start traces, where the
// default samples a tenth (the others still only continue traces).
func (j *Jaeger) Env() []string {
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.OTLPEndpoint,
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_TRACES_SAMPLER_ARG=1",
	}
}

// PID is the Jaeger process's ID.
func (j *Jaeger) PID() int { return j.cmd.Process.Pid }

// Stop ends Jaeger (SIGTERM, then SIGKILL after 5 s) and waits for it.
func (j *Jaeger) Stop() {
	if j.cmd == nil || j.cmd.Process == nil {
		return
	}
	_ = j.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-j.done:
	case <-time.After(5 * time.Second):
		_ = j.cmd.Process.Kill()
		<-j.done
	}
}

// StartBeside starts a Jaeger for `kplane up --jaeger` under
// dataDir/jaeger, on Jaeger's default ports when fixedPorts (those kplane
// trace assumes), and tells out where its query API is.
func StartBeside(ctx context.Context, dataDir string, fixedPorts bool, out io.Writer) (*Jaeger, error) {
	cfg := Config{Dir: filepath.Join(dataDir, "jaeger")}
	if fixedPorts {
		cfg.QueryPort, cfg.OTLPPort, cfg.OTLPHTTPPort = 16686, 4317, 4318
	}
	j, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "Jaeger query API %s (log %s); every component sends its spans there\n", j.QueryURL, j.LogPath)
	fmt.Fprintf(out, "  kplane trace --kubeconfig %s --jaeger-url %s deployment/web\n", filepath.Join(dataDir, "kubeconfig"), j.QueryURL)
	return j, nil
}
