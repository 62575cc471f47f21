// Package nodeagent is kplane's kubelet: it registers a Node, renews its
// Lease, watches the pods bound to the node (a server-side field selector
// spec.nodeName=<node>) and makes them real through a CRI runtime — a real
// containerd or the built-in simulated runtime (nodeagent/simruntime) —
// reporting their status through pods/status, recording events, and serving
// their logs over HTTP (LogServer).
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"k8s.io/client-go/util/workqueue"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/simruntime"
	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// LabelSimulated marks a Node whose runtime is the built-in simulated one
// (value "true"): its containers run nothing.
const LabelSimulated = "node.kplane.io/simulated-runtime"

// apiTimeout bounds each call the agent makes to the API service, so a
// stuck call cannot hold a pod's worker.
const apiTimeout = 30 * time.Second

// Config configures one node agent.
type Config struct {
	// NodeName is the Node's name; the agent must authenticate as
	// system:node:<NodeName>.
	NodeName string
	// Conn reaches the API service with this node's identity.
	Conn grpc.ClientConnInterface
	// Runtime is the CRI client.
	Runtime *cri.Client
	// Capacity is the node's capacity (cpu, memory, pods), e.g.
	// {"cpu": "4", "memory": "8Gi", "pods": "110"}; allocatable is the same.
	// Without ephemeral-storage, the size of RootDir's filesystem is given.
	Capacity map[string]string
	// Labels are added to the well-known ones (hostname, os, arch, and
	// LabelSimulated on the simulated runtime).
	Labels map[string]string
	// Taints are set when the Node is created.
	Taints []*corev1.Taint
	// PodCIDR is the node's pod CIDR, given to the runtime.
	PodCIDR string
	// HostIP is the node's InternalIP (default 127.0.0.1).
	HostIP string
	// LogDir holds the pods' log directories (default a temp dir).
	LogDir string
	// RootDir holds the pods' volumes, as the kubelet's root directory:
	// <RootDir>/pods/<uid>/volumes/<plugin>/<name> (default a temp dir).
	RootDir string
	// LogPort is the port of the LogServer serving this node's logs, put in
	// the Node's status.daemonEndpoints.kubeletEndpoint (0: none).
	LogPort int32
	// LeaseDuration is the node Lease's duration (default 40s); it is
	// renewed every quarter of it.
	LeaseDuration time.Duration
	// StatusInterval is how often the node status is computed (default
	// 10s); it is written when it changed or a minute passed.
	StatusInterval time.Duration
	// RelistInterval is how often the runtime's containers are listed to
	// notice exits (default 1s).
	RelistInterval time.Duration
	// ResyncInterval is how often every pod is synced even without an
	// event (default 30s): it heals missed events and lost status writes.
	ResyncInterval time.Duration
	// ConfigMapAndSecretChangeDetectionStrategy is how the ConfigMaps and
	// Secrets of the pods' volumes and environments are read, the
	// kubelet's configuration field of that name: StrategyWatch (the
	// default) keeps a single-object watch on each one the node's pods
	// use and reads from it; StrategyCache gets each at most once per
	// half ResyncInterval; StrategyGet gets it at every read.
	ConfigMapAndSecretChangeDetectionStrategy string
	// Backoff is the restart and image pull back-off (default 10s..5m).
	Backoff Backoff
	// Workers sync pods in parallel (default 4).
	Workers int
	// CgroupParent is given to sandboxes (containerd needs one it may use).
	CgroupParent string
	// HostNetwork runs every pod in the node's network namespace (no CNI
	// needed, as the containerd tests do).
	HostNetwork bool
	// ClusterDNS are the cluster DNS servers' addresses and ClusterDomain
	// its zone (the kubelet's --cluster-dns and --cluster-domain): pods
	// with dnsPolicy ClusterFirst get them in their resolv.conf (see
	// podDNS). Without ClusterDNS such pods fall back to Default, with a
	// MissingClusterDNS warning.
	ClusterDNS    []string
	ClusterDomain string
	// ResolvConf is the host resolv.conf pods with dnsPolicy Default get
	// (default /etc/resolv.conf); NoResolvConf uses none (the kubelet's
	// --resolv-conf="").
	ResolvConf   string
	NoResolvConf bool
	// CNIConfDir, when set (and HostNetwork is not), is the runtime's CNI
	// configuration directory (containerd's default is /etc/cni/net.d):
	// before it runs pods the agent writes its node's network there
	// (CNIConfFile: a bridge over PodCIDR with host-local addresses kept
	// under RootDir/cni, portmap for hostPorts; see ClusterCIDR for NAT),
	// so every pod without hostNetwork gets its own network namespace
	// and an address from PodCIDR. Empty: the agent writes none, and
	// the runtime's own configuration, if any, decides.
	CNIConfDir string
	// CNIBridge is the bridge of that network (default DefaultCNIBridge);
	// each node on one host needs its own.
	CNIBridge string
	// ClusterCIDR is the pod network of the whole cluster, which holds
	// every node's PodCIDR: with CNIConfDir, what the node's pods send
	// outside it is masqueraded by the host (an iptables nat rule), what
	// they send inside it is not (default PodCIDR alone).
	ClusterCIDR string
	// Version is reported as the kubelet version.
	Version string
	// Logger; nil discards.
	Logger *slog.Logger
	// TracerProvider records the pod syncs, probes and status updates,
	// continuing each pod's trace (see internal/telemetry); nil uses the
	// global one.
	TracerProvider trace.TracerProvider
}

// Agent is one node agent.
type Agent struct {
	cfg       Config
	log       *slog.Logger
	pods      *client.Client[*corev1.Pod]
	nodes     *client.Client[*corev1.Node]
	leases    *client.Client[*coordv1.Lease]
	objects   envObjects // ConfigMaps and Secrets of containers' environments
	claims    *client.Client[*corev1.PersistentVolumeClaim]
	volumes   *client.Client[*corev1.PersistentVolume]
	volObjs   envObjects      // the same for volumes
	watches   *watchedObjects // both, with the Watch strategy (else nil)
	tokens    tokenSource     // ServiceAccount tokens of projected volumes
	rec       *client.Recorder
	informer  *client.Informer[*corev1.Pod]
	queue     client.Queue
	simulated bool
	rtName    string
	rtVersion string

	tracer trace.Tracer

	mu      sync.Mutex
	records map[string]*podRecord // by namespace/name
	// traced is, per pod, the trace annotation a sync last continued: a
	// change is followed into its trace once, not at every resync.
	traced map[string]string
}

// New checks cfg and returns an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" || cfg.Conn == nil || cfg.Runtime == nil {
		return nil, errors.New("nodeagent: NodeName, Conn and Runtime are required")
	}
	if cfg.HostIP == "" {
		cfg.HostIP = "127.0.0.1"
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 10 * time.Second
	}
	if cfg.RelistInterval <= 0 {
		cfg.RelistInterval = time.Second
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = 30 * time.Second
	}
	switch cfg.ConfigMapAndSecretChangeDetectionStrategy {
	case "":
		cfg.ConfigMapAndSecretChangeDetectionStrategy = StrategyWatch
	case StrategyWatch, StrategyCache, StrategyGet:
	default:
		return nil, fmt.Errorf("nodeagent: configMapAndSecretChangeDetectionStrategy %q: want %s, %s or %s",
			cfg.ConfigMapAndSecretChangeDetectionStrategy, StrategyWatch, StrategyCache, StrategyGet)
	}
	if cfg.Backoff.Base <= 0 || cfg.Backoff.Max < cfg.Backoff.Base {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.CNIBridge == "" {
		cfg.CNIBridge = DefaultCNIBridge
	}
	if cfg.Version == "" {
		cfg.Version = "v0.0.0-kplane"
	}
	if cfg.LogDir == "" {
		d, err := os.MkdirTemp("", "kplane-pod-logs-")
		if err != nil {
			return nil, fmt.Errorf("nodeagent: %w", err)
		}
		cfg.LogDir = d
	}
	if cfg.RootDir == "" {
		d, err := os.MkdirTemp("", "kplane-agent-root-")
		if err != nil {
			return nil, fmt.Errorf("nodeagent: %w", err)
		}
		cfg.RootDir = d
	} else if err := os.MkdirAll(cfg.RootDir, 0o750); err != nil {
		// As the kubelet, which makes its root directory when it is absent.
		return nil, fmt.Errorf("nodeagent: root directory: %w", err)
	}
	if _, ok := cfg.Capacity["ephemeral-storage"]; !ok {
		// As the kubelet: the size of the filesystem holding its root
		// directory, so that pods requesting ephemeral-storage fit.
		var st unix.Statfs_t
		if err := unix.Statfs(cfg.RootDir, &st); err == nil {
			cfg.Capacity = maps.Clone(cfg.Capacity)
			if cfg.Capacity == nil {
				cfg.Capacity = map[string]string{}
			}
			cfg.Capacity["ephemeral-storage"] = strconv.FormatInt(int64(st.Blocks)*int64(st.Bsize), 10)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	log = log.With("node", cfg.NodeName)
	cfg.Conn = timeoutConn{ClientConnInterface: cfg.Conn, d: apiTimeout}
	a := &Agent{cfg: cfg, log: log, records: map[string]*podRecord{}, traced: map[string]string{},
		tracer: cfg.TracerProvider.Tracer("github.com/kplane/kplane/nodeagent")}
	var err error
	if a.pods, err = client.New[*corev1.Pod](cfg.Conn); err != nil {
		return nil, err
	}
	if a.nodes, err = client.New[*corev1.Node](cfg.Conn); err != nil {
		return nil, err
	}
	if a.leases, err = client.New[*coordv1.Lease](cfg.Conn); err != nil {
		return nil, err
	}
	cms, err := client.New[*corev1.ConfigMap](cfg.Conn)
	if err != nil {
		return nil, err
	}
	secrets, err := client.New[*corev1.Secret](cfg.Conn)
	if err != nil {
		return nil, err
	}
	switch cfg.ConfigMapAndSecretChangeDetectionStrategy {
	case StrategyWatch:
		a.watches = newWatchedObjects(cms, secrets, cfg.ResyncInterval, log)
		a.objects, a.volObjs = a.watches, a.watches
	case StrategyCache:
		// Half the resync interval: every refresh of a pod's volumes (at
		// most one per resync) sees content at most that old.
		a.objects = newTTLObjects(apiObjects{configMaps: cms, secrets: secrets}, cfg.ResyncInterval/2)
		a.volObjs = a.objects
	case StrategyGet:
		a.objects = apiObjects{configMaps: cms, secrets: secrets}
		a.volObjs = a.objects
	}
	if a.claims, err = client.New[*corev1.PersistentVolumeClaim](cfg.Conn); err != nil {
		return nil, err
	}
	if a.volumes, err = client.New[*corev1.PersistentVolume](cfg.Conn); err != nil {
		return nil, err
	}
	a.tokens = apiTokens{client: authenticationv1.NewAuthenticationServiceClient(cfg.Conn)}
	events, err := client.New[*corev1.Event](cfg.Conn)
	if err != nil {
		return nil, err
	}
	// Events as the kubelet records them: source "kubelet" on this node,
	// written in the background (Run) as the kubelet's event broadcaster
	// does, so that a pod's sync — and its status write — does not wait for
	// its Pulled, Created and Started events to be stored. One writer per
	// pod worker: a node starts a few pods a second at most.
	a.rec = client.NewRecorder(client.RecorderConfig{Sink: events, Component: "kubelet", Host: cfg.NodeName, Logger: log, Writers: cfg.Workers})
	a.informer = client.NewInformer(client.ListWatch(a.pods, "", "", "spec.nodeName="+cfg.NodeName, 500),
		client.InformerOptions[*corev1.Pod]{Logger: log})
	return a, nil
}

// NodeName is the agent's node.
func (a *Agent) NodeName() string { return a.cfg.NodeName }

// Simulated reports whether the runtime is the built-in one (known once Run
// has met the runtime).
func (a *Agent) Simulated() bool { return a.simulated }

// Run registers the node and runs the agent until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.cfg.Runtime.WaitReady(ctx, 200*time.Millisecond); err != nil {
		return fmt.Errorf("nodeagent: runtime not ready: %w", err)
	}
	v, err := a.cfg.Runtime.Version(ctx)
	if err != nil {
		return fmt.Errorf("nodeagent: runtime version: %w", err)
	}
	a.rtName, a.rtVersion = v.GetRuntimeName(), v.GetRuntimeVersion()
	a.simulated = a.rtName == simruntime.RuntimeName
	if a.cfg.PodCIDR != "" {
		if err := a.cfg.Runtime.UpdatePodCIDR(ctx, a.cfg.PodCIDR); err != nil {
			return fmt.Errorf("nodeagent: give the runtime the pod CIDR: %w", err)
		}
	}
	if a.cfg.CNIConfDir != "" && !a.cfg.HostNetwork {
		if a.cfg.PodCIDR == "" {
			return errors.New("nodeagent: a CNI network needs the node's pod CIDR")
		}
		if err := writeCNIConfig(a.cfg.CNIConfDir, a.cfg.PodCIDR, a.cfg.CNIBridge, filepath.Join(a.cfg.RootDir, "cni", "networks")); err != nil {
			return err
		}
		if err := ensureMasquerade(ctx, a.cfg.NodeName, a.cfg.PodCIDR, nonMasqueradeCIDR(a.cfg.PodCIDR, a.cfg.ClusterCIDR)); err != nil {
			return err
		}
		a.log.Info("CNI network written", "dir", a.cfg.CNIConfDir, "podCIDR", a.cfg.PodCIDR, "bridge", a.cfg.CNIBridge)
		if first := earlierCNIConfigs(a.cfg.CNIConfDir); len(first) > 0 {
			a.log.Warn("the runtime will use another CNI network, which sorts first in its directory; pods may not get addresses from the pod CIDR",
				"dir", a.cfg.CNIConfDir, "files", first, "ours", CNIConfFile)
		}
	}
	if err := a.register(ctx); err != nil {
		return err
	}
	// A failed sync is retried after a second (sooner if it asked to be),
	// however often it failed.
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods-" + a.cfg.NodeName})
	enqueue := func(p *corev1.Pod) { a.queue.Add(client.Key(p)) }
	a.informer.AddEventHandler(client.Handler[*corev1.Pod]{
		OnAdd:    enqueue,
		OnUpdate: func(_, p *corev1.Pod) { enqueue(p) },
		OnDelete: enqueue,
	})
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.informer.Run(ctx) })
	g.Go(func() error { a.renewLease(ctx); return nil })
	g.Go(func() error { a.statusLoop(ctx); return nil })
	g.Go(func() error { a.rec.Run(ctx); return nil })
	if a.watches != nil {
		g.Go(func() error { a.watches.run(ctx); return nil })
	}
	// Once the pods are known: remove what was left of pods deleted while
	// the agent was down, then sync pods and watch the runtime.
	synced := make(chan struct{})
	g.Go(func() error {
		if !client.WaitForCacheSync(ctx, a.informer) {
			return nil
		}
		a.collectOrphans(ctx)
		close(synced)
		a.relist(ctx)
		return nil
	})
	g.Go(func() error { a.resync(ctx, synced); return nil })
	g.Go(func() error {
		select {
		case <-ctx.Done():
			a.queue.ShutDown()
			return nil
		case <-synced:
		}
		// RunWorkers shuts the queue down when ctx ends.
		client.RunWorkers(ctx, a.queue, a.cfg.Workers, a.syncPod, a.log)
		return nil
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// resync queues every pod of the node every ResyncInterval.
func (a *Agent) resync(ctx context.Context, synced <-chan struct{}) {
	select {
	case <-ctx.Done():
		return
	case <-synced:
	}
	t := time.NewTicker(a.cfg.ResyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, k := range a.informer.Store().Keys() {
			a.queue.Add(k)
		}
	}
}

// relist lists the runtime's containers every RelistInterval and queues
// the pods whose containers exited (the kubelet's PLEG). Exits, and a
// runtime losing track of a container (UNKNOWN), are the only changes the
// agent does not make itself: it creates, starts, stops and removes
// containers in its syncs, which look at the result. So the relist asks the
// runtime for the exited and unknown containers only: on a node whose pods
// run, two nearly empty answers a second instead of every container with
// its labels (with a hundred simulated nodes in one process, listing them
// all was 6 % of its CPU).
func (a *Agent) relist(ctx context.Context) {
	seen := map[string]runtimeapi.ContainerState{}
	t := time.NewTicker(a.cfg.RelistInterval)
	defer t.Stop()
	states := []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_UNKNOWN}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var now map[string]runtimeapi.ContainerState // nil while nothing exited
		failed := false
		for _, st := range states {
			cs, err := a.cfg.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: st}})
			if err != nil {
				a.log.Debug("relist failed", "err", err)
				failed = true
				break
			}
			for _, c := range cs {
				if now == nil {
					now = make(map[string]runtimeapi.ContainerState, len(cs))
				}
				now[c.GetId()] = c.GetState()
				// News: a container newly exited (or unknown), or one
				// that went from unknown to exited.
				if old, ok := seen[c.GetId()]; !ok || old != c.GetState() {
					l := c.GetLabels()
					if l[labelNode] == a.cfg.NodeName {
						a.queue.Add(client.KeyOf(l[labelPodNamespace], l[labelPodName]))
					}
				}
			}
		}
		if !failed {
			seen = now
		}
	}
}

// Runtime labels the agent puts on sandboxes and containers.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
	labelNode          = "node.kplane.io/name"
)

// nodeInfo builds the Node's system info.
func (a *Agent) nodeInfo() *corev1.NodeSystemInfo {
	return &corev1.NodeSystemInfo{
		MachineId:               a.cfg.NodeName,
		SystemUuid:              a.cfg.NodeName,
		BootId:                  a.cfg.NodeName,
		KernelVersion:           "",
		OsImage:                 "kplane",
		ContainerRuntimeVersion: a.rtName + "://" + a.rtVersion,
		KubeletVersion:          a.cfg.Version,
		OperatingSystem:         runtime.GOOS,
		Architecture:            runtime.GOARCH,
	}
}

// podLogDir is where a pod's container logs go.
func (a *Agent) podLogDir(p *corev1.Pod) string {
	m := p.GetMetadata()
	return filepath.Join(a.cfg.LogDir, m.GetNamespace()+"_"+m.GetName()+"_"+m.GetUid())
}
