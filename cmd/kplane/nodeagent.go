// This file holds `kplane nodeagent`: kplane's kubelet, for one node or —
// with --nodes N — N simulated nodes in one process, each with its own
// identity (system:node:<name>) and, unless --cri-socket is given, its own
// built-in runtime in this process.

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/nodeagent"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/simruntime"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

type nodeAgentFlags struct {
	server, caFile, certFile, keyFile, certDir string
	token, tokenFile                           string
	plaintext                                  bool
	nodeName, nodePrefix                       string
	nodes                                      int
	criSocket, dataDir                         string
	pullLatency                                time.Duration
	cpu, memory, pods                          string
	labels, taints                             []string
	podCIDR, clusterCIDR                       string
	nodeCIDRMask                               int
	nodeIP, logListen                          string
	logTLSCert, logTLSKey, logClientCA         string
	logUsers                                   []string
	leaseDuration, statusInterval, resync      time.Duration
	changeDetection                            string
	backoffBase, backoffMax                    time.Duration
	cgroupParent                               string
	clusterDNS                                 []string
	clusterDomain, resolvConf                  string
	hostNetwork                                bool
	cniConfDir, cniBridge                      string
	logLevel                                   string
	telemetry                                  telemetryFlags
	gcPercent                                  int
	profilingListen                            string
}

func newNodeAgentCommand() *cobra.Command {
	var fl nodeAgentFlags
	cmd := &cobra.Command{
		Use:   "nodeagent",
		Short: "Run the node agent (kplane's kubelet) for one node, or many simulated nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, ip := range fl.clusterDNS {
				if _, err := netip.ParseAddr(ip); err != nil {
					return fmt.Errorf("--cluster-dns: %w", err)
				}
			}
			return runNodeAgents(cmd.Context(), fl)
		},
	}
	host, _ := os.Hostname()
	f := cmd.Flags()
	f.StringVar(&fl.server, "server", "127.0.0.1:6443", serverFlagHelp)
	f.StringVar(&fl.caFile, "ca-file", "", "CA bundle to verify the API service's certificate")
	f.StringVar(&fl.certFile, "cert-file", "", "client certificate (CN system:node:<name>, O system:nodes); one node only")
	f.StringVar(&fl.keyFile, "key-file", "", "client key for --cert-file")
	f.StringVar(&fl.certDir, "cert-dir", "", "directory with <node>.crt and <node>.key for each node (one TLS connection per node)")
	f.StringVar(&fl.token, "token", "", "bearer token; one node only")
	f.StringVar(&fl.tokenFile, "token-file", "", "token CSV (the API service's format: token,user,uid,groups); each node uses the token of user system:node:<name>, all over one connection")
	f.BoolVar(&fl.plaintext, "insecure-plaintext", false, "plaintext gRPC to the API service (local experiments only)")
	f.StringVar(&fl.nodeName, "node-name", host, "the node's name (with --nodes 1)")
	f.IntVar(&fl.nodes, "nodes", 1, "number of nodes to run in this process (named <prefix>1..N when > 1)")
	f.StringVar(&fl.nodePrefix, "node-prefix", "node-", "name prefix of the nodes with --nodes > 1")
	f.StringVar(&fl.criSocket, "cri-socket", "", "CRI runtime socket (e.g. containerd's); empty starts the built-in simulated runtime per node")
	f.StringVar(&fl.dataDir, "data-dir", "/var/lib/kplane/nodeagent", "where pod logs (<node>/pods) and volumes (<node>/root/pods/<uid>/volumes) go")
	f.DurationVar(&fl.pullLatency, "pull-latency", 0, "built-in runtime: how long an image pull takes")
	f.StringVar(&fl.cpu, "cpu", "4", "node cpu capacity")
	f.StringVar(&fl.memory, "memory", "8Gi", "node memory capacity")
	f.StringVar(&fl.pods, "pods", "110", "node pod capacity")
	f.StringSliceVar(&fl.labels, "labels", nil, "node labels key=value (repeatable, comma-separated)")
	f.StringSliceVar(&fl.taints, "register-with-taints", nil, "taints key=value:Effect set when the node is created")
	f.StringVar(&fl.podCIDR, "pod-cidr", "", "the node's pod CIDR (one node)")
	f.StringVar(&fl.clusterCIDR, "cluster-cidr", nodeagent.DefaultClusterCIDR, "with no --pod-cidr, node i (from 1) gets the i-th subnet of this CIDR")
	f.IntVar(&fl.nodeCIDRMask, "node-cidr-mask-size", nodeagent.DefaultNodeCIDRMaskSize, "prefix length of each node's subnet of --cluster-cidr")
	f.StringVar(&fl.nodeIP, "node-ip", "127.0.0.1", "the node's InternalIP")
	f.StringVar(&fl.logListen, "log-listen", "127.0.0.1:10250", "address of the HTTPS server for container logs (GET /containerLogs/{ns}/{pod}/{container}) and the streaming endpoints (/exec, /attach, /portForward), for the API service's pods/log, exec, attach and portforward; empty: none")
	f.StringVar(&fl.logTLSCert, "tls-cert-file", "", "serving certificate of the log server (empty: a self-signed one, as the kubelet makes)")
	f.StringVar(&fl.logTLSKey, "tls-private-key-file", "", "key for --tls-cert-file")
	f.StringVar(&fl.logClientCA, "client-ca-file", "", "CA that signs the certificates of clients of the log server (empty: every log request is refused)")
	f.StringSliceVar(&fl.logUsers, "log-allowed-users", []string{"kube-apiserver-kubelet-client"}, "certificate CNs that may read logs and open exec, attach and port-forward streams (the API service's --kubelet-client-certificate)")
	f.DurationVar(&fl.leaseDuration, "lease-duration", 40*time.Second, "node Lease duration (renewed every quarter of it)")
	f.DurationVar(&fl.statusInterval, "status-interval", 10*time.Second, "how often the node status is computed")
	f.DurationVar(&fl.resync, "resync-interval", 30*time.Second, "how often every pod is synced even without an event")
	f.StringVar(&fl.changeDetection, "configmap-and-secret-change-detection-strategy", nodeagent.StrategyWatch,
		"how the ConfigMaps and Secrets of pods' volumes and environments are read (the kubelet's configMapAndSecretChangeDetectionStrategy): Watch (a watch on each one the node's pods use), Cache (a get at most every half --resync-interval) or Get (a get at every read)")
	f.DurationVar(&fl.backoffBase, "backoff-base", 10*time.Second, "first restart / image pull back-off")
	f.DurationVar(&fl.backoffMax, "backoff-max", 5*time.Minute, "longest restart / image pull back-off")
	f.StringVar(&fl.cgroupParent, "cgroup-parent", "", "cgroup parent of pod sandboxes")
	f.StringSliceVar(&fl.clusterDNS, "cluster-dns", nil, "cluster DNS server addresses (comma-separated) for pods with dnsPolicy ClusterFirst; none: they fall back to Default (MissingClusterDNS)")
	f.StringVar(&fl.clusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain, put in ClusterFirst pods' search path")
	f.StringVar(&fl.resolvConf, "resolv-conf", nodeagent.DefaultResolvConf, "the host resolv.conf that pods with dnsPolicy Default get; empty: none (nameserver 127.0.0.1, search .)")
	f.BoolVar(&fl.hostNetwork, "host-network", false, "run every pod in the node's network namespace (no CNI needed)")
	f.StringVar(&fl.cniConfDir, "cni-conf-dir", "", "with --cri-socket: the runtime's CNI configuration directory (containerd's default /etc/cni/net.d), where the agent writes its node's network (05-kplane.conflist: a bridge over the pod CIDR, host-local addresses, portmap for hostPorts; and an iptables rule masquerading what pods send outside --cluster-cidr) so that pods get their own network namespace and IP; empty: the runtime's own configuration decides")
	f.StringVar(&fl.cniBridge, "cni-bridge", nodeagent.DefaultCNIBridge, "with --cni-conf-dir: the Linux bridge of the node's pod network (one per node on a host)")
	f.StringVar(&fl.logLevel, "log-level", "info", "debug, info, warn or error")
	f.IntVar(&fl.gcPercent, "gc-percent", nodeAgentGCPercent, "Go's GC target (runtime/debug.SetGCPercent): the heap may grow this many percent over the live heap before a collection; negative turns the collector off. GOGC in the environment, when set, wins; GOMEMLIMIT still caps the heap")
	f.StringVar(&fl.profilingListen, "profiling-listen", "", "serve Go's net/http/pprof profiles on this address (e.g. 127.0.0.1:6061); empty disables them")
	fl.telemetry.register(f)
	return cmd
}

// nodeTokens reads the tokens of users system:node:* from a token CSV.
func nodeTokens(file string) (map[string]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	out := map[string]string{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(rec) >= 2 && strings.HasPrefix(rec[1], "system:node:") {
			out[strings.TrimPrefix(rec[1], "system:node:")] = rec[0]
		}
	}
}

func parseTaints(specs []string) ([]*corev1.Taint, error) {
	var out []*corev1.Taint
	for _, s := range specs {
		kv, effect, ok := strings.Cut(s, ":")
		if !ok || effect == "" {
			return nil, fmt.Errorf("taint %q: want key=value:Effect", s)
		}
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, &corev1.Taint{Key: k, Value: v, Effect: effect})
	}
	return out, nil
}

// logServerTLS is the log server's TLS: --tls-cert-file, or a self-signed
// certificate for the node IP and the host name (as the kubelet makes one),
// verifying clients against --client-ca-file.
func logServerTLS(fl nodeAgentFlags) (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	if fl.logTLSCert != "" {
		if cert, err = tls.LoadX509KeyPair(fl.logTLSCert, fl.logTLSKey); err != nil {
			return nil, err
		}
	} else if cert, err = selfSigned(fl.nodeIP); err != nil {
		return nil, err
	}
	var pool *x509.CertPool
	if fl.logClientCA != "" {
		if pool, err = loadPool(fl.logClientCA); err != nil {
			return nil, err
		}
	}
	return nodeagent.LogServerTLS(cert, pool), nil
}

// selfSigned makes a throw-away serving certificate for ip and the host
// name, valid for a year.
func selfSigned(ip string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: host + "@" + strconv.FormatInt(now.Unix(), 10)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{host},
	}
	if a := net.ParseIP(ip); a != nil {
		tmpl.IPAddresses = []net.IP{a}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func runNodeAgents(ctx context.Context, fl nodeAgentFlags) error {
	log, err := newLogger(fl.logLevel)
	if err != nil {
		return err
	}
	if fl.nodes < 1 {
		return fmt.Errorf("--nodes must be at least 1")
	}
	setGCPercent(fl.gcPercent, log)
	if fl.profilingListen != "" {
		stopProfiling, err := serveProfiling(fl.profilingListen, 0, log)
		if err != nil {
			return err
		}
		defer stopProfiling()
	}
	names := []string{fl.nodeName}
	if fl.nodes > 1 {
		names = names[:0]
		for i := 1; i <= fl.nodes; i++ {
			names = append(names, fmt.Sprintf("%s%d", fl.nodePrefix, i))
		}
		if fl.criSocket != "" {
			return fmt.Errorf("--nodes > 1 needs the built-in runtime (no --cri-socket): nodes cannot share a runtime")
		}
	}
	if fl.cniConfDir != "" && fl.criSocket == "" {
		return fmt.Errorf("--cni-conf-dir needs a real runtime (--cri-socket): the built-in one gives pod IPs itself")
	}
	if (fl.certFile != "" || fl.token != "") && len(names) > 1 {
		return fmt.Errorf("--cert-file and --token are for one node; use --cert-dir or --token-file with --nodes")
	}
	tel, stop, err := fl.telemetry.start(ctx, "nodeagent", strings.Join(names, ","), true, log)
	if err != nil {
		return err
	}
	defer stop()
	labels := map[string]string{}
	for _, l := range fl.labels {
		k, v, _ := strings.Cut(l, "=")
		labels[k] = v
	}
	taints, err := parseTaints(fl.taints)
	if err != nil {
		return err
	}

	// Connections: one per node with certificates, one shared with tokens.
	baseTLS, err := clientTLS(fl.caFile, "", "")
	if err != nil {
		return err
	}
	dial := func(t *tls.Config) (*grpc.ClientConn, error) {
		creds := credentials.NewTLS(t)
		if fl.plaintext {
			creds = insecure.NewCredentials()
		}
		return client.Dial(client.SplitServers(fl.server), grpc.WithTransportCredentials(creds), tel.DialOption())
	}
	var tokens map[string]string
	if fl.tokenFile != "" {
		if tokens, err = nodeTokens(fl.tokenFile); err != nil {
			return err
		}
	}
	var shared *grpc.ClientConn
	connFor := func(name string) (grpc.ClientConnInterface, error) {
		switch {
		case fl.certDir != "" || fl.certFile != "":
			cert, key := fl.certFile, fl.keyFile
			if fl.certDir != "" {
				cert, key = filepath.Join(fl.certDir, name+".crt"), filepath.Join(fl.certDir, name+".key")
			}
			t, err := clientTLS(fl.caFile, cert, key)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", name, err)
			}
			return dial(t)
		case fl.token != "" || tokens != nil:
			tok := fl.token
			if tokens != nil {
				if tok = tokens[name]; tok == "" {
					return nil, fmt.Errorf("node %s: no token for system:node:%s in %s", name, name, fl.tokenFile)
				}
			}
			if shared == nil {
				if shared, err = dial(baseTLS); err != nil {
					return nil, err
				}
			}
			return nodeagent.WithToken(shared, tok), nil
		}
		return nil, fmt.Errorf("no credentials: give --cert-file/--key-file, --cert-dir, --token or --token-file")
	}

	var logServer *nodeagent.LogServer
	var logPort int32
	var logLis net.Listener
	if fl.logListen != "" {
		if logLis, err = net.Listen("tcp", fl.logListen); err != nil {
			return fmt.Errorf("log server: %w", err)
		}
		logPort = int32(logLis.Addr().(*net.TCPAddr).Port)
		t, err := logServerTLS(fl)
		if err != nil {
			logLis.Close()
			return fmt.Errorf("log server: %w", err)
		}
		if t.ClientCAs == nil {
			log.Warn("the log server refuses every request: no --client-ca-file")
		}
		logLis = tls.NewListener(logLis, t)
		logServer = nodeagent.NewLogServer().RequireClientCert(fl.logUsers...)
	}

	g, ctx := errgroup.WithContext(ctx)
	for i, name := range names {
		conn, err := connFor(name)
		if err != nil {
			return err
		}
		dir := filepath.Join(fl.dataDir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		cidr := fl.podCIDR
		if cidr == "" || len(names) > 1 {
			if cidr, err = nodeagent.NodeSubnet(fl.clusterCIDR, fl.nodeCIDRMask, i+1); err != nil {
				return err
			}
		}
		criCfg := cri.Config{Socket: fl.criSocket, TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider()}
		if fl.criSocket == "" {
			// The built-in runtime lives in this process: the agent calls
			// it directly rather than over a socket of its own (half of
			// this process's CPU with 100 nodes went to CRI gRPC; see
			// nodeagent/cri/local.go). `kplane simruntime` still serves
			// it on a socket for other CRI clients.
			rt, err := simruntime.New(simruntime.Config{Name: name, PodCIDR: cidr, PullLatency: fl.pullLatency, Logger: log})
			if err != nil {
				return err
			}
			// Its streaming server (exec, attach, port-forward) stops with it.
			defer rt.Close()
			criCfg.Server = rt
		}
		rc, err := cri.New(criCfg)
		if err != nil {
			return err
		}
		defer rc.Close()
		a, err := nodeagent.New(nodeagent.Config{
			NodeName:       name,
			Conn:           conn,
			Runtime:        rc,
			Capacity:       map[string]string{"cpu": fl.cpu, "memory": fl.memory, "pods": fl.pods},
			Labels:         labels,
			Taints:         taints,
			PodCIDR:        cidr,
			HostIP:         fl.nodeIP,
			LogDir:         filepath.Join(dir, "pods"),
			RootDir:        filepath.Join(dir, "root"),
			LogPort:        logPort,
			LeaseDuration:  fl.leaseDuration,
			StatusInterval: fl.statusInterval,
			ResyncInterval: fl.resync,
			ConfigMapAndSecretChangeDetectionStrategy: fl.changeDetection,
			Backoff:        nodeagent.Backoff{Base: fl.backoffBase, Max: fl.backoffMax},
			CgroupParent:   fl.cgroupParent,
			HostNetwork:    fl.hostNetwork,
			ClusterDNS:     fl.clusterDNS,
			ClusterDomain:  fl.clusterDomain,
			ResolvConf:     fl.resolvConf,
			NoResolvConf:   fl.resolvConf == "",
			CNIConfDir:     fl.cniConfDir,
			CNIBridge:      fl.cniBridge,
			ClusterCIDR:    fl.clusterCIDR,
			Logger:         log,
			TracerProvider: tel.TracerProvider(),
		})
		if err != nil {
			return err
		}
		if logServer != nil {
			logServer.Add(a)
		}
		g.Go(func() error { return a.Run(ctx) })
	}
	if logServer != nil {
		srv := &http.Server{Handler: logServer, ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error {
			<-ctx.Done()
			return srv.Close()
		})
		g.Go(func() error {
			if err := srv.Serve(logLis); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	log.Info("node agents running", "nodes", len(names), "server", fl.server, "logs", fl.logListen)
	err = g.Wait()
	if shared != nil {
		shared.Close()
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
