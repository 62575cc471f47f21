// This file holds `kplane gateway`: the REST gateway kubectl and curl talk to.

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/services/apiserver/authn"
	"github.com/kplane/kplane/services/client"
)

func newGatewayCommand() *cobra.Command {
	var (
		listen, insecureListen            string
		tlsCert, tlsKey, clientCA         string
		server, caFile, certFile, keyFile string
		tokenAuthFile                     string
		plaintext                         bool
		logLevel, profilingListen         string
		tf                                telemetryFlags
	)
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
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			if listen == "" && insecureListen == "" {
				return errors.New("nothing to serve: set --listen (HTTPS) and/or --insecure-listen (plain HTTP)")
			}
			upTLS, err := clientTLS(caFile, certFile, keyFile)
			if err != nil {
				return err
			}
			creds := credentials.NewTLS(upTLS)
			if plaintext {
				if certFile != "" {
					return errors.New("--cert-file needs TLS to the API service: drop --insecure-plaintext")
				}
				creds = insecure.NewCredentials()
			}
			instance := listen
			if instance == "" {
				instance = insecureListen
			}
			tel, stop, err := tf.start(cmd.Context(), "gateway", instance, false, log)
			if err != nil {
				return err
			}
			defer stop()
			conn, err := client.Dial(client.SplitServers(server), grpc.WithTransportCredentials(creds), tel.DialOption())
			if err != nil {
				return err
			}
			defer conn.Close()
			cfg := gateway.Config{Conn: conn, Logger: log, TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider(), Metrics: tel.Handler(), Registerer: tel.Registry()}
			if certFile != "" {
				if cfg.Authenticator, err = authn.New(authn.Config{TokenFile: tokenAuthFile}); err != nil {
					return err
				}
			}
			gw, err := gateway.New(cfg)
			if err != nil {
				return err
			}
			if profilingListen != "" {
				stop, err := serveProfiling(profilingListen, 0, log)
				if err != nil {
					return err
				}
				defer stop()
			}
			ctx := cmd.Context()
			errc := make(chan error, 2)
			var servers []*http.Server
			if listen != "" {
				if tlsCert == "" || tlsKey == "" {
					return errors.New("--listen needs --tls-cert-file and --tls-key-file")
				}
				cert, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
				if err != nil {
					return err
				}
				tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
				if clientCA != "" {
					pool, err := loadPool(clientCA)
					if err != nil {
						return fmt.Errorf("--client-ca-file: %w", err)
					}
					tc.ClientCAs, tc.ClientAuth = pool, tls.VerifyClientCertIfGiven
				}
				s := &http.Server{Addr: listen, Handler: gw, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
				servers = append(servers, s)
				go func() { errc <- s.ListenAndServeTLS("", "") }()
				log.Info("gateway serving HTTPS", "addr", listen, "server", server)
			}
			if insecureListen != "" {
				s := &http.Server{Addr: insecureListen, Handler: gw, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
				servers = append(servers, s)
				go func() { errc <- s.ListenAndServe() }()
				log.Warn("gateway serving plain HTTP: for local use only (kubectl never sends tokens over it)", "addr", insecureListen)
			}
			select {
			case <-ctx.Done():
			case err = <-errc:
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, s := range servers {
				_ = s.Shutdown(sctx)
			}
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:6444", "HTTPS address (empty: none)")
	f.StringVar(&insecureListen, "insecure-listen", "", "plain HTTP address, for local curl only (empty: none)")
	f.StringVar(&tlsCert, "tls-cert-file", "", "the gateway's serving certificate")
	f.StringVar(&tlsKey, "tls-key-file", "", "key for --tls-cert-file")
	f.StringVar(&clientCA, "client-ca-file", "", "CA bundle verifying HTTP clients' certificates (CN user, O groups)")
	f.StringVar(&server, "server", "127.0.0.1:6443", serverFlagHelp)
	f.StringVar(&caFile, "ca-file", "", "CA bundle to verify the API service's certificate")
	f.StringVar(&certFile, "cert-file", "", "the gateway's client certificate (O system:kplane-gateways): impersonation mode")
	f.StringVar(&keyFile, "key-file", "", "client key for --cert-file")
	f.StringVar(&tokenAuthFile, "token-auth-file", "", "static token CSV (token,user,uid,\"groups\") for bearer tokens in impersonation mode")
	f.BoolVar(&plaintext, "insecure-plaintext", false, "plaintext gRPC to the API service (local experiments only; tokens are forwarded)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&profilingListen, "profiling-listen", "", "serve Go's net/http/pprof profiles on this address (e.g. 127.0.0.1:6062); empty disables them")
	tf.register(f)
	return cmd
}
