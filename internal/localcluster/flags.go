// This file holds the flags of `kplane up` and `kplane certs`, each
// filling its UpConfig or CertsConfig field.

package localcluster

import "github.com/spf13/pflag"

// AddFlags adds `kplane up`'s flags to f, filling c. On the command line 0
// schedulers, controller managers or nodes runs none, where UpConfig's 0
// is the default: the command turns them into -1.
func (c *UpConfig) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&c.DataDir, "data-dir", ".kplane", "directory holding the store members' data, the credentials, the kubeconfig and every process's log")
	f.IntVar(&c.StoreMembers, "store-members", 3, "number of store members")
	f.IntVar(&c.APIServers, "apiservers", 2, "number of API service replicas")
	f.StringArrayVar(&c.APIServerArgs, "apiserver-arg", nil, "a flag for every API service replica, e.g. --apiserver-arg=--oidc-issuer-url=https://idp.example.com; repeatable; it comes after kplane up's own flags")
	f.IntVar(&c.Schedulers, "schedulers", 2, "number of scheduler replicas (leader-elected); 0 runs none (for Kubernetes' kube-scheduler)")
	f.IntVar(&c.ControllerManagers, "controller-managers", 2, "number of controller manager replicas (leader-elected); 0 runs none (for Kubernetes' kube-controller-manager)")
	f.Float64Var(&c.ControllerAPIQPS, "controllers-kube-api-qps", 0, "the controller managers' --kube-api-qps: calls per second to the API service (0: no limit)")
	f.IntVar(&c.ControllerAPIBurst, "controllers-kube-api-burst", 0, "the controller managers' --kube-api-burst (0: 1.5 × the qps)")
	f.StringVar(&c.ClusterCIDR, "cluster-cidr", "", "the simulated nodes' pod subnets are carved from this CIDR (default the node agent's 10.244.0.0/16, room for 256 nodes at /24; e.g. 10.128.0.0/10 for thousands)")
	f.IntVar(&c.NodeCIDRMaskSize, "node-cidr-mask-size", 0, "prefix length of each node's pod subnet (default 24)")
	f.IntVar(&c.Nodes, "nodes", 3, "number of simulated nodes (one node agent process, built-in runtime); with --runtime containerd as many as --cri-socket is given; 0 runs no node agent (nodes registered by e.g. KWOK)")
	f.StringVar(&c.Runtime, "runtime", "builtin", "node runtime: builtin (simulated nodes) or containerd (real nodes node-1..N, one per --cri-socket; pods get IPs from their node's pod CIDR through a CNI bridge)")
	f.StringArrayVar(&c.CRISockets, "cri-socket", nil, "with --runtime containerd: a containerd's CRI socket, e.g. /run/containerd/containerd.sock; repeat it for more nodes, one containerd each (node-i runs on the i-th)")
	f.StringVar(&c.CgroupParent, "cgroup-parent", "", "with --runtime containerd: cgroup parent of the pods' sandboxes")
	f.StringArrayVar(&c.CNIConfDirs, "cni-conf-dir", nil, "with --runtime containerd: a containerd's CNI configuration directory (its plugins.cri.cni.conf_dir), where node-i's agent writes its pod network; once per --cri-socket, in the same order (default with one node: "+DefaultCNIConfDir+")")
	f.StringArrayVar(&c.CNIBridges, "cni-bridge", nil, "with --runtime containerd: the Linux bridge of node-i's pod network, once per node in order (default kplane0, kplane1, ...)")
	f.BoolVar(&c.HostNetwork, "host-network", false, "with --runtime containerd: run every pod in the host's network namespace (no CNI network is written; pods share the host's IP and ports)")
	f.DurationVar(&c.Restart.Backoff, "restart-backoff", DefaultRestartBackoff, "wait before restarting a process that failed")
	f.DurationVar(&c.Restart.MaxBackoff, "restart-max-backoff", DefaultRestartMaxBackoff, "cap of the wait, which doubles with every failure in a row")
	f.DurationVar(&c.Restart.ResetAfter, "restart-reset-after", DefaultRestartResetAfter, "a process that ran this long before failing is restarted after --restart-backoff again")
	f.IntVar(&c.BasePort, "base-port", 2379, "store member i serves clients on base-port+2i and peers on base-port+2i+1, followed by the API services, the gateway and the node agents' log servers (fixed, so a restart finds its peers); 0 picks free ports")
}

// CompleteFlags finishes what the flags gave (nodesSet: --nodes was
// given): with --runtime containerd a node per --cri-socket, and 0
// schedulers, controller managers or nodes on the command line run none of
// them (UpConfig's 0 is the default), so Kubernetes' own component can
// stand in.
func (c *UpConfig) CompleteFlags(nodesSet bool) {
	if c.Runtime == "containerd" && !nodesSet {
		c.Nodes = max(len(c.CRISockets), 1)
	}
	for _, n := range []*int{&c.Schedulers, &c.ControllerManagers, &c.Nodes} {
		if *n == 0 {
			*n = -1
		}
	}
}

// AddFlags adds `kplane certs`' flags to f, filling c.
func (c *CertsConfig) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&c.DataDir, "data-dir", ".kplane", "directory to write pki/ (and kubeconfig) into")
	f.StringSliceVar(&c.Names, "hosts", nil, "extra DNS names or IPs of every server certificate (comma-separated)")
	f.StringSliceVar(&c.StoreMembers, "store-members", nil, "store member names to issue client-URL and peer certificates for (comma-separated)")
	f.IntVar(&c.APIServers, "apiservers", 2, "number of API service serving certificates (apiserver-1..N)")
	f.IntVar(&c.Nodes, "nodes", 3, "number of node client certificates (nodes/node-1..N)")
	f.StringVar(&c.GatewayURL, "gateway-url", "", "gateway URL for an admin kubeconfig (empty: none)")
	f.StringVar(&c.Kubeconfig, "kubeconfig", "", "where to write the admin kubeconfig (default <data-dir>/kubeconfig)")
	f.BoolVar(&c.IfMissing, "if-missing", false, "do nothing when <data-dir>/pki/ca.crt and store-ca.crt already exist; fail when only ca.crt does (credentials of an older kplane certs)")
}
