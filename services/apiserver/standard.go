// This file holds Options, the API service's settings as `kplane apiserver`
// names them (files, flags' strings, Kubernetes' plugin settings), with
// their defaults and their validation. standardwire.go turns them into a
// Config and a running Server.

package apiserver

import (
	"context"
	"fmt"
	"time"

	"github.com/kplane/kplane/services/apiserver/audit"
	"github.com/kplane/kplane/services/apiserver/authn"
	"github.com/kplane/kplane/services/apiserver/compaction"
	"github.com/kplane/kplane/services/apiserver/defaulttolerationseconds"
	"github.com/kplane/kplane/services/apiserver/jwtauthn"
)

// DefaultGCPercent is the API service's default GC target (kplane
// apiserver --gc-percent). Each collection scans every goroutine's stack,
// and a service with 10,000 watches has 10,000 of them; at Go's default of
// 100 the 10,000-watcher fan-out collected often enough to lengthen its
// delivery tail (see BENCHMARKS.md, "API service"). The cost is heap
// headroom: the heap may grow to (1 + percent/100) times what is live
// before a collection.
const DefaultGCPercent = 300

// Options are the API service's settings as kube-apiserver's flags name
// them. The embedded Config holds those that need no loading (addresses,
// limits, the watch cache, the logger and telemetry providers); NewStandard
// fills its authentication, authorization, admission, audit, encryption
// and TLS from the rest. Start from DefaultOptions: the zero value of a
// field is not always its default.
type Options struct {
	Config

	// ServiceCIDR (--service-cluster-ip-range), NodePortRange
	// (--service-node-port-range) and Advertise (--advertise-address, empty
	// for none) are parsed into Config's fields of those meanings.
	ServiceCIDR, NodePortRange, Advertise string

	// The store's TLS: its CA bundle and the client certificate.
	StoreCAFile, StoreCertFile, StoreKeyFile string
	// The serving certificate and the CA that verifies clients'. One of
	// TLSCertFile, Config.TLS or InsecurePlaintext is required.
	TLSCertFile, TLSKeyFile, ClientCAFile string
	InsecurePlaintext                     bool
	// The client certificate for node agents' log servers (pods/log, exec,
	// attach, port-forward) and the CA that verifies them (empty: not
	// verified, with a warning); no certificate: those are unavailable.
	KubeletCertFile, KubeletKeyFile, KubeletCAFile string

	// TokenAuthFile holds static bearer tokens (Kubernetes' CSV);
	// AnonymousAuth lets requests without credentials in.
	TokenAuthFile string
	AnonymousAuth bool
	// ServiceAccounts configures the issuing and checking of
	// ServiceAccount tokens.
	ServiceAccounts ServiceAccountOptions
	// OIDC configures external JWT issuers (ConfigFile, Flags,
	// SigningAlgs; the audiences and disallowed issuers come from
	// ServiceAccounts). OIDCRequiredClaims are --oidc-required-claim's
	// key=value strings.
	OIDC               jwtauthn.Options
	OIDCRequiredClaims []string
	// JWT, if set, is used instead of an authenticator built from OIDC.
	JWT authn.TokenAuthenticator

	// Audit configures the audit log and webhook.
	Audit AuditOptions
	// AdmissionConfigFile is an AdmissionConfiguration whose PodSecurity
	// entry is read; EncryptionConfigFile an EncryptionConfiguration.
	AdmissionConfigFile, EncryptionConfigFile string
	// NotReadyTolerationSeconds and UnreachableTolerationSeconds are the
	// DefaultTolerationSeconds plugin's.
	NotReadyTolerationSeconds, UnreachableTolerationSeconds int64
	// DisabledAdmission names admission plugins left out of the standard
	// chain, by Kubernetes' names: ServiceAccount,
	// DefaultTolerationSeconds, NodeRestriction, MutatingAdmissionWebhook,
	// ValidatingAdmissionWebhook (tests that run no ServiceAccount
	// controller leave the first out).
	DisabledAdmission []string
	// ResolveService, if set, finds webhooks' Services instead of the
	// server's own EndpointSlice lookup.
	ResolveService func(ctx context.Context, namespace, name string, port int32) (string, error)
}

// ServiceAccountOptions are kube-apiserver's --service-account-* and
// --api-audiences settings.
type ServiceAccountOptions struct {
	// Issuers accept tokens with these iss; the first one issues. Empty:
	// no ServiceAccount tokens.
	Issuers []string
	// SigningKeyFile signs tokens; KeyFiles verify them (default the
	// signing key's public half).
	SigningKeyFile string
	KeyFiles       []string
	// MaxExpiration caps TokenRequests (0: no cap); ExtendExpiration
	// issues pod-bound tokens asked for 3607 s for a year.
	MaxExpiration    time.Duration
	ExtendExpiration bool
	// JWKSURI is the discovery document's jwks_uri (default from the
	// advertise address and secure port).
	JWKSURI string
	// APIAudiences the API accepts (default Issuers).
	APIAudiences []string
}

// Audiences are the API's audiences: APIAudiences, else the issuers.
func (s ServiceAccountOptions) Audiences() []string {
	if len(s.APIAudiences) > 0 {
		return s.APIAudiences
	}
	return s.Issuers
}

// AuditOptions are kube-apiserver's --audit-* settings.
type AuditOptions struct {
	// Path of the log ("-": standard output; empty: none), rotated at
	// MaxSizeMB keeping MaxBackups.
	Path                  string
	MaxSizeMB, MaxBackups int
	// PolicyFile is an audit Policy (empty: every request at Metadata).
	PolicyFile string
	// WebhookConfigFile names a webhook backend (a kubeconfig), in
	// WebhookMode (batch or blocking), retried after WebhookInitialBackoff.
	WebhookConfigFile     string
	WebhookMode           string
	WebhookInitialBackoff time.Duration
}

// DefaultOptions are kube-apiserver's defaults where kplane has the
// setting, and kplane's own elsewhere; `kplane apiserver`'s flags default
// to them.
func DefaultOptions() Options {
	return Options{
		Config: Config{
			StoreEndpoints:              []string{"http://127.0.0.1:2379"},
			Listen:                      "127.0.0.1:6443",
			SecurePort:                  DefaultSecurePort,
			WatchWindow:                 10000,
			WatchBuffer:                 1000,
			BookmarkInterval:            30 * time.Second,
			CompactionInterval:          compaction.DefaultInterval,
			EventTTL:                    DefaultEventTTL,
			RequestTimeout:              DefaultRequestTimeout,
			MaxRequestsInflight:         DefaultMaxRequestsInflight,
			MaxMutatingRequestsInflight: DefaultMaxMutatingRequestsInflight,
			EnablePriorityAndFairness:   true,
		},
		ServiceCIDR:                  DefaultServiceClusterIPRange.String(),
		NodePortRange:                DefaultServiceNodePortRange.String(),
		ServiceAccounts:              ServiceAccountOptions{ExtendExpiration: true},
		OIDC:                         jwtauthn.Options{Flags: jwtauthn.Flags{UsernameClaim: "sub"}, SigningAlgs: []string{"RS256"}},
		Audit:                        AuditOptions{MaxSizeMB: 100, MaxBackups: 10, WebhookMode: audit.WebhookBatch, WebhookInitialBackoff: 10 * time.Second},
		NotReadyTolerationSeconds:    defaulttolerationseconds.DefaultSeconds,
		UnreachableTolerationSeconds: defaulttolerationseconds.DefaultSeconds,
	}
}

// Validate checks what can be checked before anything is loaded or
// started; errors name kube-apiserver's flags.
func (o *Options) Validate() error {
	if o.CompactionInterval < 0 {
		return fmt.Errorf("--etcd-compaction-interval %s: must not be negative (0 turns compaction off)", o.CompactionInterval)
	}
	if o.MaxRequestsInflight < 0 || o.MaxMutatingRequestsInflight < 0 {
		return fmt.Errorf("--max-requests-inflight and --max-mutating-requests-inflight must not be negative (0: no limit)")
	}
	if o.RequestTimeout <= 0 {
		return fmt.Errorf("--request-timeout %s: must be positive", o.RequestTimeout)
	}
	if o.EventTTL < 0 {
		return fmt.Errorf("--event-ttl %s: must not be negative (0 keeps events forever)", o.EventTTL)
	}
	if o.SecurePort < 1 || o.SecurePort > 65535 {
		return fmt.Errorf("--secure-port %d: must be a port number", o.SecurePort)
	}
	for _, name := range o.DisabledAdmission {
		if !standardAdmission(name) {
			return fmt.Errorf("admission plugin %q: not one of the standard chain's", name)
		}
	}
	return nil
}

// standardAdmission reports whether name is a plugin of the standard
// chain, by Kubernetes' name.
func standardAdmission(name string) bool {
	switch name {
	case "ServiceAccount", "DefaultTolerationSeconds", "NodeRestriction",
		"MutatingAdmissionWebhook", "ValidatingAdmissionWebhook":
		return true
	}
	return false
}
