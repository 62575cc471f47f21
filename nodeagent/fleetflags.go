// This file holds FleetOptions.AddFlags: `kplane nodeagent`'s flags, each
// filling its FleetOptions field, with the field's default from
// DefaultFleetOptions.

package nodeagent

import (
	"github.com/spf13/pflag"

	"github.com/kplane/kplane/services/client"
)

// AddFlags adds the node agent's flags to f, filling o; call it on
// DefaultFleetOptions so the flags default to them.
func (o *FleetOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Server, "server", o.Server, client.ServerFlagHelp)
	f.StringVar(&o.CAFile, "ca-file", "", "CA bundle to verify the API service's certificate")
	f.StringVar(&o.CertFile, "cert-file", "", "client certificate (CN system:node:<name>, O system:nodes); one node only")
	f.StringVar(&o.KeyFile, "key-file", "", "client key for --cert-file")
	f.StringVar(&o.CertDir, "cert-dir", "", "directory with <node>.crt and <node>.key for each node (one TLS connection per node)")
	f.StringVar(&o.Token, "token", "", "bearer token; one node only")
	f.StringVar(&o.TokenCSV, "token-file", "", "token CSV (the API service's format: token,user,uid,groups); each node uses the token of user system:node:<name>, all over one connection")
	f.BoolVar(&o.Plaintext, "insecure-plaintext", false, "plaintext gRPC to the API service (local experiments only)")
	f.StringVar(&o.NodeName, "node-name", o.NodeName, "the node's name (with --nodes 1)")
	f.IntVar(&o.Nodes, "nodes", o.Nodes, "number of nodes to run in this process (named <prefix>1..N when > 1)")
	f.StringVar(&o.NodePrefix, "node-prefix", o.NodePrefix, "name prefix of the nodes with --nodes > 1")
	f.StringVar(&o.CRISocket, "cri-socket", "", "CRI runtime socket (e.g. containerd's); empty starts the built-in simulated runtime per node")
	f.StringVar(&o.DataDir, "data-dir", o.DataDir, "where pod logs (<node>/pods) and volumes (<node>/root/pods/<uid>/volumes) go")
	f.DurationVar(&o.PullLatency, "pull-latency", 0, "built-in runtime: how long an image pull takes")
	f.StringVar(&o.CPU, "cpu", o.CPU, "node cpu capacity")
	f.StringVar(&o.Memory, "memory", o.Memory, "node memory capacity")
	f.StringVar(&o.Pods, "pods", o.Pods, "node pod capacity")
	f.StringSliceVar(&o.Labels, "labels", nil, "node labels key=value (repeatable, comma-separated)")
	f.StringSliceVar(&o.Taints, "register-with-taints", nil, "taints key=value:Effect set when the node is created")
	f.StringVar(&o.PodCIDR, "pod-cidr", "", "the node's pod CIDR (one node)")
	f.StringVar(&o.ClusterCIDR, "cluster-cidr", o.ClusterCIDR, "with no --pod-cidr, node i (from 1) gets the i-th subnet of this CIDR")
	f.IntVar(&o.NodeCIDRMask, "node-cidr-mask-size", o.NodeCIDRMask, "prefix length of each node's subnet of --cluster-cidr")
	f.StringVar(&o.NodeIP, "node-ip", o.NodeIP, "the node's InternalIP")
	f.StringVar(&o.LogListen, "log-listen", o.LogListen, "address of the HTTPS server for container logs (GET /containerLogs/{ns}/{pod}/{container}) and the streaming endpoints (/exec, /attach, /portForward), for the API service's pods/log, exec, attach and portforward; empty: none")
	f.StringVar(&o.LogTLSCertFile, "tls-cert-file", "", "serving certificate of the log server (empty: a self-signed one, as the kubelet makes)")
	f.StringVar(&o.LogTLSKeyFile, "tls-private-key-file", "", "key for --tls-cert-file")
	f.StringVar(&o.LogClientCAFile, "client-ca-file", "", "CA that signs the certificates of clients of the log server (empty: every log request is refused)")
	f.StringSliceVar(&o.LogUsers, "log-allowed-users", o.LogUsers, "certificate CNs that may read logs and open exec, attach and port-forward streams (the API service's --kubelet-client-certificate)")
	f.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "node Lease duration (renewed every quarter of it)")
	f.DurationVar(&o.StatusInterval, "status-interval", o.StatusInterval, "how often the node status is computed")
	f.DurationVar(&o.ResyncInterval, "resync-interval", o.ResyncInterval, "how often every pod is synced even without an event")
	f.StringVar(&o.ChangeDetection, "configmap-and-secret-change-detection-strategy", o.ChangeDetection,
		"how the ConfigMaps and Secrets of pods' volumes and environments are read (the kubelet's configMapAndSecretChangeDetectionStrategy): Watch (a watch on each one the node's pods use), Cache (a get at most every half --resync-interval) or Get (a get at every read)")
	f.DurationVar(&o.BackoffBase, "backoff-base", o.BackoffBase, "first restart / image pull back-off")
	f.DurationVar(&o.BackoffMax, "backoff-max", o.BackoffMax, "longest restart / image pull back-off")
	f.StringVar(&o.CgroupParent, "cgroup-parent", "", "cgroup parent of pod sandboxes")
	f.StringSliceVar(&o.ClusterDNS, "cluster-dns", nil, "cluster DNS server addresses (comma-separated) for pods with dnsPolicy ClusterFirst; none: they fall back to Default (MissingClusterDNS)")
	f.StringVar(&o.ClusterDomain, "cluster-domain", o.ClusterDomain, "the cluster's DNS domain, put in ClusterFirst pods' search path")
	f.StringVar(&o.ResolvConf, "resolv-conf", o.ResolvConf, "the host resolv.conf that pods with dnsPolicy Default get; empty: none (nameserver 127.0.0.1, search .)")
	f.BoolVar(&o.HostNetwork, "host-network", false, "run every pod in the node's network namespace (no CNI needed)")
	f.StringVar(&o.CNIConfDir, "cni-conf-dir", "", "with --cri-socket: the runtime's CNI configuration directory (containerd's default /etc/cni/net.d), where the agent writes its node's network (05-kplane.conflist: a bridge over the pod CIDR, host-local addresses, portmap for hostPorts; and an iptables rule masquerading what pods send outside --cluster-cidr) so that pods get their own network namespace and IP; empty: the runtime's own configuration decides")
	f.StringVar(&o.CNIBridge, "cni-bridge", o.CNIBridge, "with --cni-conf-dir: the Linux bridge of the node's pod network (one per node on a host)")
}
