// This file holds Options.AddFlags: kube-apiserver's flags as `kplane
// apiserver` takes them, each filling its Options field, with the field's
// default from DefaultOptions.

package apiserver

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/kplane/kplane/services/apiserver/audit"
)

// AddFlags adds the API service's flags to f, filling o; call it on
// DefaultOptions so the flags default to them.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.Var((*endpointList)(&o.StoreEndpoints), "store-endpoints", "comma-separated etcd v3 endpoints of the store (kplane store or etcd)")
	f.StringVar(&o.StoreCAFile, "store-cafile", "", "CA bundle to verify the store's certificate")
	f.StringVar(&o.StoreCertFile, "store-certfile", "", "client certificate for the store")
	f.StringVar(&o.StoreKeyFile, "store-keyfile", "", "client key for the store")
	f.DurationVar(&o.CompactionInterval, "etcd-compaction-interval", o.CompactionInterval, "how often the store's history is compacted, as kube-apiserver does: one replica per interval compacts to the revision of an interval earlier, coordinating through the store's compact_rev_key; 0 turns it off")
	f.IntVar(&o.MaxRequestsInflight, "max-requests-inflight", o.MaxRequestsInflight, "read calls (get, list) running at once before more get 429 TooManyRequests, as kube-apiserver's; watches are not counted; 0: no limit")
	f.BoolVar(&o.EnablePriorityAndFairness, "enable-priority-and-fairness", o.EnablePriorityAndFairness, "classify unary calls by the FlowSchemas and limit them by their priority levels (API Priority and Fairness), which share --max-requests-inflight + --max-mutating-requests-inflight, instead of those two limits, as kube-apiserver's")
	f.IntVar(&o.MaxMutatingRequestsInflight, "max-mutating-requests-inflight", o.MaxMutatingRequestsInflight, "writing calls running at once before more get 429 TooManyRequests, as kube-apiserver's; 0: no limit")
	f.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "the longest a unary call may take (watches and log streams are not bounded by it), as kube-apiserver's --request-timeout; a store call cut short answers 504 Timeout")
	f.DurationVar(&o.EventTTL, "event-ttl", o.EventTTL, "how long an event lives after it was last written, as kube-apiserver's --event-ttl; 0 keeps events forever")
	f.StringVar(&o.Listen, "listen", o.Listen, "gRPC listen address")
	f.StringVar(&o.ServiceCIDR, "service-cluster-ip-range", o.ServiceCIDR, "the CIDR Services' cluster IPs are allocated from, as kube-apiserver's (single stack); its first address is the kubernetes Service's")
	f.StringVar(&o.NodePortRange, "service-node-port-range", o.NodePortRange, "the ports NodePort and LoadBalancer Services' node ports are allocated from, as kube-apiserver's")
	f.StringVar(&o.Advertise, "advertise-address", "", "the address clients reach the API at (for kplane, the gateway's): listed in the default/kubernetes Endpoints while this replica runs, as kube-apiserver's --advertise-address with the lease endpoint reconciler; empty lists none")
	f.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "the port clients reach the API at (for kplane, the gateway's HTTPS port): the kubernetes Service's target port and its Endpoints' port")
	f.StringVar(&o.TLSCertFile, "tls-cert-file", "", "serving certificate")
	f.StringVar(&o.TLSKeyFile, "tls-private-key-file", "", "serving key")
	f.StringVar(&o.ClientCAFile, "client-ca-file", "", "CA that signs client certificates (CN = user, O = groups)")
	f.StringVar(&o.TokenAuthFile, "token-auth-file", "", "static bearer tokens, Kubernetes' CSV format: token,user,uid,\"group1,group2\"")
	sa := &o.ServiceAccounts
	f.StringArrayVar(&sa.Issuers, "service-account-issuer", nil, "identifier of the ServiceAccount token issuer (the iss claim), as kube-apiserver's: repeat it to accept several; the first one issues. An https URL also serves the issuer discovery documents (/.well-known/openid-configuration, /openid/v1/jwks) at the gateway")
	f.StringVar(&sa.SigningKeyFile, "service-account-signing-key-file", "", "PEM RSA or ECDSA private key that signs ServiceAccount tokens (TokenRequest, kubectl create token); needs --service-account-issuer")
	f.StringArrayVar(&sa.KeyFiles, "service-account-key-file", nil, "PEM file of public (or private) keys that verify ServiceAccount tokens; repeat it for several (every replica's signing key, for rotation); default the signing key's public half")
	f.DurationVar(&sa.MaxExpiration, "service-account-max-token-expiration", 0, "the longest a TokenRequest's token is issued for (longer requests are shortened); 0: no cap")
	f.BoolVar(&sa.ExtendExpiration, "service-account-extend-token-expiration", sa.ExtendExpiration, "issue pod-bound tokens asked for 3607 s for a year, with a warnafter claim, as kube-apiserver does")
	f.StringVar(&sa.JWKSURI, "service-account-jwks-uri", "", "jwks_uri of the discovery document; default https://<advertise-address>:<secure-port>/openid/v1/jwks")
	f.StringSliceVar(&sa.APIAudiences, "api-audiences", nil, "audiences the API accepts in tokens (and gives TokenRequests without any); default the --service-account-issuer values")
	oidc := &o.OIDC
	f.StringVar(&oidc.ConfigFile, "authentication-config", "", "AuthenticationConfiguration file (apiserver.config.k8s.io/v1beta1): JWT issuers with audiences, claim validation rules and claim mappings (CEL), as kube-apiserver's; excludes the --oidc-* flags")
	f.StringVar(&oidc.Flags.IssuerURL, "oidc-issuer-url", "", "https URL of the OpenID Connect issuer whose ID tokens are accepted as bearer tokens")
	f.StringVar(&oidc.Flags.ClientID, "oidc-client-id", "", "the client ID tokens must be issued for (their aud claim); needs --oidc-issuer-url")
	f.StringVar(&oidc.Flags.CAFile, "oidc-ca-file", "", "PEM CA that verifies the issuer's HTTPS server; default the host's roots")
	f.StringVar(&oidc.Flags.UsernameClaim, "oidc-username-claim", oidc.Flags.UsernameClaim, "the claim that is the user name; any claim but email is prefixed with the issuer URL and '#' unless --oidc-username-prefix says otherwise")
	f.StringVar(&oidc.Flags.UsernamePrefix, "oidc-username-prefix", "", "prefix of user names from tokens; '-' for none")
	f.StringVar(&oidc.Flags.GroupsClaim, "oidc-groups-claim", "", "the claim (a string or a list of strings) holding the user's groups")
	f.StringVar(&oidc.Flags.GroupsPrefix, "oidc-groups-prefix", "", "prefix of group names from tokens")
	f.StringSliceVar(&oidc.SigningAlgs, "oidc-signing-algs", oidc.SigningAlgs, "JOSE signing algorithms accepted")
	f.StringArrayVar(&o.OIDCRequiredClaims, "oidc-required-claim", nil, "key=value a token's claims must hold; repeat it for several")
	f.BoolVar(&o.AnonymousAuth, "anonymous-auth", false, "let requests without credentials in as system:anonymous")
	au := &o.Audit
	f.StringVar(&au.Path, "audit-log-path", "", "audit log file (one JSON line per audited request stage); - is standard output; empty disables it")
	f.StringVar(&au.WebhookConfigFile, "audit-webhook-config-file", "", "kubeconfig naming the audit webhook: audit events are POSTed to it as audit.k8s.io/v1 EventLists")
	f.StringVar(&au.WebhookMode, "audit-webhook-mode", audit.WebhookBatch, "batch (buffered, asynchronous) or blocking (each event sent before the request goes on)")
	f.DurationVar(&au.WebhookInitialBackoff, "audit-webhook-initial-backoff", au.WebhookInitialBackoff, "wait before the first retry of a failed webhook call")
	f.StringVar(&au.PolicyFile, "audit-policy-file", "", "audit Policy (audit.k8s.io/v1): level and stages per request; empty: every request at Metadata, ResponseComplete only")
	f.IntVar(&au.MaxSizeMB, "audit-log-maxsize", au.MaxSizeMB, "rotate the audit log at this size in MB")
	f.IntVar(&au.MaxBackups, "audit-log-maxbackup", au.MaxBackups, "rotated audit logs to keep")
	f.IntVar(&o.WatchWindow, "watch-window", o.WatchWindow, "recent events kept per resource for watches to resume from")
	f.IntVar(&o.WatchBuffer, "watch-buffer", o.WatchBuffer, "events buffered per watcher before a slow one is cut off")
	f.DurationVar(&o.BookmarkInterval, "bookmark-interval", o.BookmarkInterval, "how often watches that allow bookmarks get one")
	f.StringVar(&o.KubeletCertFile, "kubelet-client-certificate", "", "client certificate for node agents' log servers (pods/log); empty: pods/log is unavailable")
	f.StringVar(&o.KubeletKeyFile, "kubelet-client-key", "", "client key for --kubelet-client-certificate")
	f.StringVar(&o.KubeletCAFile, "kubelet-certificate-authority", "", "CA bundle to verify node agents' log server certificates (empty: not verified)")
	f.Int64Var(&o.NotReadyTolerationSeconds, "default-not-ready-toleration-seconds", o.NotReadyTolerationSeconds, "tolerationSeconds of the not-ready:NoExecute toleration added to every pod that has none")
	f.Int64Var(&o.UnreachableTolerationSeconds, "default-unreachable-toleration-seconds", o.UnreachableTolerationSeconds, "tolerationSeconds of the unreachable:NoExecute toleration added to every pod that has none")
	f.StringVar(&o.AdmissionConfigFile, "admission-control-config-file", "", "AdmissionConfiguration (apiserver.config.k8s.io/v1) file; its PodSecurity entry (a pod-security.admission.config.k8s.io/v1 PodSecurityConfiguration: default levels and exemptions) is read, other plugins' entries are not")
	f.StringVar(&o.EncryptionConfigFile, "encryption-provider-config", "", "EncryptionConfiguration (apiserver.config.k8s.io/v1) file: which resources are encrypted at rest, with aescbc, aesgcm, secretbox or identity")
	f.BoolVar(&o.InsecurePlaintext, "insecure-plaintext", false, "serve plaintext gRPC without TLS (local experiments only)")
}

// endpointList is a comma-separated list flag whose entries are trimmed
// and whose empty entries are dropped.
type endpointList []string

func (l *endpointList) String() string { return strings.Join(*l, ",") }
func (l *endpointList) Type() string   { return "string" }

func (l *endpointList) Set(v string) error {
	*l = nil
	for _, u := range strings.Split(v, ",") {
		if u = strings.TrimSpace(u); u != "" {
			*l = append(*l, u)
		}
	}
	return nil
}
