// This file holds `kplane gateway`: the REST gateway kubectl and curl talk
// to, its flags mapped onto gateway.Options.

package main

import (
	"github.com/spf13/cobra"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/internal/component"
)

func newGatewayCommand() *cobra.Command {
	var o gateway.Options
	p := component.Options{Service: "gateway"}
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Serve the Kubernetes REST API (kubectl, curl) in front of the API service",
		Long: `Serve kplane's API on Kubernetes' REST paths over HTTPS.

With --cert-file (a client certificate in group system:kplane-gateways) the
gateway authenticates HTTP clients itself — client certificates verified
against --client-ca-file, bearer tokens from --token-auth-file — and passes
the user on to the API service, which authorizes it. Without --cert-file it
forwards each request's bearer token and the API service authenticates it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			if p.Instance = o.Listen; p.Instance == "" {
				p.Instance = o.InsecureListen
			}
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			o.Logger, o.Telemetry = proc.Log, proc.Tel
			return gateway.Serve(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Listen, "listen", "127.0.0.1:6444", "HTTPS address (empty: none)")
	f.StringVar(&o.InsecureListen, "insecure-listen", "", "plain HTTP address, for local curl only (empty: none)")
	f.StringVar(&o.TLSCertFile, "tls-cert-file", "", "the gateway's serving certificate")
	f.StringVar(&o.TLSKeyFile, "tls-key-file", "", "key for --tls-cert-file")
	f.StringVar(&o.ClientCAFile, "client-ca-file", "", "CA bundle verifying HTTP clients' certificates (CN user, O groups)")
	f.StringVar(&o.Upstream.Server, "server", "127.0.0.1:6443", serverFlagHelp)
	f.StringVar(&o.Upstream.CAFile, "ca-file", "", "CA bundle to verify the API service's certificate")
	f.StringVar(&o.Upstream.CertFile, "cert-file", "", "the gateway's client certificate (O system:kplane-gateways): impersonation mode")
	f.StringVar(&o.Upstream.KeyFile, "key-file", "", "client key for --cert-file")
	f.StringVar(&o.TokenAuthFile, "token-auth-file", "", "static token CSV (token,user,uid,\"groups\") for bearer tokens in impersonation mode")
	f.BoolVar(&o.Upstream.Plaintext, "insecure-plaintext", false, "plaintext gRPC to the API service (local experiments only; tokens are forwarded)")
	registerProcessFlags(f, &p, "127.0.0.1:6062")
	return cmd
}
