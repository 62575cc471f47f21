// This file holds NewStandard and Wire: the API service as `kplane
// apiserver` runs it, built from Options — TLS, authentication (static
// tokens, ServiceAccount tokens, OIDC), RBAC and node authorization, the
// admission chain, audit, encryption at rest — so that the command and
// the tests that want the same service share one wiring.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/kplane/kplane/internal/tlsfiles"
	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/audit"
	"github.com/kplane/kplane/services/apiserver/authn"
	"github.com/kplane/kplane/services/apiserver/authz"
	"github.com/kplane/kplane/services/apiserver/defaulttolerationseconds"
	"github.com/kplane/kplane/services/apiserver/encryption"
	"github.com/kplane/kplane/services/apiserver/jwtauthn"
	"github.com/kplane/kplane/services/apiserver/podsecurity"
	"github.com/kplane/kplane/services/apiserver/serviceaccount"
	"github.com/kplane/kplane/services/apiserver/serviceaccountadmission"
	"github.com/kplane/kplane/services/apiserver/webhook"
)

// Wired is the Config Wire built, with the caches tests reach into and
// what must be closed once the server has stopped. Config may still be
// changed before New.
type Wired struct {
	Config   Config
	RBAC     *authz.RBAC
	Webhooks *webhook.Webhooks

	server *Server
	// saObjects is the ServiceAccount token validator's cache (nil: no
	// ServiceAccount tokens).
	saObjects *serviceaccount.Objects
	closers   []func()
}

// Standard is an API service built by NewStandard.
type Standard struct {
	*Server
	wired *Wired
}

// NewStandard builds the API service from o, as `kplane apiserver` runs
// it. Run it, then it closes its audit backends itself.
func NewStandard(ctx context.Context, o Options) (*Standard, error) {
	w, err := Wire(ctx, o)
	if err != nil {
		return nil, err
	}
	s, err := w.New()
	if err != nil {
		w.Close()
		return nil, err
	}
	return &Standard{Server: s, wired: w}, nil
}

// Run serves until ctx ends, then closes the audit backends.
func (s *Standard) Run(ctx context.Context) error {
	defer s.wired.Close()
	return s.Server.Run(ctx)
}

// New builds the Server from w.Config; webhooks named by a Service are
// then found through its EndpointSlices (unless Options.ResolveService).
func (w *Wired) New() (*Server, error) {
	s, err := New(w.Config)
	if err != nil {
		return nil, err
	}
	w.server = s
	if w.saObjects != nil {
		w.saObjects.SetFallback(s.tokenObject)
	}
	return s, nil
}

// Close closes the audit backends; call it once the server has stopped.
func (w *Wired) Close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
	w.closers = nil
}

// Wire validates o and builds the standard Config from it. On error
// whatever it opened is closed.
func Wire(ctx context.Context, o Options) (_ *Wired, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	w := &Wired{Config: o.Config}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	cfg := &w.Config
	if err := o.wireAddresses(cfg); err != nil {
		return nil, err
	}
	if err := o.wireTLS(cfg); err != nil {
		return nil, err
	}
	saTokens, saAuthn, saObjects, err := o.ServiceAccounts.build(o.Advertise, o.SecurePort)
	if err != nil {
		return nil, err
	}
	acfg := authn.Config{TokenFile: o.TokenAuthFile, Anonymous: o.AnonymousAuth, Logger: o.Logger, APIAudiences: o.ServiceAccounts.Audiences()}
	if saAuthn != nil {
		acfg.ServiceAccounts = saAuthn
	}
	if acfg.JWT, err = o.jwt(ctx); err != nil {
		return nil, err
	}
	an, err := authn.New(acfg)
	if err != nil {
		return nil, err
	}
	cfg.Authenticator, cfg.TokenAuthenticator, cfg.ServiceAccountTokens = an, an, saTokens
	w.RBAC = authz.NewRBAC(o.Logger)
	pods := authz.NewPodIndex()
	cfg.Authorizer = authz.NewDefault(w.RBAC, pods)
	// A webhook named by a Service is reached at a ready endpoint from
	// the Service's EndpointSlices (kplane has no Service proxy); the
	// server is built after Wire, before any call.
	resolve := o.ResolveService
	if resolve == nil {
		resolve = func(ctx context.Context, namespace, name string, port int32) (string, error) {
			if w.server == nil {
				return "", errors.New("apiserver: webhook Service resolved before the server was built")
			}
			return w.server.ResolveService(ctx, namespace, name, port)
		}
	}
	w.Webhooks = webhook.New(webhook.Config{Logger: o.Logger, TracerProvider: o.TracerProvider, ResolveService: resolve})
	o.wireAdmission(cfg, w, pods, saTokens)
	w.saObjects = saObjects
	if saObjects != nil {
		for _, res := range []string{"serviceaccounts", "pods", "secrets", "nodes"} {
			cfg.Informers[res] = append(cfg.Informers[res], saObjects)
		}
	}
	if cfg.PodSecurity, err = podsecurity.LoadConfig(o.AdmissionConfigFile); err != nil {
		return nil, fmt.Errorf("--admission-control-config-file: %w", err)
	}
	if o.EncryptionConfigFile != "" {
		if cfg.Encryption, err = encryption.Load(o.EncryptionConfigFile); err != nil {
			return nil, err
		}
	}
	if cfg.Bootstrap, err = authz.BootstrapMessages(); err != nil {
		return nil, err
	}
	if err := o.wireAudit(cfg, w); err != nil {
		return nil, err
	}
	return w, nil
}

// wireAddresses parses the Service ranges and the advertise address.
func (o *Options) wireAddresses(cfg *Config) error {
	var err error
	if o.ServiceCIDR != "" {
		if cfg.ServiceClusterIPRange, err = netip.ParsePrefix(o.ServiceCIDR); err != nil {
			return fmt.Errorf("--service-cluster-ip-range %q: %w", o.ServiceCIDR, err)
		}
	}
	if o.NodePortRange != "" {
		if cfg.ServiceNodePortRange, err = ParsePortRange(o.NodePortRange); err != nil {
			return fmt.Errorf("--service-node-port-range: %w", err)
		}
	}
	if o.Advertise != "" {
		if cfg.AdvertiseAddress, err = netip.ParseAddr(o.Advertise); err != nil {
			return fmt.Errorf("--advertise-address %q: %w", o.Advertise, err)
		}
	}
	return nil
}

// wireTLS loads the store's, the serving and the kubelet client TLS.
func (o *Options) wireTLS(cfg *Config) error {
	if o.StoreCAFile != "" || o.StoreCertFile != "" {
		t, err := tlsfiles.Client(o.StoreCAFile, o.StoreCertFile, o.StoreKeyFile)
		if err != nil {
			return fmt.Errorf("store TLS: %w", err)
		}
		cfg.StoreTLS = t
	}
	switch {
	case o.TLSCertFile != "":
		t, err := tlsfiles.Server(o.TLSCertFile, o.TLSKeyFile, o.ClientCAFile)
		if err != nil {
			return fmt.Errorf("serving TLS: %w", err)
		}
		cfg.TLS = t
	case cfg.TLS != nil:
	case !o.InsecurePlaintext:
		return fmt.Errorf("--tls-cert-file and --tls-private-key-file are required (or --insecure-plaintext for local experiments)")
	default:
		o.logger().Warn("serving plaintext gRPC: no TLS, no client certificates")
	}
	// pods/log: the client certificate for node agents' log servers
	// (kube-apiserver's --kubelet-client-* flags).
	if o.KubeletCertFile != "" {
		t, err := tlsfiles.Client(o.KubeletCAFile, o.KubeletCertFile, o.KubeletKeyFile)
		if err != nil {
			return fmt.Errorf("kubelet client TLS: %w", err)
		}
		if o.KubeletCAFile == "" {
			o.logger().Warn("pods/log does not verify node agents' serving certificates: no --kubelet-certificate-authority")
			t.InsecureSkipVerify = true
		}
		cfg.KubeletTLS = t
	}
	return nil
}

// logger is o.Logger, or one that discards.
func (o *Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// jwt is the external issuers' authenticator, nil when none is
// configured. ServiceAccount issuers may not be configured as external
// ones.
func (o *Options) jwt(ctx context.Context) (authn.TokenAuthenticator, error) {
	if o.JWT != nil {
		return o.JWT, nil
	}
	claims, err := jwtauthn.ParseRequiredClaims(o.OIDCRequiredClaims)
	if err != nil {
		return nil, err
	}
	opts := o.OIDC
	opts.Flags.RequiredClaims = claims
	opts.APIAudiences, opts.DisallowedIssuers = o.ServiceAccounts.Audiences(), o.ServiceAccounts.Issuers
	if !opts.Enabled() {
		return nil, nil
	}
	j, err := jwtauthn.New(ctx, opts)
	if err != nil {
		return nil, err
	}
	return j, nil
}

// wireAdmission sets the admission chain and the caches feeding it and
// authorization. As kube-apiserver's default plugins: ServiceAccount (the
// default ServiceAccount, its existence, the token volume),
// DefaultTolerationSeconds, then the webhooks; NodeRestriction validates.
func (o *Options) wireAdmission(cfg *Config, w *Wired, pods *authz.PodIndex, saTokens *ServiceAccountTokens) {
	on := func(name string) bool { return !slices.Contains(o.DisabledAdmission, name) }
	rbac, hooks := w.RBAC, w.Webhooks
	cfg.Informers = map[string][]ObjectSink{
		"roles": {rbac}, "clusterroles": {rbac}, "rolebindings": {rbac}, "clusterrolebindings": {rbac},
		"pods":                            {pods},
		"persistentvolumeclaims":          {pods},
		"mutatingwebhookconfigurations":   {hooks},
		"validatingwebhookconfigurations": {hooks},
		"namespaces":                      {hooks},
	}
	cfg.Mutating, cfg.Validating = nil, nil
	if on("ServiceAccount") {
		sa := serviceaccountadmission.New(saTokens != nil && saTokens.Issuer != nil)
		cfg.Mutating = append(cfg.Mutating, sa)
		cfg.Informers["serviceaccounts"] = append(cfg.Informers["serviceaccounts"], sa)
	}
	if on("DefaultTolerationSeconds") {
		cfg.Mutating = append(cfg.Mutating, defaulttolerationseconds.New(o.NotReadyTolerationSeconds, o.UnreachableTolerationSeconds))
	}
	if on("MutatingAdmissionWebhook") {
		cfg.Mutating = append(cfg.Mutating, hooks)
	}
	if on("NodeRestriction") {
		cfg.Validating = append(cfg.Validating, authz.NewNodeRestriction())
	}
	if on("ValidatingAdmissionWebhook") {
		cfg.Validating = append(cfg.Validating, hooks)
	}
}

// wireAudit opens the audit log and webhook and loads the policy.
func (o *Options) wireAudit(cfg *Config, w *Wired) error {
	a := o.Audit
	al, err := audit.New(audit.Config{Path: a.Path, MaxSizeMB: a.MaxSizeMB, MaxBackups: a.MaxBackups})
	if err != nil {
		return err
	}
	var auditors audit.Multi
	if al != nil {
		w.closers = append(w.closers, func() { _ = al.Close() })
		auditors = append(auditors, al)
	}
	if a.WebhookConfigFile != "" {
		wh, err := audit.NewWebhook(audit.WebhookConfig{ConfigFile: a.WebhookConfigFile, Mode: a.WebhookMode, InitialBackoff: a.WebhookInitialBackoff})
		if err != nil {
			return err
		}
		stop := make(chan struct{})
		if err := wh.Run(stop); err != nil {
			return err
		}
		w.closers = append(w.closers, func() { close(stop); wh.Shutdown() })
		auditors = append(auditors, wh)
	}
	switch len(auditors) {
	case 0:
	case 1:
		cfg.Auditor = auditors[0]
	default:
		cfg.Auditor = auditors
	}
	if cfg.Auditor != nil && a.PolicyFile != "" {
		if cfg.AuditPolicy, err = audit.LoadPolicy(a.PolicyFile); err != nil {
			return err
		}
	}
	return nil
}

// build loads the keys: the API service's token configuration, the
// ServiceAccount token authenticator and the cache it reads (all nil when
// no issuer is set).
func (s ServiceAccountOptions) build(advertise string, port int) (*ServiceAccountTokens, *serviceaccount.Authenticator, *serviceaccount.Objects, error) {
	if len(s.Issuers) == 0 {
		if s.SigningKeyFile != "" || len(s.KeyFiles) > 0 {
			return nil, nil, nil, errors.New("--service-account-signing-key-file and --service-account-key-file need --service-account-issuer")
		}
		return nil, nil, nil, nil
	}
	if slices.Contains(s.Issuers, "") {
		return nil, nil, nil, errors.New("--service-account-issuer must not be empty")
	}
	if s.MaxExpiration < 0 {
		return nil, nil, nil, fmt.Errorf("--service-account-max-token-expiration %s: must not be negative", s.MaxExpiration)
	}
	tokens := &ServiceAccountTokens{APIAudiences: s.Audiences(), MaxExpiration: s.MaxExpiration, ExtendExpiration: s.ExtendExpiration}
	var keys []serviceaccount.PublicKey
	if s.SigningKeyFile != "" {
		key, err := serviceaccount.LoadSigningKey(s.SigningKeyFile)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--service-account-signing-key-file: %w", err)
		}
		if tokens.Issuer, err = serviceaccount.NewIssuer(s.Issuers[0], key); err != nil {
			return nil, nil, nil, err
		}
		if len(s.KeyFiles) == 0 {
			id, err := serviceaccount.KeyID(key.Public())
			if err != nil {
				return nil, nil, nil, err
			}
			keys = append(keys, serviceaccount.PublicKey{KeyID: id, Key: key.Public()})
		}
	}
	if len(s.KeyFiles) > 0 {
		var err error
		if keys, err = serviceaccount.LoadPublicKeys(s.KeyFiles...); err != nil {
			return nil, nil, nil, fmt.Errorf("--service-account-key-file: %w", err)
		}
	}
	if len(keys) == 0 {
		return nil, nil, nil, errors.New("--service-account-key-file or --service-account-signing-key-file must be set with --service-account-issuer")
	}
	if u, err := url.Parse(s.Issuers[0]); err == nil && u.Scheme == "https" {
		jwks := s.JWKSURI
		if jwks == "" && advertise != "" {
			jwks = (&url.URL{Scheme: "https", Host: net.JoinHostPort(advertise, strconv.Itoa(port)), Path: serviceaccount.JWKSPath}).String()
		}
		if jwks != "" {
			d, err := serviceaccount.NewDiscovery(s.Issuers[0], jwks, keys)
			if err != nil {
				return nil, nil, nil, err
			}
			tokens.Discovery = d
		}
	}
	objects := serviceaccount.NewObjects()
	an, err := serviceaccount.NewAuthenticator(serviceaccount.AuthenticatorConfig{Issuers: s.Issuers, Keys: keys, APIAudiences: s.Audiences(), Objects: objects})
	if err != nil {
		return nil, nil, nil, err
	}
	return tokens, an, objects, nil
}

// tokenObject reads, from the store, an object of a kind a ServiceAccount
// token names (serviceaccount.Objects' fallback): nil, nil when it is not
// there.
func (s *Server) tokenObject(kind, namespace, name string) (any, error) {
	plural := map[string]string{serviceaccount.KindServiceAccount: "serviceaccounts", serviceaccount.KindPod: "pods",
		serviceaccount.KindSecret: "secrets", serviceaccount.KindNode: "nodes"}[kind]
	r := s.resources[plural]
	if r == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	obj, err := s.store.get(ctx, r, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}
