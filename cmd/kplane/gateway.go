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
	o.AddFlags(f)
	p.AddFlags(f, "127.0.0.1:6062")
	return cmd
}
