// This file holds the API service's Server: checked and connected by New,
// served by Run, with the watch caches started around it (its Config:
// config.go; start-up objects and feeds: bootstrap.go).

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kplane/kplane/internal/telemetry"
	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	listjsonv1 "github.com/kplane/kplane/proto/kplane/listjson/v1"
	metricsv1beta1 "github.com/kplane/kplane/proto/kplane/metrics/v1beta1"
	watchstreamv1 "github.com/kplane/kplane/proto/kplane/watchstream/v1"
	"github.com/kplane/kplane/services/apiserver/authz"
	"github.com/kplane/kplane/services/apiserver/compaction"
	"github.com/kplane/kplane/services/apiserver/podsecurity"
	"github.com/kplane/kplane/services/apiserver/policy"
)

// Server is the API service.
type Server struct {
	cfg       Config
	log       *slog.Logger
	resources map[string]*resourceInfo
	// views are the resources served as another group's stored ones
	// (resourceInfo.stored), by "<group>/<resource>".
	views map[string]*resourceInfo
	// listJSON keeps rendered list items (listjson.go).
	listJSON *listJSONCache
	// crs holds the custom resources served (crregistry.go).
	crs       *crRegistry
	store     *storage
	ownClient bool
	cachers   map[string]*cacher
	compactor *compaction.Compactor // nil: compaction off
	grpc      *grpc.Server
	lis       net.Listener
	ready     chan struct{}
	health    *health.Server
	kubelet   *http.Client // pods/log; nil without Config.KubeletTLS
	tracer    trace.Tracer
	// escalation refuses rbac writes that grant more than the writer
	// holds; it always runs (see rbacescalation.go).
	escalation *authz.Escalation
	// svcs allocates Services' cluster IPs and node ports.
	svcs *serviceAddressing
	// inflight holds the slots of the calls running (interceptors.go), and
	// throttled counts those refused.
	inflight  inflight
	throttled metric.Int64Counter
	// unary are the interceptors of every unary call, in order; the JSON
	// list, a stream, runs them around its whole answer (listjson.go).
	unary []grpc.UnaryServerInterceptor
	// consistentLists counts which path served consistent lists
	// (consistentlist.go).
	consistentLists consistentListStats
	// apfMetrics are API Priority and Fairness' (apf.go).
	apfMetrics apfMetrics
	// metricsReg unregisters the gauges' callback.
	metricsReg metric.Registration
	// policies enforces ValidatingAdmissionPolicies (admissionpolicy.go);
	// always on, as in Kubernetes.
	policies *policy.Policies
	// typeCheck type-checks policies' expressions (their status).
	typeCheck *policy.TypeChecker
	// apf is the view of the flowcontrol objects API Priority and
	// Fairness works from (flowcontrol_config.go).
	apf *apfState
	// apfEngine classifies and limits unary calls when priority and
	// fairness is on (nil when off).
	apfEngine *apfEngine
	// podSecurity enforces the Pod Security Standards (podsecurity.go).
	podSecurity *podsecurity.Plugin
	// limitRangesLive holds the LimitRanger's live lookups (limitranger.go).
	limitRangesLive liveLimitRanges
}

// New checks cfg, connects to the store and listens; Run serves.
func New(cfg Config) (*Server, error) {
	if cfg.Authenticator == nil {
		return nil, errors.New("apiserver: an Authenticator is required")
	}
	if cfg.Authorizer == nil {
		return nil, errors.New("apiserver: an Authorizer is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/registry/"
	}
	if cfg.WatchWindow <= 0 {
		cfg.WatchWindow = 10000
	}
	if cfg.WatchBuffer <= 0 {
		cfg.WatchBuffer = 1000
	}
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = 30 * time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	s := &Server{cfg: cfg, log: log, resources: map[string]*resourceInfo{}, cachers: map[string]*cacher{}, ready: make(chan struct{}),
		kubelet: newKubeletClient(cfg.KubeletTLS), listJSON: newListJSONCache(listJSONCacheBytes), tracer: cfg.TracerProvider.Tracer("github.com/kplane/kplane/services/apiserver")}
	for _, r := range builtinResources() {
		s.resources[r.Resource] = r
	}
	s.views = map[string]*resourceInfo{
		"events.k8s.io/events":                 eventsView(s.resources["events"]),
		"autoscaling/horizontalpodautoscalers": hpaV1View(s.resources["horizontalpodautoscalers"]),
	}
	convs, err := conversion.NewCRConverterFactory(endpointResolver{s}, nil)
	if err != nil {
		return nil, fmt.Errorf("apiserver: conversion webhooks: %w", err)
	}
	s.crs = newCRRegistry(log, convs)
	s.escalation = newEscalation(s)
	s.policies = s.newPolicies()
	s.typeCheck = s.typeChecker()
	psa, err := podsecurity.New(cfg.PodSecurity, podSecurityCluster{s}, cfg.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	s.podSecurity = psa
	svcs, err := newServiceAddressing(cfg.Prefix, cfg.ServiceClusterIPRange, cfg.ServiceNodePortRange)
	if err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	s.svcs = svcs
	s.inflight = newInflight(cfg.MaxRequestsInflight, cfg.MaxMutatingRequestsInflight)
	s.apf = newAPFState()
	for res := range s.cfg.Informers {
		if s.resources[res] == nil {
			return nil, fmt.Errorf("apiserver: informer for unknown resource %q", res)
		}
	}
	cli := cfg.StoreClient
	if cli == nil {
		if len(cfg.StoreEndpoints) == 0 {
			return nil, errors.New("apiserver: no store endpoints")
		}
		var err error
		cli, err = clientv3.New(clientv3.Config{
			Endpoints: cfg.StoreEndpoints, TLS: cfg.StoreTLS, DialTimeout: 5 * time.Second,
			// A member that stops answering (frozen, partitioned) is
			// noticed by its missed pings within 9 s, under a Lease's
			// 10 s renew deadline, and its connection dropped, and calls
			// go to the others. kube-apiserver pings every 30 s and waits
			// 10 s more; the store, like etcd, accepts a ping every 5 s
			// (--grpc-keepalive-min-time), so 6 s keeps a margin.
			DialKeepAliveTime: 6 * time.Second, DialKeepAliveTimeout: 3 * time.Second,
			// Objects up to the store's limit, lists of many of them.
			MaxCallRecvMsgSize: 256 << 20,
			// The etcd client's own retry chatter stays out of the
			// service's log.
			Logger: zap.NewNop(),
			// Metrics per store method and the trace context sent along,
			// but no client span: the stage span (store.Txn) is the
			// client side of the store's call, and a second span per
			// store RPC was a tenth of the traced write path's spans.
			DialOptions: []grpc.DialOption{grpc.WithStatsHandler(telemetry.PropagatingClientHandler(cfg.MeterProvider))},
		})
		if err != nil {
			return nil, fmt.Errorf("apiserver: connecting to the store: %w", err)
		}
		s.ownClient = true
	}
	s.store = &storage{cli: cli, prefix: cfg.Prefix, enc: cfg.Encryption, leases: newLeaseManager(cli), own: newOwnWrites("priorityclasses")}
	if cfg.EventTTL > 0 {
		s.store.ttls = map[string]time.Duration{"events": cfg.EventTTL}
	}
	for name, r := range s.resources {
		s.cachers[name] = newCacher(r, s.store, log, cfg.WatchWindow, cfg.WatchBuffer, cfg.BookmarkInterval)
	}
	if cfg.CompactionInterval > 0 {
		c, err := compaction.New(compaction.Config{KV: cli, Interval: cfg.CompactionInterval, Logger: log, MeterProvider: cfg.MeterProvider})
		if err != nil {
			s.closeClient()
			return nil, fmt.Errorf("apiserver: %w", err)
		}
		s.compactor = c
	}
	if err := s.registerMetrics(cfg.MeterProvider); err != nil {
		s.closeClient()
		return nil, err
	}
	lis := cfg.Listener
	if lis == nil {
		addr := cfg.Listen
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		var err error
		lis, err = net.Listen("tcp", addr)
		if err != nil {
			s.closeClient()
			return nil, fmt.Errorf("apiserver: %w", err)
		}
	}
	s.lis = lis
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(4 << 20), grpc.ForceServerCodecV2(codec{}),
		// Clients ping every 30s (client.Dial) to notice a replica that
		// stopped answering; gRPC's default policy would refuse that.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.StatsHandler(telemetry.ServerHandler(cfg.TracerProvider, cfg.MeterProvider)),
		grpc.ChainStreamInterceptor(s.authenticatedReflection)}
	limit := s.limitInflight
	if cfg.EnablePriorityAndFairness {
		limit = s.priorityAndFairness
	}
	s.unary = []grpc.UnaryServerInterceptor{limit, s.boundUnary, s.auditBodies}
	opts = append(opts, grpc.ChainUnaryInterceptor(s.unary...))
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.grpc = grpc.NewServer(opts...)
	registerServices(s.grpc, s)
	authorizationv1.RegisterAuthorizationServiceServer(s.grpc, &accessReviews{s: s})
	authenticationv1.RegisterAuthenticationServiceServer(s.grpc, &authentications{s: s})
	watchstreamv1.RegisterWatchStreamServiceServer(s.grpc, &watchStreamService{s: s})
	listjsonv1.RegisterListJSONServiceServer(s.grpc, &listJSONService{s: s})
	dynamicv1.RegisterResourceServiceServer(s.grpc, &dynamicService{s: s})
	metricsv1beta1.RegisterPodMetricsServiceServer(s.grpc, &podMetricsService{s: s})
	metricsv1beta1.RegisterNodeMetricsServiceServer(s.grpc, &nodeMetricsService{s: s})
	reflection.Register(s.grpc)
	// gRPC's health service: NOT_SERVING until ready and again while
	// stopping, so that clients with health checking (client.Dial) send
	// their calls to the other replicas.
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	if cfg.EnablePriorityAndFairness {
		reads, writes := cfg.MaxRequestsInflight, cfg.MaxMutatingRequestsInflight
		if reads <= 0 {
			reads = DefaultMaxRequestsInflight
		}
		if writes <= 0 {
			writes = DefaultMaxMutatingRequestsInflight
		}
		s.apfEngine = newAPFEngine(reads+writes, cfg.RequestTimeout, s.apfMethods())
		s.apf.onChange = func() { s.apfEngine.rebuild(s.apf) }
	}
	return s, nil
}

// cacherFor is r's watch cache: a built-in's, or a custom resource's own.
func (s *Server) cacherFor(r *resourceInfo) *cacher {
	if r.custom != nil {
		return r.custom.cacher
	}
	return s.cachers[r.storedAs().Resource]
}

// Addr is the address the service listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Ready is closed once every watch cache has its first list, the built-in
// namespaces and bootstrap objects exist, and every Config.Informers sink
// has been given every object the store held after bootstrap (so the
// authorizer and admission decide on complete caches from the first
// request a caller makes after Ready).
func (s *Server) Ready() <-chan struct{} { return s.ready }

func (s *Server) closeClient() {
	if s.ownClient {
		_ = s.store.cli.Close()
	}
}

// Run serves until ctx ends, then stops gracefully.
func (s *Server) Run(ctx context.Context) error {
	defer s.closeClient()
	defer func() { _ = s.metricsReg.Unregister() }()
	if err := s.checkStorageFormat(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if !s.checkProgressSupport(ctx) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.retryProgressSupport(ctx)
		}()
	}
	for _, c := range s.cachers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(ctx)
		}()
	}
	if s.compactor != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.compactor.Run(ctx)
		}()
	}
	// A namespace being deleted loses its custom objects.
	var cleanMu sync.Mutex
	cleaning := map[string]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.feed(ctx, s.cachers["namespaces"], &nsCleanupSink{crs: s.crs, del: s.deleteCustomObjects,
			start: func(key string, f func(ctx context.Context)) {
				cleanMu.Lock()
				defer cleanMu.Unlock()
				if cleaning[key] {
					return
				}
				cleaning[key] = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() {
						cleanMu.Lock()
						delete(cleaning, key)
						cleanMu.Unlock()
					}()
					f(ctx)
				}()
			}}, nil)
	}()
	// The custom resources follow the CRDs; each one's cache runs until
	// its CRD goes or the service stops.
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.feed(ctx, s.cachers["customresourcedefinitions"], &crdSink{
			g: s.crs,
			newC: func(r *resourceInfo) *cacher {
				return newCacher(r, s.store, s.log, s.cfg.WatchWindow, s.cfg.WatchBuffer, s.cfg.BookmarkInterval)
			},
			cleanup: func(r *resourceInfo) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer r.custom.cleaning.Store(false)
					s.deleteCustomObjects(ctx, r, "")
				}()
			},
			start: func(c *cacher) context.CancelFunc {
				cctx, stop := context.WithCancel(ctx)
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.run(cctx)
				}()
				return stop
			},
		}, nil)
	}()
	serveErr := make(chan error, 1)
	go func() { serveErr <- s.grpc.Serve(s.lis) }()
	go func() {
		if err := s.bootstrap(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Error("bootstrap failed", "err", err)
			return
		}
		// The kubernetes Service and its Endpoints, and the repair of the
		// range records, as kube-apiserver's bootstrap and repair
		// controllers; the first round happens before Ready.
		kubeSvc := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			s.runKubernetesService(ctx, func() { close(kubeSvc) })
		}()
		go func() {
			defer wg.Done()
			s.runServiceRepair(ctx)
		}()
		// API Priority and Fairness: the flowcontrol objects' view and
		// the bootstrap configuration kept in place.
		// As kube-apiserver's readiness waits for its APF bootstrap
		// configuration, Ready waits for the first round of it.
		apfConfigured := make(chan struct{})
		wg.Add(3)
		for _, res := range []string{"flowschemas", "prioritylevelconfigurations"} {
			go func() {
				defer wg.Done()
				s.feed(ctx, s.cachers[res], apfSink{st: s.apf}, nil)
			}()
		}
		go func() {
			defer wg.Done()
			s.runAPFConfig(ctx, func() { close(apfConfigured) })
		}()
		for _, done := range []chan struct{}{kubeSvc, apfConfigured} {
			select {
			case <-done:
			case <-ctx.Done():
				return
			}
		}
		synced := make(chan struct{}, 64)
		n := 0
		for res, sinks := range s.cfg.Informers {
			for _, sink := range sinks {
				n++
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.feed(ctx, s.cachers[res], sink, func() { synced <- struct{}{} })
				}()
			}
		}
		// Ready only once every sink (the RBAC cache, the webhook
		// configurations, ...) holds what the store held after bootstrap:
		// before that the authorizer or admission would decide on a partial
		// picture (an early Forbidden for a component whose role was there).
		for range n {
			select {
			case <-synced:
			case <-ctx.Done():
				return
			}
		}
		close(s.ready)
		s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	}()
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	cancel()
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		s.grpc.Stop()
	}
	wg.Wait()
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

func fieldErrRequiredRV() field.ErrorList {
	return field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), "", "must be specified for an update")}
}
