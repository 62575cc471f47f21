// This file holds ControlPlane.PrintSummary: what `kplane up` prints once
// the cluster is healthy — every process with its addresses and log, and
// how to reach the store and the API.

package localcluster

import (
	"fmt"
	"io"
	"strings"
)

// PrintSummary writes the running cluster's processes and how to use it.
func (c *ControlPlane) PrintSummary(out io.Writer) {
	fmt.Fprintf(out, "\nkplane is up; logs in %s:\n", c.cfg.DataDir)
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
	fmt.Fprintf(out, "\nkplane status --data-dir %s shows it; Ctrl-C or kplane down --data-dir %s stops it.\n", c.cfg.DataDir, c.cfg.DataDir)
}
