// This file holds Options and Serve: the gateway as `kplane gateway` runs
// it — the connection to the API service (forwarding bearer tokens, or
// authenticating clients itself in impersonation mode) and the HTTPS and
// plain HTTP listeners — so that the command only maps flags.

package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/internal/tlsfiles"
	"github.com/kplane/kplane/internal/tokenfile"
	"github.com/kplane/kplane/services/client"
)

// Options are the gateway's listeners and its way to the API service.
type Options struct {
	// Listen serves HTTPS with TLSCertFile and TLSKeyFile, verifying
	// client certificates against ClientCAFile; InsecureListen serves
	// plain HTTP (local curl only). At least one is required.
	Listen, InsecureListen                string
	TLSCertFile, TLSKeyFile, ClientCAFile string
	// Upstream reaches the API service. With a client certificate
	// (Upstream.CertFile, in group system:kplane-gateways) the gateway
	// authenticates HTTP clients itself — certificates, and the bearer
	// tokens of TokenAuthFile — and passes the user on; without one it
	// forwards each request's bearer token.
	Upstream      client.Credentials
	TokenAuthFile string
	// Logger and Telemetry (nil: none) are the process's.
	Logger    *slog.Logger
	Telemetry *telemetry.Telemetry
}

// Validate checks the options before anything is started.
func (o *Options) Validate() error {
	if o.Listen == "" && o.InsecureListen == "" {
		return errors.New("nothing to serve: set --listen (HTTPS) and/or --insecure-listen (plain HTTP)")
	}
	if o.Upstream.Plaintext && o.Upstream.CertFile != "" {
		return errors.New("--cert-file needs TLS to the API service: drop --insecure-plaintext")
	}
	if o.Listen != "" && (o.TLSCertFile == "" || o.TLSKeyFile == "") {
		return errors.New("--listen needs --tls-cert-file and --tls-key-file")
	}
	return nil
}

// Serve dials the API service, builds the gateway and serves it on o's
// listeners until ctx ends or a listener fails; then the listeners are
// shut down (for up to 5 s) and the connection closed.
func Serve(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := Config{Logger: o.Logger}
	var extra []grpc.DialOption
	if t := o.Telemetry; t != nil {
		cfg.TracerProvider, cfg.MeterProvider, cfg.Metrics, cfg.Registerer = t.TracerProvider(), t.MeterProvider(), t.Handler(), t.Registry()
		extra = append(extra, t.DialOption())
	}
	// The gateway's own identity is its certificate: never a token.
	up := o.Upstream
	up.Token, up.TokenFile = "", ""
	conn, err := up.Dial(extra...)
	if err != nil {
		return err
	}
	defer conn.Close()
	cfg.Conn = conn
	if up.CertFile != "" {
		tokens := tokenfile.Tokens{}
		if o.TokenAuthFile != "" {
			if tokens, err = tokenfile.Read(o.TokenAuthFile); err != nil {
				return err
			}
		}
		cfg.Authenticator = tokens
	}
	gw, err := New(cfg)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	var servers []*http.Server
	if o.Listen != "" {
		tc, err := tlsfiles.Server(o.TLSCertFile, o.TLSKeyFile, "")
		if err != nil {
			return err
		}
		if o.ClientCAFile != "" {
			pool, err := tlsfiles.Pool(o.ClientCAFile)
			if err != nil {
				return fmt.Errorf("--client-ca-file: %w", err)
			}
			tc.ClientCAs, tc.ClientAuth = pool, tls.VerifyClientCertIfGiven
		}
		s := &http.Server{Addr: o.Listen, Handler: gw, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		servers = append(servers, s)
		go func() { errc <- s.ListenAndServeTLS("", "") }()
		log.Info("gateway serving HTTPS", "addr", o.Listen, "server", o.Upstream.Server)
	}
	if o.InsecureListen != "" {
		s := &http.Server{Addr: o.InsecureListen, Handler: gw, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		servers = append(servers, s)
		go func() { errc <- s.ListenAndServe() }()
		log.Warn("gateway serving plain HTTP: for local use only (kubectl never sends tokens over it)", "addr", o.InsecureListen)
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
}
