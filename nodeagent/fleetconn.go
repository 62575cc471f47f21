// This file holds what a Fleet is built from besides its agents: each
// node's connection to the API service (a certificate each, or tokens over
// one shared connection), the node token file, taints and pod subnets as
// the flags give them, and the log server's TLS.

package nodeagent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/internal/tlsfiles"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// fleetConns dials the API service for each node: one connection per node
// with certificates, one shared by every node with tokens.
type fleetConns struct {
	o      *FleetOptions
	extra  []grpc.DialOption
	tokens map[string]string
	shared *grpc.ClientConn
	opened []*grpc.ClientConn
}

func newFleetConns(o *FleetOptions, extra []grpc.DialOption) (*fleetConns, error) {
	c := &fleetConns{o: o, extra: extra}
	if o.TokenCSV != "" {
		var err error
		if c.tokens, err = NodeTokens(o.TokenCSV); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *fleetConns) dial(t *tls.Config) (*grpc.ClientConn, error) {
	creds := credentials.NewTLS(t)
	if c.o.Plaintext {
		creds = insecure.NewCredentials()
	}
	conn, err := client.Dial(client.SplitServers(c.o.Server), append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, c.extra...)...)
	if err != nil {
		return nil, err
	}
	c.opened = append(c.opened, conn)
	return conn, nil
}

// forNode returns node name's connection, carrying its identity.
func (c *fleetConns) forNode(name string) (grpc.ClientConnInterface, error) {
	o := c.o
	switch {
	case o.CertDir != "" || o.CertFile != "":
		cert, key := o.CertFile, o.KeyFile
		if o.CertDir != "" {
			cert, key = filepath.Join(o.CertDir, name+".crt"), filepath.Join(o.CertDir, name+".key")
		}
		t, err := tlsfiles.Client(o.CAFile, cert, key)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
		return c.dial(t)
	case o.Token != "" || c.tokens != nil:
		tok := o.Token
		if c.tokens != nil {
			if tok = c.tokens[name]; tok == "" {
				return nil, fmt.Errorf("node %s: no token for system:node:%s in %s", name, name, o.TokenCSV)
			}
		}
		if c.shared == nil {
			t, err := tlsfiles.Client(o.CAFile, "", "")
			if err != nil {
				return nil, err
			}
			if c.shared, err = c.dial(t); err != nil {
				return nil, err
			}
		}
		return WithToken(c.shared, tok), nil
	}
	return nil, fmt.Errorf("no credentials: give --cert-file/--key-file, --cert-dir, --token or --token-file")
}

func (c *fleetConns) close() {
	for _, conn := range c.opened {
		_ = conn.Close()
	}
	c.opened = nil
}

// telemetryProviders are t's providers, nil (the global ones) without t.
func telemetryProviders(t *telemetry.Telemetry) (trace.TracerProvider, metric.MeterProvider) {
	if t == nil {
		return nil, nil
	}
	return t.TracerProvider(), t.MeterProvider()
}

// NodeTokens reads the tokens of users system:node:* from a token CSV
// (the API service's --token-auth-file format), by node name.
func NodeTokens(file string) (map[string]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	out := map[string]string{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(rec) >= 2 && strings.HasPrefix(rec[1], "system:node:") {
			out[strings.TrimPrefix(rec[1], "system:node:")] = rec[0]
		}
	}
}

// ParseTaints parses key=value:Effect taints (the value may be empty).
func ParseTaints(specs []string) ([]*corev1.Taint, error) {
	var out []*corev1.Taint
	for _, s := range specs {
		kv, effect, ok := strings.Cut(s, ":")
		if !ok || effect == "" {
			return nil, fmt.Errorf("taint %q: want key=value:Effect", s)
		}
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, &corev1.Taint{Key: k, Value: v, Effect: effect})
	}
	return out, nil
}

// logServerTLS is the log server's TLS: LogTLSCertFile, or a self-signed
// certificate for the node IP and the host name (as the kubelet makes
// one), verifying clients against LogClientCAFile.
func logServerTLS(o *FleetOptions) (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	if o.LogTLSCertFile != "" {
		if cert, err = tls.LoadX509KeyPair(o.LogTLSCertFile, o.LogTLSKeyFile); err != nil {
			return nil, err
		}
	} else if cert, err = selfSigned(o.NodeIP); err != nil {
		return nil, err
	}
	var pool *x509.CertPool
	if o.LogClientCAFile != "" {
		if pool, err = tlsfiles.Pool(o.LogClientCAFile); err != nil {
			return nil, err
		}
	}
	return LogServerTLS(cert, pool), nil
}

// selfSigned makes a throw-away serving certificate for ip and the host
// name, valid for a year.
func selfSigned(ip string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: host + "@" + strconv.FormatInt(now.Unix(), 10)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{host},
	}
	if a := net.ParseIP(ip); a != nil {
		tmpl.IPAddresses = []net.IP{a}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
