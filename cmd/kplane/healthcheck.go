// This file holds `kplane healthcheck`: a probe for container healthchecks
// and Kubernetes exec probes, since the image has no shell or curl.

package main

import (
	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/healthprobe"
)

func newHealthcheckCommand() *cobra.Command {
	var o healthprobe.Options
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Probe a kplane component; exit 0 when it is healthy",
		Long: `Probe one component and exit 0 if it is healthy, 1 otherwise.

--grpc ADDR calls the gRPC health service (grpc.health.v1): the store answers
SERVING once it runs; a server without the health service (the API service)
counts as up when it completes the TLS handshake and answers Unimplemented.
--https URL expects 200 from a GET (the gateway's /readyz).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return healthprobe.Probe(cmd.Context(), o)
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
