// This file holds the commands around a local cluster: `kplane up` (a
// local HA control plane on loopback, every component a process of this
// binary), `kplane down` and `kplane status` (the one running in a data
// directory), `kplane certs` (its credentials, written for a deployment
// elsewhere) and `kplane bootstrap` (what a new cluster needs once the API
// service answers).

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/jaeger"
	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/services/client"
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
			cfg.CompleteFlags(cmd.Flags().Changed("nodes"))
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Starting kplane in %s ...\n", cfg.DataDir)
			if withJaeger {
				j, err := jaeger.StartBeside(ctx, cfg.DataDir, cfg.BasePort != 0, out)
				if err != nil {
					return fmt.Errorf("--jaeger: %w", err)
				}
				defer j.Stop()
				cfg.Env = append(cfg.Env, j.Env()...)
			}
			c, err := localcluster.Up(ctx, cfg)
			if err != nil {
				return err
			}
			defer c.Stop()
			c.PrintSummary(out)
			return c.Wait(ctx)
		},
	}
	f := cmd.Flags()
	cfg.AddFlags(f)
	f.BoolVar(&withJaeger, "jaeger", false, "also run a loopback Jaeger (built by scripts/install-jaeger.sh; query API on 16686, OTLP on 4317, free ports with --base-port=0) and send every component's spans to it")
	return cmd
}

func newDownCommand() *cobra.Command {
	var (
		dataDir string
		grace   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the kplane up running in --data-dir",
		Long: `Stop the kplane up running in --data-dir (found through the state file
<data-dir>/` + localcluster.StateFile + ` it writes): SIGTERM to kplane up, which stops its
processes in order as on Ctrl-C, then SIGKILL to whatever still runs after
--grace-period. The data (store, certificates, logs) stays.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			killed, err := localcluster.Down(cmd.Context(), dataDir, grace)
			if err != nil {
				return err
			}
			if len(killed) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "kplane stopped; killed after %s: %s\n", grace, strings.Join(killed, ", "))
				return nil
			}
			fmt.Fprintln(cmd.OutOrStdout(), "kplane stopped")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", ".kplane", "the data directory of the kplane up to stop")
	f.DurationVar(&grace, "grace-period", 40*time.Second, "how long to wait for a clean stop before SIGKILL")
	return cmd
}

func newStatusCommand() *cobra.Command {
	var dataDir, output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the kplane up running in --data-dir: processes, store leader, active scheduler and controller manager, nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" {
				return fmt.Errorf("-o %q: want json or nothing", output)
			}
			st, err := localcluster.GetStatus(cmd.Context(), dataDir)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return st.Print(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", ".kplane", "the data directory of the kplane up to ask")
	f.StringVarP(&output, "output", "o", "", "output format: json (every process with its component, name, current PID, restart count and endpoints)")
	return cmd
}

func newCertsCommand() *cobra.Command {
	var cfg localcluster.CertsConfig
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Write the CAs and a certificate per component, as kplane up does",
		Long: `Write two CAs and a certificate and key per component into <data-dir>/pki,
the same identities kplane up generates. The cluster CA (ca.crt) signs
apiserver-<i> (serving), gateway-serving, gateway (client,
system:kplane-gateways), scheduler, controllers, admin (system:masters),
apiserver-kubelet-client, nodeagent-serving and nodes/node-<i>
(system:node:node-<i>). The store CA (store-ca.crt), the only CA the store
members trust, signs apiserver-store-client (the API services' certificate
for the store) and <member>.crt and <member>-peer.crt for each
--store-members name (CN: the member name). Server
certificates name localhost, loopback and every --hosts entry. With
--gateway-url it also writes <data-dir>/kubeconfig for the admin. Beside the
certificates, unless they exist, it writes the API services'
encryption-config.yaml (Secrets encrypted at rest under a fresh key: keep
it), audit-policy.yaml and sa.key (the ServiceAccount token signing key),
for --encryption-provider-config, --audit-policy-file and
--service-account-signing-key-file / --service-account-key-file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := localcluster.WriteCerts(cfg)
			if errors.Is(err, localcluster.ErrCertsExist) {
				fmt.Fprintln(cmd.OutOrStdout(), "certificates already in", dir, "(kept)")
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "certificates written to", dir)
			return nil
		},
	}
	f := cmd.Flags()
	cfg.AddFlags(f)
	return cmd
}

func newBootstrapCommand() *cobra.Command {
	var (
		api     client.Credentials
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Create the system namespaces (default, kube-system, kube-node-lease, kube-public) once the API service answers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			conn, err := api.Dial()
			if err != nil {
				return err
			}
			defer conn.Close()
			if err := localcluster.Bootstrap(cmd.Context(), conn, timeout); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "system namespaces present")
			return nil
		},
	}
	api.AddFlags(cmd.Flags(), "an administrator (group system:masters)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}
