// This file holds `kplane apiserver`: the API service's flags (store, TLS,
// authentication, audit, watch cache, compaction, limits) mapped onto its
// configuration, the TLS helpers the components share, and the optional
// pprof listener.

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/apiserver/audit"
	"github.com/kplane/kplane/services/apiserver/authn"
	"github.com/kplane/kplane/services/apiserver/authz"
	"github.com/kplane/kplane/services/apiserver/compaction"
	"github.com/kplane/kplane/services/apiserver/defaulttolerationseconds"
	"github.com/kplane/kplane/services/apiserver/encryption"
	"github.com/kplane/kplane/services/apiserver/podsecurity"
	"github.com/kplane/kplane/services/apiserver/serviceaccountadmission"
	"github.com/kplane/kplane/services/apiserver/webhook"
)

func newAPIServerCommand() *cobra.Command {
	var (
		storeEndpoints                       string
		storeCA, storeCert, storeKey         string
		listen                               string
		tlsCert, tlsKey, clientCA            string
		tokenFile                            string
		anonymous                            bool
		auditPath, auditPolicyFile           string
		auditWebhookConfig, auditWebhookMode string
		auditWebhookBackoff                  time.Duration
		auditMaxSizeMB, auditMaxBackups      int
		watchWindow, watchBuffer             int
		bookmarkInterval                     time.Duration
		compactionInterval                   time.Duration
		eventTTL                             time.Duration
		requestTimeout                       time.Duration
		maxInflight, maxMutatingInflight     int
		enableAPF                            bool
		logLevel                             string
		allowInsecureWithoutClientCertsOK    bool
		kubeletCert, kubeletKey, kubeletCA   string
		tf                                   telemetryFlags
		notReadySeconds                      int64
		unreachableSeconds                   int64
		profilingListen                      string
		blockProfileRate                     int
		encryptionConfig                     string
		admissionConfig                      string
		gcPercent                            int
		serviceCIDR, nodePortRange           string
		advertiseAddress                     string
		securePort                           int
		sa                                   saFlags
		oidc                                 oidcFlags
	)
	cmd := &cobra.Command{
		Use:   "apiserver",
		Short: "Run the API service: typed Kubernetes resources over gRPC on the store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if compactionInterval < 0 {
				return fmt.Errorf("--etcd-compaction-interval %s: must not be negative (0 turns compaction off)", compactionInterval)
			}
			if maxInflight < 0 || maxMutatingInflight < 0 {
				return fmt.Errorf("--max-requests-inflight and --max-mutating-requests-inflight must not be negative (0: no limit)")
			}
			if requestTimeout <= 0 {
				return fmt.Errorf("--request-timeout %s: must be positive", requestTimeout)
			}
			if eventTTL < 0 {
				return fmt.Errorf("--event-ttl %s: must not be negative (0 keeps events forever)", eventTTL)
			}
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			setGCPercent(gcPercent, log)
			tel, stop, err := tf.start(cmd.Context(), "apiserver", listen, false, log)
			if err != nil {
				return err
			}
			defer stop()
			cidr, err := netip.ParsePrefix(serviceCIDR)
			if err != nil {
				return fmt.Errorf("--service-cluster-ip-range %q: %w", serviceCIDR, err)
			}
			ports, err := apiserver.ParsePortRange(nodePortRange)
			if err != nil {
				return fmt.Errorf("--service-node-port-range: %w", err)
			}
			var advertise netip.Addr
			if advertiseAddress != "" {
				if advertise, err = netip.ParseAddr(advertiseAddress); err != nil {
					return fmt.Errorf("--advertise-address %q: %w", advertiseAddress, err)
				}
			}
			if securePort < 1 || securePort > 65535 {
				return fmt.Errorf("--secure-port %d: must be a port number", securePort)
			}
			cfg := apiserver.Config{
				ServiceClusterIPRange:       cidr,
				ServiceNodePortRange:        ports,
				AdvertiseAddress:            advertise,
				SecurePort:                  securePort,
				TracerProvider:              tel.TracerProvider(),
				MeterProvider:               tel.MeterProvider(),
				StoreEndpoints:              splitURLs(storeEndpoints),
				Listen:                      listen,
				WatchWindow:                 watchWindow,
				WatchBuffer:                 watchBuffer,
				BookmarkInterval:            bookmarkInterval,
				CompactionInterval:          compactionInterval,
				EventTTL:                    eventTTL,
				RequestTimeout:              requestTimeout,
				MaxRequestsInflight:         maxInflight,
				MaxMutatingRequestsInflight: maxMutatingInflight,
				EnablePriorityAndFairness:   enableAPF,
				Logger:                      log,
			}
			if storeCA != "" || storeCert != "" {
				t, err := clientTLS(storeCA, storeCert, storeKey)
				if err != nil {
					return fmt.Errorf("store TLS: %w", err)
				}
				cfg.StoreTLS = t
			}
			switch {
			case tlsCert != "":
				t, err := serverTLS(tlsCert, tlsKey, clientCA)
				if err != nil {
					return fmt.Errorf("serving TLS: %w", err)
				}
				cfg.TLS = t
			case !allowInsecureWithoutClientCertsOK:
				return fmt.Errorf("--tls-cert-file and --tls-private-key-file are required (or --insecure-plaintext for local experiments)")
			default:
				log.Warn("serving plaintext gRPC: no TLS, no client certificates")
			}
			// pods/log: the client certificate for node agents' log
			// servers (kube-apiserver's --kubelet-client-* flags).
			if kubeletCert != "" {
				t, err := clientTLS(kubeletCA, kubeletCert, kubeletKey)
				if err != nil {
					return fmt.Errorf("kubelet client TLS: %w", err)
				}
				if kubeletCA == "" {
					log.Warn("pods/log does not verify node agents' serving certificates: no --kubelet-certificate-authority")
					t.InsecureSkipVerify = true
				}
				cfg.KubeletTLS = t
			}
			saTokens, saAuthn, saObjects, err := sa.build(advertiseAddress, securePort)
			if err != nil {
				return err
			}
			acfg := authn.Config{TokenFile: tokenFile, Anonymous: anonymous, Logger: log, APIAudiences: sa.audiences()}
			if saAuthn != nil {
				acfg.ServiceAccounts = saAuthn
			}
			jwt, err := oidc.build(cmd.Context(), sa.audiences(), sa.issuers)
			if err != nil {
				return err
			}
			if jwt != nil {
				acfg.JWT = jwt
			}
			an, err := authn.New(acfg)
			if err != nil {
				return err
			}
			cfg.Authenticator = an
			cfg.TokenAuthenticator = an
			cfg.ServiceAccountTokens = saTokens
			rbac := authz.NewRBAC(log)
			pods := authz.NewPodIndex()
			cfg.Authorizer = authz.NewDefault(rbac, pods)
			// A webhook named by a Service is reached at a ready endpoint
			// from the Service's EndpointSlices (kplane has no Service
			// proxy); the server is built below, before any call.
			var srv *apiserver.Server
			hooks := webhook.New(webhook.Config{Logger: log, TracerProvider: tel.TracerProvider(),
				ResolveService: func(ctx context.Context, namespace, name string, port int32) (string, error) {
					return srv.ResolveService(ctx, namespace, name, port)
				}})
			// As kube-apiserver's default plugins: ServiceAccount (the
			// default ServiceAccount, its existence, the token volume),
			// DefaultTolerationSeconds, then the webhooks.
			saAdmission := serviceaccountadmission.New(saTokens != nil && saTokens.Issuer != nil)
			cfg.Mutating = []apiserver.MutatingAdmission{saAdmission, defaulttolerationseconds.New(notReadySeconds, unreachableSeconds), hooks}
			cfg.Validating = []apiserver.ValidatingAdmission{authz.NewNodeRestriction(), hooks}
			cfg.Informers = map[string][]apiserver.ObjectSink{
				"roles": {rbac}, "clusterroles": {rbac}, "rolebindings": {rbac}, "clusterrolebindings": {rbac},
				"pods":                            {pods},
				"persistentvolumeclaims":          {pods},
				"serviceaccounts":                 {saAdmission},
				"mutatingwebhookconfigurations":   {hooks},
				"validatingwebhookconfigurations": {hooks},
				"namespaces":                      {hooks},
			}
			if saObjects != nil {
				for _, res := range []string{"serviceaccounts", "pods", "secrets", "nodes"} {
					cfg.Informers[res] = append(cfg.Informers[res], saObjects)
				}
			}
			if cfg.PodSecurity, err = podsecurity.LoadConfig(admissionConfig); err != nil {
				return fmt.Errorf("--admission-control-config-file: %w", err)
			}
			if encryptionConfig != "" {
				if cfg.Encryption, err = encryption.Load(encryptionConfig); err != nil {
					return err
				}
			}
			boot, err := authz.BootstrapMessages()
			if err != nil {
				return err
			}
			cfg.Bootstrap = boot
			al, err := audit.New(audit.Config{Path: auditPath, MaxSizeMB: auditMaxSizeMB, MaxBackups: auditMaxBackups})
			if err != nil {
				return err
			}
			var auditors audit.Multi
			if al != nil {
				defer al.Close()
				auditors = append(auditors, al)
			}
			if auditWebhookConfig != "" {
				wh, err := audit.NewWebhook(audit.WebhookConfig{ConfigFile: auditWebhookConfig, Mode: auditWebhookMode, InitialBackoff: auditWebhookBackoff})
				if err != nil {
					return err
				}
				stop := make(chan struct{})
				if err := wh.Run(stop); err != nil {
					return err
				}
				defer func() { close(stop); wh.Shutdown() }()
				auditors = append(auditors, wh)
			}
			switch len(auditors) {
			case 0:
			case 1:
				cfg.Auditor = auditors[0]
			default:
				cfg.Auditor = auditors
			}
			if cfg.Auditor != nil && auditPolicyFile != "" {
				if cfg.AuditPolicy, err = audit.LoadPolicy(auditPolicyFile); err != nil {
					return err
				}
			}
			s, err := apiserver.New(cfg)
			srv = s
			if err != nil {
				return err
			}
			if profilingListen != "" {
				stop, err := serveProfiling(profilingListen, blockProfileRate, log)
				if err != nil {
					return err
				}
				defer stop()
			}
			log.Info("API service listening", "addr", s.Addr(), "store", cfg.StoreEndpoints)
			return s.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&storeEndpoints, "store-endpoints", "http://127.0.0.1:2379", "comma-separated etcd v3 endpoints of the store (kplane store or etcd)")
	f.StringVar(&storeCA, "store-cafile", "", "CA bundle to verify the store's certificate")
	f.StringVar(&storeCert, "store-certfile", "", "client certificate for the store")
	f.StringVar(&storeKey, "store-keyfile", "", "client key for the store")
	f.DurationVar(&compactionInterval, "etcd-compaction-interval", compaction.DefaultInterval, "how often the store's history is compacted, as kube-apiserver does: one replica per interval compacts to the revision of an interval earlier, coordinating through the store's compact_rev_key; 0 turns it off")
	f.IntVar(&maxInflight, "max-requests-inflight", apiserver.DefaultMaxRequestsInflight, "read calls (get, list) running at once before more get 429 TooManyRequests, as kube-apiserver's; watches are not counted; 0: no limit")
	f.BoolVar(&enableAPF, "enable-priority-and-fairness", true, "classify unary calls by the FlowSchemas and limit them by their priority levels (API Priority and Fairness), which share --max-requests-inflight + --max-mutating-requests-inflight, instead of those two limits, as kube-apiserver's")
	f.IntVar(&maxMutatingInflight, "max-mutating-requests-inflight", apiserver.DefaultMaxMutatingRequestsInflight, "writing calls running at once before more get 429 TooManyRequests, as kube-apiserver's; 0: no limit")
	f.DurationVar(&requestTimeout, "request-timeout", apiserver.DefaultRequestTimeout, "the longest a unary call may take (watches and log streams are not bounded by it), as kube-apiserver's --request-timeout; a store call cut short answers 504 Timeout")
	f.DurationVar(&eventTTL, "event-ttl", apiserver.DefaultEventTTL, "how long an event lives after it was last written, as kube-apiserver's --event-ttl; 0 keeps events forever")
	f.StringVar(&listen, "listen", "127.0.0.1:6443", "gRPC listen address")
	f.StringVar(&serviceCIDR, "service-cluster-ip-range", apiserver.DefaultServiceClusterIPRange.String(), "the CIDR Services' cluster IPs are allocated from, as kube-apiserver's (single stack); its first address is the kubernetes Service's")
	f.StringVar(&nodePortRange, "service-node-port-range", apiserver.DefaultServiceNodePortRange.String(), "the ports NodePort and LoadBalancer Services' node ports are allocated from, as kube-apiserver's")
	f.StringVar(&advertiseAddress, "advertise-address", "", "the address clients reach the API at (for kplane, the gateway's): listed in the default/kubernetes Endpoints while this replica runs, as kube-apiserver's --advertise-address with the lease endpoint reconciler; empty lists none")
	f.IntVar(&securePort, "secure-port", apiserver.DefaultSecurePort, "the port clients reach the API at (for kplane, the gateway's HTTPS port): the kubernetes Service's target port and its Endpoints' port")
	f.StringVar(&tlsCert, "tls-cert-file", "", "serving certificate")
	f.StringVar(&tlsKey, "tls-private-key-file", "", "serving key")
	f.StringVar(&clientCA, "client-ca-file", "", "CA that signs client certificates (CN = user, O = groups)")
	f.StringVar(&tokenFile, "token-auth-file", "", "static bearer tokens, Kubernetes' CSV format: token,user,uid,\"group1,group2\"")
	sa.register(f)
	oidc.register(f)
	f.BoolVar(&anonymous, "anonymous-auth", false, "let requests without credentials in as system:anonymous")
	f.StringVar(&auditPath, "audit-log-path", "", "audit log file (one JSON line per audited request stage); - is standard output; empty disables it")
	f.StringVar(&auditWebhookConfig, "audit-webhook-config-file", "", "kubeconfig naming the audit webhook: audit events are POSTed to it as audit.k8s.io/v1 EventLists")
	f.StringVar(&auditWebhookMode, "audit-webhook-mode", audit.WebhookBatch, "batch (buffered, asynchronous) or blocking (each event sent before the request goes on)")
	f.DurationVar(&auditWebhookBackoff, "audit-webhook-initial-backoff", 10*time.Second, "wait before the first retry of a failed webhook call")
	f.StringVar(&auditPolicyFile, "audit-policy-file", "", "audit Policy (audit.k8s.io/v1): level and stages per request; empty: every request at Metadata, ResponseComplete only")
	f.IntVar(&auditMaxSizeMB, "audit-log-maxsize", 100, "rotate the audit log at this size in MB")
	f.IntVar(&auditMaxBackups, "audit-log-maxbackup", 10, "rotated audit logs to keep")
	f.IntVar(&watchWindow, "watch-window", 10000, "recent events kept per resource for watches to resume from")
	f.IntVar(&watchBuffer, "watch-buffer", 1000, "events buffered per watcher before a slow one is cut off")
	f.DurationVar(&bookmarkInterval, "bookmark-interval", 30*time.Second, "how often watches that allow bookmarks get one")
	f.StringVar(&kubeletCert, "kubelet-client-certificate", "", "client certificate for node agents' log servers (pods/log); empty: pods/log is unavailable")
	f.StringVar(&kubeletKey, "kubelet-client-key", "", "client key for --kubelet-client-certificate")
	f.StringVar(&kubeletCA, "kubelet-certificate-authority", "", "CA bundle to verify node agents' log server certificates (empty: not verified)")
	f.Int64Var(&notReadySeconds, "default-not-ready-toleration-seconds", defaulttolerationseconds.DefaultSeconds, "tolerationSeconds of the not-ready:NoExecute toleration added to every pod that has none")
	f.Int64Var(&unreachableSeconds, "default-unreachable-toleration-seconds", defaulttolerationseconds.DefaultSeconds, "tolerationSeconds of the unreachable:NoExecute toleration added to every pod that has none")
	f.StringVar(&admissionConfig, "admission-control-config-file", "", "AdmissionConfiguration (apiserver.config.k8s.io/v1) file; its PodSecurity entry (a pod-security.admission.config.k8s.io/v1 PodSecurityConfiguration: default levels and exemptions) is read, other plugins' entries are not")
	f.StringVar(&encryptionConfig, "encryption-provider-config", "", "EncryptionConfiguration (apiserver.config.k8s.io/v1) file: which resources are encrypted at rest, with aescbc, aesgcm, secretbox or identity")
	f.StringVar(&profilingListen, "profiling-listen", "", "serve Go's net/http/pprof profiles on this address (e.g. 127.0.0.1:6060); empty disables them")
	f.IntVar(&blockProfileRate, "block-profile-rate", 0, "with --profiling-listen: runtime.SetBlockProfileRate (0 leaves block profiling off)")
	f.IntVar(&gcPercent, "gc-percent", apiserverGCPercent, "Go's GC target (runtime/debug.SetGCPercent): the heap may grow this many percent over the live heap before a collection; negative turns the collector off. GOGC in the environment, when set, wins; GOMEMLIMIT still caps the heap")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	tf.register(f)
	f.BoolVar(&allowInsecureWithoutClientCertsOK, "insecure-plaintext", false, "serve plaintext gRPC without TLS (local experiments only)")
	return cmd
}

func serverTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	t := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		t.ClientCAs = pool
		t.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return t, nil
}

func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		t.RootCAs = pool
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificates", file)
	}
	return pool, nil
}

// serveProfiling serves /debug/pprof/ on addr until stop is called.
func serveProfiling(addr string, blockRate int, log *slog.Logger) (stop func(), _ error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--profiling-listen: %w", err)
	}
	runtime.SetBlockProfileRate(blockRate)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("profiling server stopped", "err", err)
		}
	}()
	log.Info("serving profiles", "addr", lis.Addr().String())
	return func() { _ = srv.Close() }, nil
}
