// This file holds `kplane certs`: the CA and per-component certificates of
// `kplane up`, written for a deployment elsewhere (docker-compose's one-shot
// service, a Kubernetes Secret).

package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/localcluster"
)

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
	f.StringVar(&cfg.DataDir, "data-dir", ".kplane", "directory to write pki/ (and kubeconfig) into")
	f.StringSliceVar(&cfg.Names, "hosts", nil, "extra DNS names or IPs of every server certificate (comma-separated)")
	f.StringSliceVar(&cfg.StoreMembers, "store-members", nil, "store member names to issue client-URL and peer certificates for (comma-separated)")
	f.IntVar(&cfg.APIServers, "apiservers", 2, "number of API service serving certificates (apiserver-1..N)")
	f.IntVar(&cfg.Nodes, "nodes", 3, "number of node client certificates (nodes/node-1..N)")
	f.StringVar(&cfg.GatewayURL, "gateway-url", "", "gateway URL for an admin kubeconfig (empty: none)")
	f.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "where to write the admin kubeconfig (default <data-dir>/kubeconfig)")
	f.BoolVar(&cfg.IfMissing, "if-missing", false, "do nothing when <data-dir>/pki/ca.crt and store-ca.crt already exist; fail when only ca.crt does (credentials of an older kplane certs)")
	return cmd
}
