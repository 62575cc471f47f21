// This file holds `kplane healthcheck`: a probe for container healthchecks
// and Kubernetes exec probes, since the image has no shell or curl.

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/healthprobe"
	"github.com/kplane/kplane/internal/tlsfiles"
)

func newHealthcheckCommand() *cobra.Command {
	var (
		grpcAddr, httpsURL        string
		caFile, certFile, keyFile string
		plaintext                 bool
		timeout                   time.Duration
	)
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
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			tlsCfg, err := tlsfiles.Client(caFile, certFile, keyFile)
			if err != nil {
				return err
			}
			switch {
			case grpcAddr != "" && httpsURL == "":
				if plaintext {
					tlsCfg = nil
				}
				return healthprobe.GRPC(ctx, grpcAddr, tlsCfg)
			case httpsURL != "" && grpcAddr == "":
				return healthprobe.HTTPS(ctx, httpsURL, tlsCfg)
			}
			return fmt.Errorf("give exactly one of --grpc and --https")
		},
	}
	f := cmd.Flags()
	f.StringVar(&grpcAddr, "grpc", "", "gRPC address (host:port) to probe with grpc.health.v1")
	f.StringVar(&httpsURL, "https", "", "HTTPS URL to GET")
	f.StringVar(&caFile, "ca-file", "", "CA bundle to verify the server's certificate")
	f.StringVar(&certFile, "cert-file", "", "client certificate")
	f.StringVar(&keyFile, "key-file", "", "client key for --cert-file")
	f.BoolVar(&plaintext, "insecure-plaintext", false, "plaintext gRPC (the store while its ports have no TLS)")
	f.DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	return cmd
}
