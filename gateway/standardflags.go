// This file holds Options.AddFlags: `kplane gateway`'s flags, each filling
// its Options field.

package gateway

import (
	"github.com/spf13/pflag"

	"github.com/kplane/kplane/services/client"
)

// AddFlags adds the gateway's flags to f, filling o.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Listen, "listen", "127.0.0.1:6444", "HTTPS address (empty: none)")
	f.StringVar(&o.InsecureListen, "insecure-listen", "", "plain HTTP address, for local curl only (empty: none)")
	f.StringVar(&o.TLSCertFile, "tls-cert-file", "", "the gateway's serving certificate")
	f.StringVar(&o.TLSKeyFile, "tls-key-file", "", "key for --tls-cert-file")
	f.StringVar(&o.ClientCAFile, "client-ca-file", "", "CA bundle verifying HTTP clients' certificates (CN user, O groups)")
	f.StringVar(&o.Upstream.Server, "server", "127.0.0.1:6443", client.ServerFlagHelp)
	f.StringVar(&o.Upstream.CAFile, "ca-file", "", "CA bundle to verify the API service's certificate")
	f.StringVar(&o.Upstream.CertFile, "cert-file", "", "the gateway's client certificate (O system:kplane-gateways): impersonation mode")
	f.StringVar(&o.Upstream.KeyFile, "key-file", "", "client key for --cert-file")
	f.StringVar(&o.TokenAuthFile, "token-auth-file", "", "static token CSV (token,user,uid,\"groups\") for bearer tokens in impersonation mode")
	f.BoolVar(&o.Upstream.Plaintext, "insecure-plaintext", false, "plaintext gRPC to the API service (local experiments only; tokens are forwarded)")
}
