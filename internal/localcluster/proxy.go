// This file holds the Service proxy of `kplane up --runtime containerd`:
// one `kplane proxy` process for every node of the host, since all their
// pods sit behind the host's one network namespace.

package localcluster

import (
	"strconv"
	"strings"

	"github.com/kplane/kplane/nodeagent"
)

// startProxy starts one `kplane proxy` serving node-1..node-N, with the
// cluster's pod network (traffic from outside it to a cluster IP is
// masqueraded), when the nodes run real pods. The built-in runtime's
// pods are simulated: there is no network to program, so no proxy runs.
// The proxy leaves its rules in place when stopped, as kube-proxy does;
// its next start replaces them.
func (cp *ControlPlane) startProxy(id *identities, servers string) error {
	cfg := cp.cfg
	if cfg.Runtime != "containerd" || cfg.Nodes <= 0 {
		return nil
	}
	nodes := make([]string, cfg.Nodes)
	for i := range nodes {
		nodes[i] = "node-" + strconv.Itoa(i+1)
	}
	cluster := cfg.ClusterCIDR
	if cluster == "" {
		cluster = nodeagent.DefaultClusterCIDR
	}
	args := []string{"--server", servers, "--ca-file", id.ca.file,
		"--cert-file", id.proxy.certFile, "--key-file", id.proxy.keyFile,
		"--node-name", strings.Join(nodes, ","), "--cluster-cidr", cluster,
		"--log-level", "warn"}
	if cfg.ProxyTable != "" {
		args = append(args, "--table", cfg.ProxyTable)
	}
	return cp.start("proxy", "proxy", "", args...)
}
