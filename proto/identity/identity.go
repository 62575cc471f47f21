// Package identity is the contract for who a call to the API service is
// made as: the User, and the gRPC metadata keys that carry one — a front
// proxy's end user or forwarded bearer token, Kubernetes' user
// impersonation — with the keys a front proxy sends beside them (what it
// saw of the HTTP request, for the audit log, and the revision its caller
// last wrote). The gateway and gRPC clients set these keys; the API
// service reads them.
//
// # Front proxies
//
// A trusted front proxy (kplane's gateway) authenticates with its own
// client certificate holding one of the API service's front-proxy groups
// (default DefaultFrontProxyGroup) and passes the end user it
// authenticated on in
//
//	kplane-impersonate-user:  the end user's name (exactly one value)
//	kplane-impersonate-uid:   optional, the end user's uid
//	kplane-impersonate-group: one value per group (repeat the key)
//
// or, instead, the end user's bearer token, which it could not check
// itself (a ServiceAccount token), in
//
//	kplane-forwarded-token:   the token (exactly one value)
//
// Anyone else setting any of these keys is refused.
package identity

// User is an authenticated identity: from a TLS client certificate (CN is
// the name, each O a group) or from a bearer token. A front proxy passes
// Name, UID and Groups on in the kplane-impersonate-* keys.
type User struct {
	Name   string
	UID    string
	Groups []string
	// Extra is what the authenticator knows beside (a ServiceAccount
	// token's pod, node and credential ID), as Kubernetes' user.Info Extra.
	Extra map[string][]string
}

// Metadata keys a front proxy uses to pass the end user on.
const (
	ImpersonateUserKey  = "kplane-impersonate-user"
	ImpersonateUIDKey   = "kplane-impersonate-uid"
	ImpersonateGroupKey = "kplane-impersonate-group"
	ForwardedTokenKey   = "kplane-forwarded-token"
)

// DefaultFrontProxyGroup is the group a front proxy's client certificate
// holds, unless the API service is configured with others.
const DefaultFrontProxyGroup = "system:kplane-gateways"

// MinRevisionKey asks that a read served from the watch cache (with
// resourceVersion "0" or an older one) reflect at least this store
// revision: a front proxy sends its caller's latest write, so that a
// client reads its own writes whichever replica answers. It only ever
// makes a read fresher, so it is believed from anyone.
const MinRevisionKey = "kplane-min-revision"

// Metadata keys a front proxy uses to pass on what it saw of the HTTP
// request, for the audit log: the audit ID it answered the client in the
// Audit-Id header, the request URI, the User-Agent and the client's
// addresses (X-Forwarded-For, then the peer), comma-separated. The API
// service believes them only from a front proxy.
const (
	ForwardedAuditIDKey    = "kplane-audit-id"
	ForwardedRequestURIKey = "kplane-request-uri"
	ForwardedUserAgentKey  = "kplane-user-agent"
	ForwardedForKey        = "kplane-forwarded-for"
)

// Kubernetes' user impersonation (the Impersonate-User, Impersonate-Group,
// Impersonate-Uid and Impersonate-Extra-<key> headers: `kubectl --as`,
// `--as-group`, `--as-uid`) arrives in these metadata keys; the gateway
// passes the headers on under them and a gRPC client may set them itself.
// The API service acts on them once its authorizer allowed the
// authenticated user to impersonate. They are unrelated to the
// kplane-impersonate-* keys of front proxies.
const (
	ActAsUserKey        = "impersonate-user"
	ActAsGroupKey       = "impersonate-group"
	ActAsUIDKey         = "impersonate-uid"
	ActAsExtraKeyPrefix = "impersonate-extra-"
)
