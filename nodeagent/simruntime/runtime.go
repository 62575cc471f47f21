// This file holds the runtime itself: its configuration, its state, how it
// is served over a unix socket, and the runtime-wide RPCs (Version, Status,
// UpdateRuntimeConfig).

package simruntime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// RuntimeName is what Version reports as the runtime's name.
const RuntimeName = "kplane-sim"

// criAPIVersion is the CRI API version this runtime serves.
const criAPIVersion = "v1"

// Config configures one simulated runtime.
type Config struct {
	// Name distinguishes runtimes in one process (e.g. the node's name); it
	// seeds the sandbox and container IDs and labels the logs.
	Name string
	// Version is reported as RuntimeVersion (default "0.0.0-dev").
	Version string
	// PodCIDR is where pod IPs come from (e.g. "10.244.3.0/24"). Empty: no
	// pod IPs until UpdateRuntimeConfig gives a CIDR.
	PodCIDR string
	// PullLatency is how long a pull takes unless the image's name says
	// otherwise (default 0).
	PullLatency time.Duration
	// Images are present from the start, as if pulled before.
	Images []string
	// Clock gives every time the runtime reports or waits on (default the
	// real clock).
	Clock clock.Clock
	// Logger receives the runtime's logs (nil: discard).
	Logger *slog.Logger
	// Socket is where Run serves the CRI (a unix socket path).
	Socket string
}

// Runtime is one simulated container runtime. All its state is in the
// struct, guarded by mu: a process may hold any number of them.
type Runtime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	name        string
	socket      string
	version     string
	pullLatency time.Duration
	clock       clock.Clock
	log         *slog.Logger

	mu         sync.Mutex
	seq        uint64
	pods       *ipPool           // nil without a pod CIDR
	images     map[string]*image // by image ID
	tags       map[string]string // normalised reference -> image ID
	sandboxes  map[string]*sandbox
	containers map[string]*container

	// scripts counts the scripted containers' running shells (script.go).
	scripts sync.WaitGroup

	// streamMu guards the streaming server (streaming.go).
	streamMu sync.Mutex
	stream   *streamer
	closed   bool
}

var (
	_ runtimeapi.RuntimeServiceServer = (*Runtime)(nil)
	_ runtimeapi.ImageServiceServer   = (*Runtime)(nil)
)

// New returns a runtime with no sandboxes or containers, holding cfg.Images.
func New(cfg Config) (*Runtime, error) {
	r := &Runtime{
		name:        cfg.Name,
		socket:      cfg.Socket,
		version:     cfg.Version,
		pullLatency: cfg.PullLatency,
		clock:       cfg.Clock,
		log:         cfg.Logger,
		images:      map[string]*image{},
		tags:        map[string]string{},
		sandboxes:   map[string]*sandbox{},
		containers:  map[string]*container{},
	}
	if r.version == "" {
		r.version = "0.0.0-dev"
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.log == nil {
		r.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r.log = r.log.With("component", "simruntime", "runtime", cfg.Name)
	if cfg.PullLatency < 0 {
		return nil, fmt.Errorf("simruntime: negative pull latency %v", cfg.PullLatency)
	}
	if cfg.PodCIDR != "" {
		p, err := newIPPool(cfg.PodCIDR)
		if err != nil {
			return nil, fmt.Errorf("simruntime: %w", err)
		}
		r.pods = p
	}
	for _, ref := range cfg.Images {
		named, _, err := parseImage(ref)
		if err != nil {
			return nil, fmt.Errorf("simruntime: preloaded image: %w", err)
		}
		r.addImageLocked(named)
	}
	return r, nil
}

// Register adds the runtime's RuntimeService and ImageService to s, for a
// caller that serves them on a listener of its own.
func (r *Runtime) Register(s *grpc.Server) {
	runtimeapi.RegisterRuntimeServiceServer(s, r)
	runtimeapi.RegisterImageServiceServer(s, r)
}

// Run serves the CRI on Config.Socket until ctx is done (see Serve).
func (r *Runtime) Run(ctx context.Context) error {
	if r.socket == "" {
		return errors.New("simruntime: no socket configured")
	}
	return r.Serve(ctx, r.socket)
}

// Serve serves the CRI on a unix socket at socketPath until ctx is done,
// then stops the server and removes the socket. A stale socket file left by
// a previous process is replaced. It returns nil after ctx is done, or the
// error that stopped it earlier.
func (r *Runtime) Serve(ctx context.Context, socketPath string) error {
	lis, err := Listen(socketPath)
	if err != nil {
		return err
	}
	return r.ServeListener(ctx, lis)
}

// Listen creates the unix socket at socketPath (and its directory),
// replacing a stale socket file. A caller that must know the socket accepts
// connections before it dials (a test, a node agent starting its runtime)
// listens first, then calls ServeListener.
func Listen(socketPath string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o755); err != nil {
		return nil, fmt.Errorf("simruntime: socket directory: %w", err)
	}
	if err := os.Remove(socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("simruntime: remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("simruntime: listen: %w", err)
	}
	return lis, nil
}

// ServeListener serves the CRI on lis until ctx is done, then stops the
// server, which closes lis (removing a unix socket's file).
func (r *Runtime) ServeListener(ctx context.Context, lis net.Listener) error {
	s := grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler()))
	r.Register(s)
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(lis) }()
	r.log.Info("serving CRI", "address", lis.Addr().String())
	select {
	case <-ctx.Done():
		s.Stop()
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("simruntime: serve: %w", err)
	}
}

// newIDLocked returns a new 64-hex-digit ID, deterministic for a runtime's
// name and the order of creation.
func (r *Runtime) newIDLocked(kind string) string {
	r.seq++
	sum := sha256.Sum256([]byte(r.name + "/" + kind + "/" + strconv.FormatUint(r.seq, 10)))
	return hex.EncodeToString(sum[:])
}

// Version reports the runtime's name and version.
func (r *Runtime) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       RuntimeName,
		RuntimeVersion:    r.version,
		RuntimeApiVersion: criAPIVersion,
	}, nil
}

// Status reports the runtime and its network as ready: both are simulated
// and always available.
func (r *Runtime) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	resp := &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}}
	if req.GetVerbose() {
		r.mu.Lock()
		cidr := ""
		if r.pods != nil {
			cidr = r.pods.prefix.String()
		}
		resp.Info = map[string]string{
			"runtime":    RuntimeName,
			"simulated":  "true: no process runs in this runtime's containers",
			"podCIDR":    cidr,
			"sandboxes":  strconv.Itoa(len(r.sandboxes)),
			"containers": strconv.Itoa(len(r.containers)),
		}
		r.mu.Unlock()
	}
	return resp, nil
}

// UpdateRuntimeConfig takes the node's pod CIDR, as the kubelet sends it.
// Addresses already handed out stay with their sandboxes.
func (r *Runtime) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	cidr := req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr()
	if cidr == "" {
		return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
	}
	// The kubelet may send several CIDRs separated by commas (dual
	// stack); the simulation uses the first.
	cidr, _, _ = strings.Cut(cidr, ",")
	p, err := newIPPool(cidr)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pods != nil && r.pods.prefix == p.prefix {
		return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
	}
	for _, sb := range r.sandboxes {
		if sb.ip.IsValid() && p.prefix.Contains(sb.ip) {
			p.used[sb.ip] = true
		}
	}
	r.pods = p
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// ipPool hands out the addresses of a pod CIDR.
type ipPool struct {
	prefix netip.Prefix
	next   netip.Addr
	used   map[netip.Addr]bool
}

func newIPPool(cidr string) (*ipPool, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR: %w", err)
	}
	p = p.Masked()
	if p.Addr().BitLen()-p.Bits() < 2 {
		return nil, fmt.Errorf("pod CIDR %s is too small", p)
	}
	return &ipPool{prefix: p, next: p.Addr().Next().Next(), used: map[netip.Addr]bool{}}, nil
}

// allocate returns the next free address after the last one handed out,
// wrapping around, or false when none is free.
func (p *ipPool) allocate() (netip.Addr, bool) {
	first := p.prefix.Addr().Next().Next()
	hostBits := p.prefix.Addr().BitLen() - p.prefix.Bits()
	limit := 1 << min(hostBits, 20) // a bound on the scan, even for IPv6
	a := p.next
	for range limit {
		if !p.usable(a) {
			a = first
		}
		if !p.used[a] {
			p.used[a] = true
			p.next = a.Next()
			return a, true
		}
		a = a.Next()
	}
	return netip.Addr{}, false
}

// usable reports whether a is a host address of the prefix other than the
// gateway (the first) and, for IPv4, the broadcast address.
func (p *ipPool) usable(a netip.Addr) bool {
	if !a.IsValid() || !p.prefix.Contains(a) {
		return false
	}
	if a == p.prefix.Addr() || a == p.prefix.Addr().Next() {
		return false
	}
	if a.Is4() {
		n := a.Next()
		if !n.IsValid() || !p.prefix.Contains(n) {
			return false // broadcast
		}
	}
	return true
}

func (p *ipPool) release(a netip.Addr) { delete(p.used, a) }
