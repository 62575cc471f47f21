// This file holds Up: the whole local control plane `kplane up` starts
// (store members, API services, gateway, schedulers, controller managers and
// node agents), each its own process of this binary, supervised until Stop.

package localcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kplane/kplane/internal/freeport"
	"github.com/kplane/kplane/nodeagent"
	"github.com/kplane/kplane/services/client"
)

// UpConfig describes the whole local control plane `kplane up` starts.
type UpConfig struct {
	// Binary is the kplane executable to run (default: os.Executable()).
	Binary string
	// DataDir holds the store members' directories, the credentials, the
	// kubeconfig and every process's log (default ./.kplane).
	DataDir string
	// StoreMembers is the number of store members (default 3).
	StoreMembers int
	// APIServers is the number of API service replicas (default 2).
	APIServers int
	// APIServerArgs are appended to every API service replica's
	// arguments (e.g. --oidc-issuer-url): later flags win.
	APIServerArgs []string
	// Schedulers and ControllerManagers are the leader-elected replicas of
	// each (0: the default, 2; negative: none, so that Kubernetes' own
	// kube-scheduler or kube-controller-manager can take their place).
	Schedulers, ControllerManagers int
	// ControllerAPIQPS and ControllerAPIBurst are the controller managers'
	// --kube-api-qps and --kube-api-burst: the rate at which they call the
	// API service (0: no limit; a burst of 0 is 1.5 × the qps).
	ControllerAPIQPS   float64
	ControllerAPIBurst int
	// Nodes is the number of simulated nodes, all in one node agent
	// process with the built-in runtime (0: the default, 3; negative: no
	// node agent at all, for nodes registered by something else, such as
	// KWOK).
	Nodes int
	// ClusterCIDR and NodeCIDRMaskSize give the simulated nodes their pod
	// subnets (the node agent's --cluster-cidr and --node-cidr-mask-size;
	// empty and 0: its defaults, 10.244.0.0/16 in /24s, room for 256
	// nodes).
	ClusterCIDR      string
	NodeCIDRMaskSize int
	// Runtime is "builtin" (default: simulated nodes) or "containerd":
	// real nodes node-1..node-N, N = len(CRISockets) unless Nodes says
	// otherwise, each with a node agent process of its own running pods on
	// the runtime at its CRISockets entry (a runtime is never shared: its
	// CNI network is one node's), sandboxes' cgroups under CgroupParent
	// (empty: the runtime's default). Pods get their own network namespace
	// and an IP from their node's pod CIDR (the ClusterCIDR subnets): each
	// agent writes its node's CNI network, over bridge CNIBridges[i]
	// (default kplane<i>), into CNIConfDirs[i], its runtime's CNI
	// configuration directory (default, with one node, /etc/cni/net.d,
	// containerd's). On one host every bridge is in the host's network
	// namespace, so its routes already join the nodes' pod CIDRs. With
	// HostNetwork every pod runs in the host's network namespace instead
	// and no CNI network is written.
	Runtime      string
	CRISockets   []string
	CgroupParent string
	CNIConfDirs  []string
	CNIBridges   []string
	HostNetwork  bool
	// ProxyTable is the nftables table (family ip) of the Service proxy
	// that runtime containerd starts (default kplane-proxy); the built-in
	// runtime's simulated pods have no network, and get no proxy.
	ProxyTable string
	// BasePort, when non-zero, lays the ports out from it: store member i
	// at BasePort+2i (client) and +1 (peer), then the API services, the
	// gateway and the node agents' log servers. Zero picks free ports.
	BasePort int
	// Host is the loopback address to bind (default 127.0.0.1).
	Host string
	// Env is added to every process's environment (e.g. the OTEL_*
	// variables that send spans to Jaeger).
	Env []string
	// ReadyTimeout bounds the wait for a healthy cluster (default 2m).
	ReadyTimeout time.Duration
	// Restart is how a process that fails once the cluster is up is
	// restarted (zero fields take the defaults, see RestartPolicy).
	Restart RestartPolicy
	Logger  *slog.Logger
}

// Process is one started control-plane process other than a store member.
type Process struct {
	Component string // apiserver, gateway, scheduler, controllers, nodeagent, dns
	Name      string
	Addr      string // the address it serves on, if any
	// MetricsAddr is where it serves Prometheus /metrics (plain HTTP on
	// loopback).
	MetricsAddr string
	// Identity is a leader-elected replica's holder identity in its Lease.
	Identity string
	LogPath  string
	args     []string
	proc
}

// ServiceClusterIPRange is the API services' --service-cluster-ip-range in
// a local cluster: kubeadm's default (kube-apiserver's own, 10.0.0.0/24, is
// a range many hosts' networks use).
const ServiceClusterIPRange = "10.96.0.0/12"

// DefaultCNIConfDir is containerd's default CNI configuration directory,
// where node-1's agent writes its network when UpConfig.CNIConfDirs is
// empty and there is one node.
const DefaultCNIConfDir = "/etc/cni/net.d"

// ControlPlane is a running `kplane up` cluster.
type ControlPlane struct {
	cfg   UpConfig
	Store *Cluster
	// Procs are the other processes, in start order.
	Procs []*Process
	// APIServers are the API service replicas' gRPC addresses.
	APIServers []string
	// GatewayURL is the HTTPS address kubectl uses.
	GatewayURL string
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string
	adminTLS   *tls.Config
	admin      *cert
	caFile     string // the cluster CA, which verifies the API services
	supervisor *supervisor
	stateMu    sync.Mutex // serialises writes of the state file
	// metricsAddr picks each process's /metrics address.
	metricsAddr func() (string, error)
}

// Up starts the store, the API services, the gateway, the schedulers, the
// controller managers, the node agent and the cluster DNS, each as its own process, waits
// until the store has a quorum, the API services answer and every node is
// Ready, and writes the admin kubeconfig. On error everything already
// started is stopped.
func Up(ctx context.Context, cfg UpConfig) (*ControlPlane, error) {
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find kplane binary: %w", err)
		}
		cfg.Binary = exe
	}
	if cfg.DataDir == "" {
		cfg.DataDir = ".kplane"
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.StoreMembers, 3)
	def(&cfg.APIServers, 2)
	def(&cfg.Schedulers, 2)
	def(&cfg.ControllerManagers, 2)
	switch cfg.Runtime {
	case "", "builtin":
		cfg.Runtime = "builtin"
		def(&cfg.Nodes, 3)
	case "containerd":
		if len(cfg.CRISockets) == 0 {
			return nil, errors.New("runtime containerd needs the CRI socket (--cri-socket), e.g. /run/containerd/containerd.sock; one per node")
		}
		def(&cfg.Nodes, len(cfg.CRISockets))
		if cfg.Nodes != len(cfg.CRISockets) {
			return nil, fmt.Errorf("runtime containerd: %d nodes need %d CRI sockets (--cri-socket once per node), not %d: a runtime is not shared between nodes", cfg.Nodes, cfg.Nodes, len(cfg.CRISockets))
		}
		if len(cfg.CNIConfDirs) == 0 && cfg.Nodes == 1 {
			cfg.CNIConfDirs = []string{DefaultCNIConfDir}
		}
		if !cfg.HostNetwork && len(cfg.CNIConfDirs) != cfg.Nodes {
			return nil, fmt.Errorf("runtime containerd: %d nodes need %d CNI configuration directories (--cni-conf-dir once per node, each its containerd's), not %d", cfg.Nodes, cfg.Nodes, len(cfg.CNIConfDirs))
		}
		for i := len(cfg.CNIBridges); i < cfg.Nodes; i++ {
			cfg.CNIBridges = append(cfg.CNIBridges, "kplane"+strconv.Itoa(i))
		}
	default:
		return nil, fmt.Errorf("runtime %q: want builtin or containerd", cfg.Runtime)
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	cfg.DataDir = dataDir
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	next := cfg.BasePort + 2*cfg.StoreMembers
	free := freeport.New(cfg.Host)
	port := func() (string, error) {
		if cfg.BasePort == 0 {
			p, err := free.Pick()
			if err != nil {
				return "", err
			}
			return net.JoinHostPort(cfg.Host, strconv.Itoa(p)), nil
		}
		p := next
		next++
		return net.JoinHostPort(cfg.Host, strconv.Itoa(p)), nil
	}
	// Every process serves /metrics. With a base port they follow the
	// ports above (the members', the API services', the gateway's and the
	// node agents' log servers: one, or one per containerd node), in start
	// order, so that a restarted process keeps its address.
	logServers := 1
	if cfg.Runtime == "containerd" {
		logServers = cfg.Nodes
	}
	nextMetrics := next + cfg.APIServers + 1 + logServers
	metricsAddr := func() (string, error) {
		if cfg.BasePort == 0 {
			p, err := free.Pick()
			if err != nil {
				return "", err
			}
			return net.JoinHostPort(cfg.Host, strconv.Itoa(p)), nil
		}
		p := nextMetrics
		nextMetrics++
		return net.JoinHostPort(cfg.Host, strconv.Itoa(p)), nil
	}

	id, err := writeIdentities(dataDir, cfg.Host, cfg.APIServers, cfg.Nodes)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{cfg: cfg, adminTLS: id.adminTLS, Kubeconfig: filepath.Join(dataDir, "kubeconfig"), metricsAddr: metricsAddr}
	ok := false
	defer func() {
		if !ok {
			cp.Stop()
		}
	}()

	cp.Store, err = Start(ctx, Config{
		Binary: cfg.Binary, DataDir: dataDir, Members: cfg.StoreMembers,
		Host: cfg.Host, BasePort: cfg.BasePort, Logger: cfg.Logger,
		TLS: true, pki: id.pki, ports: free, Env: cfg.Env, metricsAddr: metricsAddr,
	})
	if err != nil {
		return nil, err
	}
	if err := cp.waitStore(ctx); err != nil {
		return nil, err
	}

	var storeURLs []string
	for _, m := range cp.Store.Members {
		storeURLs = append(storeURLs, m.ClientURL)
	}
	encryptionConfig, auditPolicy, err := writeSecurityDefaults(dataDir)
	if err != nil {
		return nil, err
	}
	// The ports are picked in the documented order (API services, then
	// the gateway) before anything starts: the API services advertise the
	// gateway's address and port as the kubernetes Service's endpoint.
	var apiAddrs []string
	for i := 0; i < cfg.APIServers; i++ {
		addr, err := port()
		if err != nil {
			return nil, err
		}
		apiAddrs = append(apiAddrs, addr)
	}
	gwAddr, err := port()
	if err != nil {
		return nil, err
	}
	gwHost, gwPort, _ := net.SplitHostPort(gwAddr)
	for i, addr := range apiAddrs {
		args := []string{"--listen", addr, "--store-endpoints", strings.Join(storeURLs, ","),
			"--store-cafile", id.storeCA.file, "--store-certfile", id.storeClient.certFile, "--store-keyfile", id.storeClient.keyFile,
			"--tls-cert-file", id.apiservers[i].certFile, "--tls-private-key-file", id.apiservers[i].keyFile,
			"--client-ca-file", id.ca.file,
			"--kubelet-client-certificate", id.kubeletClient.certFile, "--kubelet-client-key", id.kubeletClient.keyFile,
			"--kubelet-certificate-authority", id.ca.file,
			"--encryption-provider-config", encryptionConfig,
			"--service-account-issuer", ServiceAccountIssuer,
			"--service-account-signing-key-file", filepath.Join(dataDir, ServiceAccountKeyFile),
			"--service-account-key-file", filepath.Join(dataDir, ServiceAccountKeyFile),
			"--audit-policy-file", auditPolicy, "--audit-log-maxbackup", "3",
			"--audit-log-path", filepath.Join(dataDir, "apiserver-"+strconv.Itoa(i+1)+"-audit.log"),
			"--log-level", "warn",
			"--service-cluster-ip-range", ServiceClusterIPRange, "--secure-port", gwPort}
		if _, err := netip.ParseAddr(gwHost); err == nil {
			args = append(args, "--advertise-address", gwHost)
		}
		args = append(args, cfg.APIServerArgs...)
		if err := cp.start("apiserver", "apiserver-"+strconv.Itoa(i+1), addr, args...); err != nil {
			return nil, err
		}
	}
	// Every client gets every API service replica; gRPC balances its calls
	// over the healthy ones and fails over (client.Dial).
	servers := strings.Join(apiAddrs, ",")
	if err := cp.waitAPI(ctx, apiAddrs); err != nil {
		return nil, err
	}

	cp.GatewayURL = "https://" + gwAddr
	if err := cp.start("gateway", "gateway", gwAddr,
		"--server", servers, "--ca-file", id.ca.file,
		"--cert-file", id.gatewayClient.certFile, "--key-file", id.gatewayClient.keyFile,
		"--listen", gwAddr, "--client-ca-file", id.ca.file,
		"--tls-cert-file", id.gatewayServing.certFile, "--tls-key-file", id.gatewayServing.keyFile,
		"--log-level", "warn"); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.Schedulers; i++ {
		if err := cp.start("scheduler", "scheduler-"+strconv.Itoa(i+1), "",
			"--server", servers, "--ca-file", id.ca.file,
			"--cert-file", id.scheduler.certFile, "--key-file", id.scheduler.keyFile,
			"--leader-elect-identity", "scheduler-"+strconv.Itoa(i+1),
			"--log-level", "warn"); err != nil {
			return nil, err
		}
	}
	for i := 0; i < cfg.ControllerManagers; i++ {
		args := []string{"--server", servers, "--ca-file", id.ca.file,
			"--cert-file", id.controllers.certFile, "--key-file", id.controllers.keyFile,
			"--leader-elect-identity", "controllers-" + strconv.Itoa(i+1),
			// Every node of kplane up is on this machine: the node-local
			// provisioner's volumes live in the data directory.
			"--local-volume-dir", filepath.Join(dataDir, "volumes"),
			"--log-level", "warn"}
		if cfg.ControllerAPIQPS > 0 {
			args = append(args, "--kube-api-qps", strconv.FormatFloat(cfg.ControllerAPIQPS, 'f', -1, 64),
				"--kube-api-burst", strconv.Itoa(cfg.ControllerAPIBurst))
		}
		if err := cp.start("controllers", "controllers-"+strconv.Itoa(i+1), "", args...); err != nil {
			return nil, err
		}
	}
	cp.APIServers = apiAddrs
	if cfg.Nodes >= 0 {
		if err := cp.startNodeAgent(ctx, id, servers, dataDir, port); err != nil {
			return nil, err
		}
	}
	// The cluster DNS starts last so that, with a base port, the other
	// processes keep their metrics ports; its own port is a free one.
	if err := cp.startDNS(ctx, id, servers, free); err != nil {
		return nil, err
	}
	// After every process whose metrics port a base port lays out.
	if err := cp.startProxy(id, servers); err != nil {
		return nil, err
	}
	if err := cp.waitGateway(ctx); err != nil {
		return nil, err
	}
	if err := writeKubeconfig(cp.Kubeconfig, cp.GatewayURL, id.ca.pem, id.admin); err != nil {
		return nil, err
	}
	cp.admin, cp.caFile = id.admin, id.ca.file
	if err := cp.writeState(); err != nil {
		return nil, err
	}
	cp.supervise()
	ok = true
	return cp, nil
}

// startNodeAgent starts the node agent with cfg.Nodes nodes (built-in
// runtime), or one agent per node on the real runtimes, and waits until
// they are Ready.
func (cp *ControlPlane) startNodeAgent(ctx context.Context, id *identities, servers, dataDir string, port func() (string, error)) error {
	cfg := cp.cfg
	common := []string{"--server", servers, "--ca-file", id.ca.file, "--cert-dir", id.nodeDir,
		"--data-dir", filepath.Join(dataDir, "nodeagent"),
		"--tls-cert-file", id.nodeAgentServing.certFile,
		"--tls-private-key-file", id.nodeAgentServing.keyFile, "--client-ca-file", id.ca.file,
		"--log-allowed-users", KubeletClientUser, "--log-level", "warn", "--cluster-domain", ClusterDomain}
	// Every agent names kube-dns's cluster IP: simulated pods only see it
	// in their resolv.conf; real pods reach it through the Service proxy
	// (startProxy), which sends it to the DNS (startDNS).
	common = append(common, "--cluster-dns", DNSServiceIP)
	if cfg.ClusterCIDR != "" {
		common = append(common, "--cluster-cidr", cfg.ClusterCIDR)
	}
	if cfg.NodeCIDRMaskSize > 0 {
		common = append(common, "--node-cidr-mask-size", strconv.Itoa(cfg.NodeCIDRMaskSize))
	}
	if cfg.Runtime != "containerd" {
		logAddr, err := port()
		if err != nil {
			return err
		}
		args := append(common, "--nodes", strconv.Itoa(cfg.Nodes), "--node-name", "node-1", "--log-listen", logAddr)
		if err := cp.start("nodeagent", "nodeagent", logAddr, args...); err != nil {
			return err
		}
		return cp.waitNodes(ctx, cp.APIServers)
	}
	cluster, mask := cfg.ClusterCIDR, cfg.NodeCIDRMaskSize
	if cluster == "" {
		cluster = nodeagent.DefaultClusterCIDR
	}
	if mask == 0 {
		mask = nodeagent.DefaultNodeCIDRMaskSize
	}
	for i := range cfg.Nodes {
		node := "node-" + strconv.Itoa(i+1)
		podCIDR, err := nodeagent.NodeSubnet(cluster, mask, i+1)
		if err != nil {
			return err
		}
		logAddr, err := port()
		if err != nil {
			return err
		}
		args := append(slices.Clip(common), "--nodes", "1", "--node-name", node, "--log-listen", logAddr,
			"--cri-socket", cfg.CRISockets[i], "--pod-cidr", podCIDR)
		if cfg.HostNetwork {
			args = append(args, "--host-network")
		} else {
			args = append(args, "--cni-conf-dir", cfg.CNIConfDirs[i], "--cni-bridge", cfg.CNIBridges[i])
		}
		if cfg.CgroupParent != "" {
			args = append(args, "--cgroup-parent", cfg.CgroupParent)
		}
		name := "nodeagent"
		if cfg.Nodes > 1 {
			name = "nodeagent-" + node
		}
		if err := cp.start("nodeagent", name, logAddr, args...); err != nil {
			return err
		}
	}
	return cp.waitNodes(ctx, cp.APIServers)
}

// supervise restarts, from now until Stop, every process that fails (see
// RestartPolicy), recording each restart in the state file. Until the
// cluster is up, a process that exits fails Up instead.
func (cp *ControlPlane) supervise() {
	cp.supervisor = newSupervisor(cp.cfg.Restart, cp.cfg.Logger, func() {
		if err := cp.writeState(); err != nil {
			cp.cfg.Logger.Error("write the state file", "err", err)
		}
	})
	for _, m := range cp.Store.Members {
		cp.supervisor.watch(m.Name, m.LogPath, &m.proc, func() error { return cp.Store.StartMember(m) })
	}
	for _, p := range cp.Procs {
		cp.supervisor.watch(p.Name, p.LogPath, &p.proc, func() error { return cp.launch(p) })
	}
}

// start starts one process of this binary with its log in the data dir.
func (cp *ControlPlane) start(component, name, addr string, args ...string) error {
	maddr, err := cp.metricsAddr()
	if err != nil {
		return err
	}
	p := &Process{Component: component, Name: name, Addr: addr, MetricsAddr: maddr,
		LogPath: filepath.Join(cp.cfg.DataDir, name+".log"),
		args:    append(append([]string{component}, args...), "--metrics-bind-address", maddr)}
	for i, a := range args {
		if a == "--leader-elect-identity" && i+1 < len(args) {
			p.Identity = args[i+1]
		}
	}
	if err := cp.launch(p); err != nil {
		return err
	}
	cp.Procs = append(cp.Procs, p)
	return nil
}

// launch runs a new incarnation of p's command, appending to its log.
func (cp *ControlPlane) launch(p *Process) error {
	if err := p.run(cp.cfg.Binary, p.args, cp.cfg.Env, p.LogPath); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	cp.cfg.Logger.Info("process started", "name", p.Name, "pid", p.PID(), "addr", p.Addr, "log", p.LogPath)
	return nil
}

// Down returns an error naming a process of the cluster that is not
// running (exited, or not yet restarted by the supervisor), or nil.
func (cp *ControlPlane) Down() error {
	if cp.Store != nil {
		for _, m := range cp.Store.Members {
			if !m.Running() {
				return fmt.Errorf("store member %s is down; see %s", m.Name, m.LogPath)
			}
		}
	}
	for _, p := range cp.Procs {
		if !p.Running() {
			return fmt.Errorf("%s is down; see %s", p.Name, p.LogPath)
		}
	}
	return nil
}

// Dial connects to the API service replicas as the admin (system:masters).
func (cp *ControlPlane) Dial() (*grpc.ClientConn, error) { return cp.dial(cp.APIServers...) }

// dial connects to the API service replicas at addrs as the admin.
func (cp *ControlPlane) dial(addrs ...string) (*grpc.ClientConn, error) {
	return client.Dial(addrs, grpc.WithTransportCredentials(credentials.NewTLS(cp.adminTLS)))
}

// Stop stops everything in reverse order of dependency, so that clients
// can still release their leases: first the node agent, controllers,
// schedulers and gateway together, then the API services, then the store
// members. Each phase gets SIGTERM and, after 10s, SIGKILL. The supervisor
// is stopped first: nothing is restarted while the cluster stops.
func (cp *ControlPlane) Stop() {
	if cp.supervisor != nil {
		cp.supervisor.stop()
	}
	var clients, apis []*Process
	for _, p := range cp.Procs {
		if p.Component == "apiserver" {
			apis = append(apis, p)
		} else {
			clients = append(clients, p)
		}
	}
	stopAll(clients, 10*time.Second)
	stopAll(apis, 10*time.Second)
	if cp.Store != nil {
		cp.Store.Stop()
	}
	_ = os.Remove(StatePath(cp.cfg.DataDir))
}

// stopAll sends SIGTERM to every process, then waits for each, killing
// those still running after grace.
func stopAll(ps []*Process, grace time.Duration) {
	for _, p := range ps {
		_ = p.signal(syscall.SIGTERM)
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	for _, p := range ps {
		p.stop(ctx.Done())
	}
}

// Wait blocks until ctx ends. Meanwhile the supervisor restarts any
// process that fails (the other replicas carry on until it is back), and
// logs it.
func (cp *ControlPlane) Wait(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
