// Package healthprobe probes a kplane component's health the way
// `kplane healthcheck` does for container healthchecks and Kubernetes exec
// probes (the image has no shell or curl): the gRPC health service, or an
// HTTPS GET.
package healthprobe

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/internal/tlsfiles"
)

// GRPC calls grpc.health.v1 at addr: healthy when it answers SERVING, or
// when the server has no health service (the API service) but completed
// the handshake and answered Unimplemented. A nil tlsCfg dials plaintext.
func GRPC(ctx context.Context, addr string, tlsCfg *tls.Config) error {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) == codes.Unimplemented {
		return nil
	}
	if err != nil {
		return fmt.Errorf("health of %s: %w", addr, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health of %s: %s", addr, resp.GetStatus())
	}
	return nil
}

// HTTPS GETs url and expects 200; the error quotes the start of any other
// answer's body.
func HTTPS(ctx context.Context, url string, tlsCfg *tls.Config) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("health of %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health of %s: %s: %s", url, resp.Status, body)
	}
	return nil
}

// Options are `kplane healthcheck`'s: one of GRPC and HTTPS, the TLS files
// and the time allowed.
type Options struct {
	GRPC, HTTPS               string
	CAFile, CertFile, KeyFile string
	// Plaintext dials the gRPC address without TLS.
	Plaintext bool
	Timeout   time.Duration
}

// AddFlags adds `kplane healthcheck`'s flags to f, filling o.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.GRPC, "grpc", "", "gRPC address (host:port) to probe with grpc.health.v1")
	f.StringVar(&o.HTTPS, "https", "", "HTTPS URL to GET")
	f.StringVar(&o.CAFile, "ca-file", "", "CA bundle to verify the server's certificate")
	f.StringVar(&o.CertFile, "cert-file", "", "client certificate")
	f.StringVar(&o.KeyFile, "key-file", "", "client key for --cert-file")
	f.BoolVar(&o.Plaintext, "insecure-plaintext", false, "plaintext gRPC (the store while its ports have no TLS)")
	f.DurationVar(&o.Timeout, "timeout", 3*time.Second, "give up after this long")
}

// Probe probes what o names, within o.Timeout.
func Probe(ctx context.Context, o Options) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	tlsCfg, err := tlsfiles.Client(o.CAFile, o.CertFile, o.KeyFile)
	if err != nil {
		return err
	}
	switch {
	case o.GRPC != "" && o.HTTPS == "":
		if o.Plaintext {
			tlsCfg = nil
		}
		return GRPC(ctx, o.GRPC, tlsCfg)
	case o.HTTPS != "" && o.GRPC == "":
		return HTTPS(ctx, o.HTTPS, tlsCfg)
	}
	return fmt.Errorf("give exactly one of --grpc and --https")
}
