// This file holds Fleet: the node agents one process runs — one node, or N
// simulated nodes each with its own identity (system:node:<name>), pod
// subnet and built-in runtime — with their connections to the API service
// and the log server they share. `kplane nodeagent` maps its flags onto
// FleetOptions; tests build the same fleet.

package nodeagent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/simruntime"
)

// DefaultGCPercent is the node agent's default GC target (kplane nodeagent
// --gc-percent): Go's own. With 100 simulated nodes and 3,000 pods
// (TestBenchManyNodes, 2026-11-23, BENCHMARKS.md "Density"), 200 and 400
// showed no CPU saving within the run-to-run noise of a loaded machine
// (agent CPU over the ramp 5.7-6.2 s at 100, 6.6-7.7 s at 400), while the
// steady RSS grew from 210 to 290 and 440 MiB.
const DefaultGCPercent = 100

// FleetOptions are the fleet's settings, as `kplane nodeagent`'s flags
// name them. Start from DefaultFleetOptions.
type FleetOptions struct {
	// Server is the API service's address or its replicas', comma-separated.
	Server string
	// Credentials: CAFile verifies the API service. Then one of: CertFile
	// and KeyFile (one node), CertDir (<node>.crt and <node>.key per node,
	// a connection each), Token (one node) or TokenCSV (the API service's
	// token file: each node uses system:node:<name>'s token, all over one
	// connection). Plaintext dials without TLS.
	CAFile, CertFile, KeyFile, CertDir string
	Token, TokenCSV                    string
	Plaintext                          bool

	// NodeName is the node with Nodes 1; with more, they are named
	// NodePrefix1..N.
	NodeName, NodePrefix string
	Nodes                int
	// CRISocket is a CRI runtime (one node only); empty gives each node a
	// built-in simulated runtime in this process, pulling images in
	// PullLatency.
	CRISocket   string
	PullLatency time.Duration
	// DataDir holds <node>/pods (logs) and <node>/root (volumes).
	DataDir string
	// CPU, Memory and Pods are each node's capacity; Labels (key=value)
	// and Taints (key=value:Effect) are set when it registers.
	CPU, Memory, Pods string
	Labels, Taints    []string
	// PodCIDR is the node's (one node); otherwise node i (from 1) gets the
	// i-th /NodeCIDRMask subnet of ClusterCIDR.
	PodCIDR, ClusterCIDR string
	NodeCIDRMask         int
	// NodeIP is every node's InternalIP.
	NodeIP string
	// LogListen serves container logs and the streaming endpoints
	// (empty: none), with LogTLSCertFile (empty: a self-signed
	// certificate), to clients whose certificates LogClientCAFile signs
	// (empty: none) and whose CN is one of LogUsers.
	LogListen                                      string
	LogTLSCertFile, LogTLSKeyFile, LogClientCAFile string
	LogUsers                                       []string
	// The agents' timing: Lease, status, resync and back-off.
	LeaseDuration, StatusInterval, ResyncInterval time.Duration
	BackoffBase, BackoffMax                       time.Duration
	// CgroupParent of pod sandboxes; HostNetwork runs every pod in the
	// node's network namespace.
	CgroupParent string
	HostNetwork  bool
	// ChangeDetection is how ConfigMaps and Secrets are read (Config's
	// ConfigMapAndSecretChangeDetectionStrategy).
	ChangeDetection string
	// ClusterDNS, ClusterDomain and ResolvConf ("": none) form pods' DNS
	// configuration (Config's fields of the same names).
	ClusterDNS                []string
	ClusterDomain, ResolvConf string
	// CNIConfDir and CNIBridge: the node's pod network, written for a
	// real runtime (Config's fields of the same names).
	CNIConfDir, CNIBridge string

	// Logger and Telemetry (nil: none) are the process's.
	Logger    *slog.Logger
	Telemetry *telemetry.Telemetry
}

// DefaultFleetOptions are `kplane nodeagent`'s defaults.
func DefaultFleetOptions() FleetOptions {
	host, _ := os.Hostname()
	return FleetOptions{
		Server: "127.0.0.1:6443", NodeName: host, NodePrefix: "node-", Nodes: 1,
		DataDir: "/var/lib/kplane/nodeagent", CPU: "4", Memory: "8Gi", Pods: "110",
		ClusterCIDR: DefaultClusterCIDR, NodeCIDRMask: DefaultNodeCIDRMaskSize, NodeIP: "127.0.0.1",
		ChangeDetection: StrategyWatch, ClusterDomain: "cluster.local", ResolvConf: DefaultResolvConf, CNIBridge: DefaultCNIBridge,
		LogListen: "127.0.0.1:10250", LogUsers: []string{"kube-apiserver-kubelet-client"},
		LeaseDuration: 40 * time.Second, StatusInterval: 10 * time.Second, ResyncInterval: 30 * time.Second,
		BackoffBase: 10 * time.Second, BackoffMax: 5 * time.Minute,
	}
}

// Validate checks the options before anything is started.
func (o *FleetOptions) Validate() error {
	if o.Nodes < 1 {
		return fmt.Errorf("--nodes must be at least 1")
	}
	if o.Nodes > 1 && o.CRISocket != "" {
		return fmt.Errorf("--nodes > 1 needs the built-in runtime (no --cri-socket): nodes cannot share a runtime")
	}
	if (o.CertFile != "" || o.Token != "") && o.Nodes > 1 {
		return fmt.Errorf("--cert-file and --token are for one node; use --cert-dir or --token-file with --nodes")
	}
	if o.CNIConfDir != "" && o.CRISocket == "" {
		return fmt.Errorf("--cni-conf-dir needs a real runtime (--cri-socket): the built-in one gives pod IPs itself")
	}
	for _, ip := range o.ClusterDNS {
		if _, err := netip.ParseAddr(ip); err != nil {
			return fmt.Errorf("--cluster-dns: %w", err)
		}
	}
	return nil
}

// NodeNames are the fleet's nodes.
func (o *FleetOptions) NodeNames() []string {
	if o.Nodes <= 1 {
		return []string{o.NodeName}
	}
	names := make([]string, 0, o.Nodes)
	for i := 1; i <= o.Nodes; i++ {
		names = append(names, fmt.Sprintf("%s%d", o.NodePrefix, i))
	}
	return names
}

// Fleet is a built fleet; Run runs it.
type Fleet struct {
	agents    []*Agent
	logServer *http.Server
	logLis    net.Listener
	log       *slog.Logger
	closers   []func()
}

// NewFleet validates o, connects to the API service and builds every
// node's runtime and agent, and the log server's listener. On error
// whatever it built is closed.
func NewFleet(o FleetOptions) (_ *Fleet, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Fleet{log: log}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	names := o.NodeNames()
	labels := map[string]string{}
	for _, l := range o.Labels {
		k, v, _ := strings.Cut(l, "=")
		labels[k] = v
	}
	taints, err := ParseTaints(o.Taints)
	if err != nil {
		return nil, err
	}
	var dialOpts []grpc.DialOption
	tp, mp := telemetryProviders(o.Telemetry)
	if o.Telemetry != nil {
		dialOpts = append(dialOpts, o.Telemetry.DialOption())
	}
	conns, err := newFleetConns(&o, dialOpts)
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, conns.close)

	var logs *LogServer
	var logPort int32
	if o.LogListen != "" {
		if f.logLis, err = net.Listen("tcp", o.LogListen); err != nil {
			return nil, fmt.Errorf("log server: %w", err)
		}
		logPort = int32(f.logLis.Addr().(*net.TCPAddr).Port)
		t, err := logServerTLS(&o)
		if err != nil {
			f.logLis.Close()
			return nil, fmt.Errorf("log server: %w", err)
		}
		if t.ClientCAs == nil {
			log.Warn("the log server refuses every request: no --client-ca-file")
		}
		f.logLis = tls.NewListener(f.logLis, t)
		f.closers = append(f.closers, func() { _ = f.logLis.Close() })
		logs = NewLogServer().RequireClientCert(o.LogUsers...)
		f.logServer = &http.Server{Handler: logs, ReadHeaderTimeout: 10 * time.Second}
	}

	for i, name := range names {
		conn, err := conns.forNode(name)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(o.DataDir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		cidr := o.PodCIDR
		if cidr == "" || len(names) > 1 {
			if cidr, err = NodeSubnet(o.ClusterCIDR, o.NodeCIDRMask, i+1); err != nil {
				return nil, err
			}
		}
		criCfg := cri.Config{Socket: o.CRISocket, TracerProvider: tp, MeterProvider: mp}
		if o.CRISocket == "" {
			// The built-in runtime lives in this process: the agent calls
			// it directly rather than over a socket of its own (half of
			// this process's CPU with 100 nodes went to CRI gRPC; see
			// nodeagent/cri/local.go). `kplane simruntime` still serves
			// it on a socket for other CRI clients.
			rt, err := simruntime.New(simruntime.Config{Name: name, PodCIDR: cidr, PullLatency: o.PullLatency, Logger: log})
			if err != nil {
				return nil, err
			}
			// Its streaming server (exec, attach, port-forward) stops with it.
			f.closers = append(f.closers, func() { _ = rt.Close() })
			criCfg.Server = rt
		}
		rc, err := cri.New(criCfg)
		if err != nil {
			return nil, err
		}
		f.closers = append(f.closers, func() { _ = rc.Close() })
		a, err := New(Config{
			NodeName:       name,
			Conn:           conn,
			Runtime:        rc,
			Capacity:       map[string]string{"cpu": o.CPU, "memory": o.Memory, "pods": o.Pods},
			Labels:         labels,
			Taints:         taints,
			PodCIDR:        cidr,
			HostIP:         o.NodeIP,
			LogDir:         filepath.Join(dir, "pods"),
			RootDir:        filepath.Join(dir, "root"),
			LogPort:        logPort,
			LeaseDuration:  o.LeaseDuration,
			StatusInterval: o.StatusInterval,
			ResyncInterval: o.ResyncInterval,
			ConfigMapAndSecretChangeDetectionStrategy: o.ChangeDetection,
			Backoff:        Backoff{Base: o.BackoffBase, Max: o.BackoffMax},
			CgroupParent:   o.CgroupParent,
			HostNetwork:    o.HostNetwork,
			ClusterDNS:     o.ClusterDNS,
			ClusterDomain:  o.ClusterDomain,
			ResolvConf:     o.ResolvConf,
			NoResolvConf:   o.ResolvConf == "",
			CNIConfDir:     o.CNIConfDir,
			CNIBridge:      o.CNIBridge,
			ClusterCIDR:    o.ClusterCIDR,
			Logger:         log,
			TracerProvider: tp,
		})
		if err != nil {
			return nil, err
		}
		if logs != nil {
			logs.Add(a)
		}
		f.agents = append(f.agents, a)
	}
	return f, nil
}

// Agents are the fleet's agents, one per node.
func (f *Fleet) Agents() []*Agent { return f.agents }

// Run runs every agent and the log server until ctx ends or one fails,
// then closes the runtimes and connections. A cancelled ctx is a clean
// stop (nil).
func (f *Fleet) Run(ctx context.Context) error {
	defer f.close()
	g, ctx := errgroup.WithContext(ctx)
	for _, a := range f.agents {
		g.Go(func() error { return a.Run(ctx) })
	}
	if srv := f.logServer; srv != nil {
		g.Go(func() error {
			<-ctx.Done()
			return srv.Close()
		})
		g.Go(func() error {
			if err := srv.Serve(f.logLis); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	err := g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// close releases what NewFleet built, the last first.
func (f *Fleet) close() {
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
	f.closers = nil
}
