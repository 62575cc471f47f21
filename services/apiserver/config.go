// This file holds the API service's Config: the store, listener, TLS,
// identity, admission, cache and limit settings New reads.

package apiserver

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/services/apiserver/audit"
	"github.com/kplane/kplane/services/apiserver/encryption"
	"github.com/kplane/kplane/services/apiserver/podsecurity"
)

// Config configures the API service.
type Config struct {
	// StoreEndpoints are the etcd v3 endpoints of the store (kplane store
	// or etcd). Ignored when StoreClient is set.
	StoreEndpoints []string
	// StoreTLS, if set, is used to reach the store (mTLS).
	StoreTLS *tls.Config
	// StoreClient, if set, is used instead of dialling StoreEndpoints; the
	// service does not close it.
	StoreClient *clientv3.Client
	// Prefix of every key; "/registry/" if empty.
	Prefix string
	// Encryption, if set, encrypts the objects of the resources it names
	// at rest (kplane apiserver --encryption-provider-config).
	Encryption *encryption.Transformers

	// Listen is the gRPC address, e.g. "127.0.0.1:6443". Listener, if set,
	// is used instead.
	Listen   string
	Listener net.Listener
	// TLS, if set, serves gRPC over TLS; set ClientAuth and ClientCAs on it
	// to verify client certificates (authentication reads the verified
	// chain).
	TLS *tls.Config

	// The stages of the write path; Authenticator and Authorizer are
	// required.
	Authenticator Authenticator
	Authorizer    Authorizer
	Mutating      []MutatingAdmission
	Validating    []ValidatingAdmission
	// PodSecurity configures the PodSecurity admission plugin, always on
	// as in Kubernetes (podsecurity.LoadConfig reads it from
	// --admission-control-config-file); nil: privileged everywhere, no
	// exemptions.
	PodSecurity *podsecurity.Configuration
	// ServiceAccountTokens, if set, issues ServiceAccount tokens
	// (TokenRequest) and serves the issuer discovery documents; nil: the
	// serviceaccounts/token subresource is not served.
	ServiceAccountTokens *ServiceAccountTokens
	// TokenAuthenticator answers TokenReviews; nil: every token is
	// refused.
	TokenAuthenticator TokenAuthenticator
	// Auditor, if set, records every request that reached authentication.
	Auditor Auditor
	// AuditPolicy decides each request's audit level and stages (nil:
	// Metadata, ResponseComplete only).
	AuditPolicy *audit.Policy
	// Informers are fed the objects of a resource ("clusterroles", ...) as
	// the service's watch sees them (RBAC and webhook caches).
	Informers map[string][]ObjectSink
	// Bootstrap objects are created at start-up if absent (default RBAC
	// roles, ...), after the built-in namespaces.
	Bootstrap []proto.Message

	// WatchWindow is the number of recent events kept per resource for
	// watches to resume from (default 10000). WatchBuffer is each watcher's
	// buffer; a watcher that falls that far behind is cut off (default 1000).
	// BookmarkInterval is how often bookmarks are sent (default 30s).
	WatchWindow      int
	WatchBuffer      int
	BookmarkInterval time.Duration

	// CompactionInterval is kube-apiserver's --etcd-compaction-interval:
	// how often the replicas compact the store (one of them per interval,
	// to the revision of an interval earlier; see package compaction). 0
	// turns compaction off; kplane apiserver's flag defaults to
	// compaction.DefaultInterval.
	CompactionInterval time.Duration
	// EventTTL is kube-apiserver's --event-ttl: how long an event lives
	// after it was last written (its store key is attached to a lease). 0:
	// events never expire.
	EventTTL time.Duration
	// MaxRequestsInflight and MaxMutatingRequestsInflight limit the unary
	// calls running at once, reads and writes apart, as kube-apiserver's
	// --max-requests-inflight and --max-mutating-requests-inflight (kplane
	// apiserver's flags default to Kubernetes' 400 and 200); a call over
	// the limit gets 429. 0: no limit.
	MaxRequestsInflight, MaxMutatingRequestsInflight int
	// EnablePriorityAndFairness is kube-apiserver's
	// --enable-priority-and-fairness (kplane apiserver's flag defaults to
	// true): unary calls are classified by the FlowSchemas and limited by
	// their priority levels (apf.go), which share the sum of the two
	// in-flight limits (Kubernetes' 400 and 200 where 0), instead of the
	// in-flight limits themselves.
	EnablePriorityAndFairness bool
	// RequestTimeout bounds every unary call (kube-apiserver's
	// --request-timeout; watches and other streams are not bounded by it).
	// 0: DefaultRequestTimeout.
	RequestTimeout time.Duration

	// ServiceClusterIPRange is kube-apiserver's --service-cluster-ip-range:
	// the Services' cluster IPs (its first address is the kubernetes
	// Service's). Zero: DefaultServiceClusterIPRange, 10.0.0.0/24, as
	// kube-apiserver; kplane up, the compose file and the Helm chart pass
	// 10.96.0.0/12, as kubeadm does.
	ServiceClusterIPRange netip.Prefix
	// ServiceNodePortRange is --service-node-port-range (zero: 30000-32767).
	ServiceNodePortRange PortRange
	// AdvertiseAddress and SecurePort are where clients reach the API
	// (kube-apiserver's --advertise-address and --secure-port; for kplane
	// the gateway's address and HTTPS port): the kubernetes Service's
	// target port and the address its Endpoints list while this replica
	// runs. An invalid AdvertiseAddress lists none; SecurePort 0 is 6443.
	AdvertiseAddress netip.Addr
	SecurePort       int
	// ServiceRepairInterval is how often the cluster IP and node port
	// records are checked against the Services (Kubernetes' repair
	// controllers run every 3 minutes; 0: that).
	ServiceRepairInterval time.Duration
	// EndpointReconcileInterval is how often the kubernetes Service, its
	// Endpoints and this replica's lease on them are reconciled (0: 10 s, as
	// kube-apiserver's lease reconciler).
	EndpointReconcileInterval time.Duration

	// KubeletTLS is how pods/log reaches node agents' log servers over
	// HTTPS: RootCAs verifies their serving certificates, Certificates is
	// the API service's client certificate. nil: pods/log answers
	// ServiceUnavailable.
	KubeletTLS *tls.Config

	// Logger; nil discards.
	Logger *slog.Logger
	// TracerProvider and MeterProvider instrument the gRPC server, the
	// store client and the write path's stages; nil uses the global ones.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}
