// This file holds `kplane up`: a local HA control plane on loopback, every
// component a process of this binary.

package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/jaeger"
	"github.com/kplane/kplane/internal/localcluster"
)

func newUpCommand() *cobra.Command {
	var (
		cfg        localcluster.UpConfig
		withJaeger bool
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a local HA control plane on loopback until Ctrl-C",
		Long: `Run a local HA control plane on loopback, each component its own process:
store members (Raft), API service replicas, the HTTPS gateway, leader-elected
schedulers and controller managers, a node agent with simulated nodes
(built-in runtime), and the cluster DNS (one kplane dns on a free loopback
port, the kube-system/kube-dns Service at 10.96.0.10 that pods'
resolv.conf names). It generates two CAs and a certificate per component in
<data-dir>/pki, replacing any there (the store's client and peer ports, the
API services and the gateway all serve TLS and verify client certificates;
the store trusts only store-ca.crt, which signs only its members' and its
clients' certificates, and Raft only its members), waits until the cluster is
healthy, writes <data-dir>/kubeconfig (admin, in system:masters) and keeps
every process's log in <data-dir>. It supervises every process as
systemd's Restart=on-failure would: one that fails (a non-zero exit, as a
scheduler that lost its Lease, or a signal such as SIGKILL) is restarted after --restart-backoff, doubling up to
--restart-max-backoff while it keeps failing and reset once it has run for
--restart-reset-after; its log is appended to, and kplane status shows its
new PID and its restart count. The other replicas carry on meanwhile.
Ctrl-C, or kplane down from another terminal, stops everything (nothing is
restarted then).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if cfg.Runtime == "containerd" && !cmd.Flags().Changed("nodes") {
				cfg.Nodes = max(len(cfg.CRISockets), 1)
			}
			// 0 on the command line runs none of them (the Config's 0 is
			// the default), so Kubernetes' own component can stand in.
			for _, n := range []*int{&cfg.Schedulers, &cfg.ControllerManagers, &cfg.Nodes} {
				if *n == 0 {
					*n = -1
				}
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Starting kplane in %s ...\n", cfg.DataDir)
			if withJaeger {
				jcfg := jaeger.Config{Dir: filepath.Join(cfg.DataDir, "jaeger")}
				if cfg.BasePort != 0 {
					jcfg.QueryPort, jcfg.OTLPPort, jcfg.OTLPHTTPPort = 16686, 4317, 4318 // Jaeger's defaults, kplane trace's too
				}
				j, err := jaeger.Start(ctx, jcfg)
				if err != nil {
					return fmt.Errorf("--jaeger: %w", err)
				}
				defer j.Stop()
				cfg.Env = append(cfg.Env, j.Env()...)
				fmt.Fprintf(out, "Jaeger query API %s (log %s); every component sends its spans there\n", j.QueryURL, j.LogPath)
				fmt.Fprintf(out, "  kplane trace --kubeconfig %s --jaeger-url %s deployment/web\n", filepath.Join(cfg.DataDir, "kubeconfig"), j.QueryURL)
			}
			c, err := localcluster.Up(ctx, cfg)
			if err != nil {
				return err
			}
			defer c.Stop()
			fmt.Fprintf(out, "\nkplane is up; logs in %s:\n", cfg.DataDir)
			for _, m := range c.Store.Members {
				fmt.Fprintf(out, "  %-14s pid %-7d client %s  peer %s  metrics %s  log %s\n", m.Name, m.PID(), m.ClientURL, m.PeerURL, m.MetricsAddr, m.LogPath)
			}
			for _, p := range c.Procs {
				fmt.Fprintf(out, "  %-14s pid %-7d %-22s metrics %-20s log %s\n", p.Name, p.PID(), p.Addr, p.MetricsAddr, p.LogPath)
			}
			fmt.Fprintf(out, "\nThe store alone: etcdctl --endpoints=%s --cacert %s --cert %s --key %s member list -w table\n",
				c.Store.Endpoints(), c.Store.CAFile, c.Store.ClientCertFile, c.Store.ClientKeyFile)
			fmt.Fprintf(out, "\nUse it with:\n  kubectl --kubeconfig %s get nodes\n", c.Kubeconfig)
			fmt.Fprintf(out, "  export KUBECONFIG=%s\n", strings.TrimSpace(c.Kubeconfig))
			fmt.Fprintf(out, "\nkplane status --data-dir %s shows it; Ctrl-C or kplane down --data-dir %s stops it.\n", cfg.DataDir, cfg.DataDir)
			return c.Wait(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", ".kplane", "directory holding the store members' data, the credentials, the kubeconfig and every process's log")
	f.IntVar(&cfg.StoreMembers, "store-members", 3, "number of store members")
	f.IntVar(&cfg.APIServers, "apiservers", 2, "number of API service replicas")
	f.StringArrayVar(&cfg.APIServerArgs, "apiserver-arg", nil, "a flag for every API service replica, e.g. --apiserver-arg=--oidc-issuer-url=https://idp.example.com; repeatable; it comes after kplane up's own flags")
	f.IntVar(&cfg.Schedulers, "schedulers", 2, "number of scheduler replicas (leader-elected); 0 runs none (for Kubernetes' kube-scheduler)")
	f.IntVar(&cfg.ControllerManagers, "controller-managers", 2, "number of controller manager replicas (leader-elected); 0 runs none (for Kubernetes' kube-controller-manager)")
	f.Float64Var(&cfg.ControllerAPIQPS, "controllers-kube-api-qps", 0, "the controller managers' --kube-api-qps: calls per second to the API service (0: no limit)")
	f.IntVar(&cfg.ControllerAPIBurst, "controllers-kube-api-burst", 0, "the controller managers' --kube-api-burst (0: 1.5 × the qps)")
	f.StringVar(&cfg.ClusterCIDR, "cluster-cidr", "", "the simulated nodes' pod subnets are carved from this CIDR (default the node agent's 10.244.0.0/16, room for 256 nodes at /24; e.g. 10.128.0.0/10 for thousands)")
	f.IntVar(&cfg.NodeCIDRMaskSize, "node-cidr-mask-size", 0, "prefix length of each node's pod subnet (default 24)")
	f.IntVar(&cfg.Nodes, "nodes", 3, "number of simulated nodes (one node agent process, built-in runtime); with --runtime containerd as many as --cri-socket is given; 0 runs no node agent (nodes registered by e.g. KWOK)")
	f.BoolVar(&withJaeger, "jaeger", false, "also run a loopback Jaeger (built by scripts/install-jaeger.sh; query API on 16686, OTLP on 4317, free ports with --base-port=0) and send every component's spans to it")
	f.StringVar(&cfg.Runtime, "runtime", "builtin", "node runtime: builtin (simulated nodes) or containerd (real nodes node-1..N, one per --cri-socket; pods get IPs from their node's pod CIDR through a CNI bridge)")
	f.StringArrayVar(&cfg.CRISockets, "cri-socket", nil, "with --runtime containerd: a containerd's CRI socket, e.g. /run/containerd/containerd.sock; repeat it for more nodes, one containerd each (node-i runs on the i-th)")
	f.StringVar(&cfg.CgroupParent, "cgroup-parent", "", "with --runtime containerd: cgroup parent of the pods' sandboxes")
	f.StringArrayVar(&cfg.CNIConfDirs, "cni-conf-dir", nil, "with --runtime containerd: a containerd's CNI configuration directory (its plugins.cri.cni.conf_dir), where node-i's agent writes its pod network; once per --cri-socket, in the same order (default with one node: "+localcluster.DefaultCNIConfDir+")")
	f.StringArrayVar(&cfg.CNIBridges, "cni-bridge", nil, "with --runtime containerd: the Linux bridge of node-i's pod network, once per node in order (default kplane0, kplane1, ...)")
	f.BoolVar(&cfg.HostNetwork, "host-network", false, "with --runtime containerd: run every pod in the host's network namespace (no CNI network is written; pods share the host's IP and ports)")
	f.DurationVar(&cfg.Restart.Backoff, "restart-backoff", localcluster.DefaultRestartBackoff, "wait before restarting a process that failed")
	f.DurationVar(&cfg.Restart.MaxBackoff, "restart-max-backoff", localcluster.DefaultRestartMaxBackoff, "cap of the wait, which doubles with every failure in a row")
	f.DurationVar(&cfg.Restart.ResetAfter, "restart-reset-after", localcluster.DefaultRestartResetAfter, "a process that ran this long before failing is restarted after --restart-backoff again")
	f.IntVar(&cfg.BasePort, "base-port", 2379, "store member i serves clients on base-port+2i and peers on base-port+2i+1, followed by the API services, the gateway and the node agents' log servers (fixed, so a restart finds its peers); 0 picks free ports")
	return cmd
}
