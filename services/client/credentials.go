// This file holds Credentials: how a component reaches the API service
// and who it is there (a client certificate or a bearer token), as every
// component's --server, --ca-file, --cert-file, --token... flags say it.

package client

import (
	"context"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/internal/tlsfiles"
)

// Credentials name the API service and the component's identity there.
type Credentials struct {
	// Server is one address (host:port) or a comma-separated list of the
	// replicas'.
	Server string
	// CAFile verifies the API service's certificate (empty: the host's
	// roots); CertFile and KeyFile are the client certificate.
	CAFile, CertFile, KeyFile string
	// Token is a bearer token; TokenFile a file holding one (it wins).
	Token, TokenFile string
	// Plaintext dials without TLS (local experiments only).
	Plaintext bool
}

// Dial connects to the API service with c; extra adds options such as the
// telemetry stats handler.
func (c Credentials) Dial(extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	token := c.Token
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	creds := insecure.NewCredentials()
	if !c.Plaintext {
		tlsCfg, err := tlsfiles.Client(c.CAFile, c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tlsCfg)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, extra...)
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(BearerToken(token)))
	}
	return Dial(SplitServers(c.Server), opts...)
}

// BearerToken sends a bearer token with every call.
type BearerToken string

var _ credentials.PerRPCCredentials = BearerToken("")

// GetRequestMetadata sets the authorization header.
func (t BearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so plaintext works for local
// experiments.
func (BearerToken) RequireTransportSecurity() bool { return false }
