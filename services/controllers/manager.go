// Package controllers is kplane's controller manager: it runs the
// reconcile loops (deployment, replicaset, garbagecollector, endpoints,
// namespace, nodelifecycle, serviceaccount, root-ca-cert-publisher,
// daemonset, statefulset, persistentvolume, disruption, job, cronjob,
// ttl-after-finished, podgc, replicationcontroller, crd, endpointslice,
// endpointslicemirroring, resourcequota, horizontalpodautoscaling) over shared informers, talking only to the API
// service, under one leader election so that of several replicas exactly
// one acts at a time.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/rand"

	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	networkingv1 "github.com/kplane/kplane/proto/kplane/networking/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/crd"
	"github.com/kplane/kplane/services/controllers/cronjob"
	"github.com/kplane/kplane/services/controllers/daemonset"
	"github.com/kplane/kplane/services/controllers/deployment"
	"github.com/kplane/kplane/services/controllers/disruption"
	"github.com/kplane/kplane/services/controllers/endpoints"
	"github.com/kplane/kplane/services/controllers/endpointslice"
	"github.com/kplane/kplane/services/controllers/endpointslicemirroring"
	"github.com/kplane/kplane/services/controllers/garbagecollector"
	"github.com/kplane/kplane/services/controllers/hpa"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
	"github.com/kplane/kplane/services/controllers/job"
	"github.com/kplane/kplane/services/controllers/namespace"
	"github.com/kplane/kplane/services/controllers/nodelifecycle"
	"github.com/kplane/kplane/services/controllers/persistentvolume"
	"github.com/kplane/kplane/services/controllers/podgc"
	"github.com/kplane/kplane/services/controllers/replicaset"
	"github.com/kplane/kplane/services/controllers/replicationcontroller"
	"github.com/kplane/kplane/services/controllers/rootcacertpublisher"
	"github.com/kplane/kplane/services/controllers/serviceaccount"
	"github.com/kplane/kplane/services/controllers/statefulset"
	"github.com/kplane/kplane/services/controllers/ttlafterfinished"
)

// Names of the controllers Config.Controllers selects from.
const (
	Deployment       = "deployment"
	ReplicaSet       = "replicaset"
	GarbageCollector = "garbagecollector"
	Endpoints        = "endpoints"
	Namespace        = "namespace"
	NodeLifecycle    = "nodelifecycle"
	ServiceAccount   = "serviceaccount"
	// RootCACertPublisher runs only with Config.RootCA.
	RootCACertPublisher    = "root-ca-cert-publisher"
	DaemonSet              = "daemonset"
	Disruption             = "disruption"
	Job                    = "job"
	CronJob                = "cronjob"
	TTLAfterFinished       = "ttl-after-finished"
	PodGC                  = "podgc"
	ReplicationController  = "replicationcontroller"
	EndpointSlice          = "endpointslice"
	EndpointSliceMirroring = "endpointslicemirroring"
	// CRD is the CustomResourceDefinition controller (names, Established,
	// the cleanup finalizer).
	CRD              = "crd"
	ResourceQuota    = "resourcequota"
	StatefulSet      = "statefulset"
	PersistentVolume = "persistentvolume"
	// HorizontalPodAutoscaling is the HorizontalPodAutoscaler controller.
	HorizontalPodAutoscaling = "horizontalpodautoscaling"
)

// All is every controller this build has.
func All() []string {
	return []string{Deployment, ReplicaSet, GarbageCollector, Endpoints, Namespace, NodeLifecycle, ServiceAccount, RootCACertPublisher, DaemonSet, Disruption, Job, CronJob, TTLAfterFinished, PodGC, ReplicationController, EndpointSlice, EndpointSliceMirroring, CRD, ResourceQuota, StatefulSet, PersistentVolume, HorizontalPodAutoscaling}
}

// LeaderElection configures the Lease the replicas compete for.
type LeaderElection struct {
	Namespace, Name                           string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Config configures the manager.
type Config struct {
	Conn grpc.ClientConnInterface
	// Controllers to run (default All).
	Controllers []string
	// LeaderElection, if set, runs the controllers only while this replica
	// holds the Lease.
	LeaderElection *LeaderElection
	Identity       string // default hostname_random
	// Workers per controller (defaults 5 deployment, 5 replicaset, 20 gc).
	DeploymentWorkers, ReplicaSetWorkers, GCWorkers int
	// GCCustomResync is how often the garbage collector looks for custom
	// resources that appeared or went (default 10s).
	GCCustomResync                                  time.Duration
	EndpointsWorkers, NamespaceWorkers, NodeWorkers int
	ServiceAccountWorkers                           int
	DaemonSetWorkers                                int // default 2, as Kubernetes' concurrent-daemonset-syncs
	DisruptionWorkers                               int
	JobWorkers, CronJobWorkers, TTLWorkers          int // default 5, as Kubernetes
	ReplicationControllerWorkers                    int // default 5, as Kubernetes' concurrent-rc-syncs
	CRDWorkers                                      int // default 1
	EndpointSliceWorkers                            int // default 5, as Kubernetes' concurrent-service-endpoint-syncs
	ResourceQuotaWorkers                            int // default 5, as Kubernetes' concurrent-resource-quota-syncs
	// ResourceQuotaSyncPeriod is how often every quota is recounted
	// (default 5 minutes, as Kubernetes' --resource-quota-sync-period).
	ResourceQuotaSyncPeriod time.Duration
	StatefulSetWorkers      int // default 5, as Kubernetes' concurrent-statefulset-syncs
	PersistentVolumeWorkers int // default 2
	HPAWorkers              int // default 5, as Kubernetes' concurrent-horizontal-pod-autoscaler-syncs
	// HPASyncPeriod is how often each autoscaler is reconciled (default 15
	// s); HPADownscaleStabilization the scale-down window of one without
	// its own (default 5 minutes).
	HPASyncPeriod, HPADownscaleStabilization time.Duration
	// LocalVolumeDir is where the node-local provisioner's volumes live on
	// their nodes (default /var/lib/kplane/volumes).
	LocalVolumeDir string
	// RootCA is the CA bundle the root-ca-cert-publisher puts in every
	// namespace's kube-root-ca.crt ConfigMap; without it that controller
	// does not run.
	RootCA []byte
	// NodeMonitorGracePeriod is how long a node's Lease may go unrenewed
	// before the node is unreachable (default 40 s); PodEvictionTimeout is
	// how long pods without their own toleration of the unreachable taint
	// stay on such a node (default 300 s).
	NodeMonitorGracePeriod, PodEvictionTimeout time.Duration
	// TerminatedPodGCThreshold is how many Succeeded or Failed pods may
	// exist before the pod garbage collector deletes the oldest (0: keep
	// them all, as Kubernetes; kplane controllers defaults it to 12500).
	TerminatedPodGCThreshold int
	Logger                   *slog.Logger
	// TracerProvider records the reconcile spans; nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Manager runs the controllers.
type Manager struct {
	cfg Config
	log *slog.Logger
	mu  sync.Mutex
	le  *client.LeaderElector
}

// New checks cfg.
func New(cfg Config) (*Manager, error) {
	if cfg.Conn == nil {
		return nil, errors.New("controllers: Conn is required")
	}
	if len(cfg.Controllers) == 0 {
		cfg.Controllers = All()
	}
	for _, n := range cfg.Controllers {
		if !slices.Contains(All(), n) {
			return nil, fmt.Errorf("controllers: unknown controller %q (have %v)", n, All())
		}
	}
	if cfg.Identity == "" {
		h, _ := os.Hostname()
		cfg.Identity = h + "_" + rand.String(8)
	}
	cfg.DeploymentWorkers = cmpOr(cfg.DeploymentWorkers, 5)
	cfg.ReplicaSetWorkers = cmpOr(cfg.ReplicaSetWorkers, 5)
	cfg.GCWorkers = cmpOr(cfg.GCWorkers, 20)
	cfg.EndpointsWorkers = cmpOr(cfg.EndpointsWorkers, 5)
	cfg.NamespaceWorkers = cmpOr(cfg.NamespaceWorkers, 2)
	cfg.NodeWorkers = cmpOr(cfg.NodeWorkers, 2)
	cfg.ServiceAccountWorkers = cmpOr(cfg.ServiceAccountWorkers, 1)
	cfg.DaemonSetWorkers = cmpOr(cfg.DaemonSetWorkers, 2)
	cfg.DisruptionWorkers = cmpOr(cfg.DisruptionWorkers, 1)
	cfg.JobWorkers = cmpOr(cfg.JobWorkers, 5)
	cfg.CronJobWorkers = cmpOr(cfg.CronJobWorkers, 5)
	cfg.TTLWorkers = cmpOr(cfg.TTLWorkers, 5)
	cfg.ReplicationControllerWorkers = cmpOr(cfg.ReplicationControllerWorkers, 5)
	cfg.CRDWorkers = cmpOr(cfg.CRDWorkers, 1)
	cfg.EndpointSliceWorkers = cmpOr(cfg.EndpointSliceWorkers, 5)
	cfg.ResourceQuotaWorkers = cmpOr(cfg.ResourceQuotaWorkers, 5)
	cfg.StatefulSetWorkers = cmpOr(cfg.StatefulSetWorkers, 5)
	cfg.PersistentVolumeWorkers = cmpOr(cfg.PersistentVolumeWorkers, 2)
	cfg.HPAWorkers = cmpOr(cfg.HPAWorkers, 5)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, log: log.With("component", "controller-manager", "identity", cfg.Identity)}, nil
}

func cmpOr(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// Identity is this replica's leader-election identity.
func (m *Manager) Identity() string { return m.cfg.Identity }

// IsLeader reports whether this replica runs the controllers now.
func (m *Manager) IsLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg.LeaderElection == nil {
		return true
	}
	return m.le != nil && m.le.IsLeader()
}

// Run runs the controllers until ctx ends: directly, or, with leader
// election, each time this replica wins the Lease (campaigning again after
// losing it). It returns ctx's error.
func (m *Manager) Run(ctx context.Context) error {
	if m.cfg.LeaderElection == nil {
		m.runControllers(ctx)
		return ctx.Err()
	}
	le := m.cfg.LeaderElection
	elector, err := client.NewLeaderElector(client.LeaderElectionConfig{
		Leases: client.Must[*coordv1.Lease](m.cfg.Conn), Namespace: le.Namespace, Name: le.Name, Identity: m.cfg.Identity,
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		ReleaseOnCancel: true, Logger: m.log,
		Callbacks: client.LeaderCallbacks{OnStartedLeading: func(ctx context.Context) {
			m.log.Info("leading: starting controllers")
			m.runControllers(ctx)
			m.log.Info("controllers stopped")
		}},
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.le = elector
	m.mu.Unlock()
	for ctx.Err() == nil {
		elector.Run(ctx)
	}
	return ctx.Err()
}

func newInformer[T interface {
	proto.Message
	ctrl.Object
}](c *client.Client[T], log *slog.Logger) *client.Informer[T] {
	return client.NewInformer(client.ListWatch(c, "", "", "", 500), client.InformerOptions[T]{Logger: log, Indexers: ctrl.Indexers[T]()})
}

// runControllers builds fresh informers and controllers (so a new term
// starts from the API service's state, not a stale cache) and runs them
// until ctx ends.
func (m *Manager) runControllers(ctx context.Context) {
	conn := m.cfg.Conn
	pods := client.Must[*corev1.Pod](conn)
	rss := client.Must[*appsv1.ReplicaSet](conn)
	ds := client.Must[*appsv1.Deployment](conn)
	podInf := newInformer(pods, m.log)
	rsInf := newInformer(rss, m.log)
	dInf := newInformer(ds, m.log)
	var extra []func(context.Context)
	informer := func(run func(context.Context) error) {
		extra = append(extra, func(ctx context.Context) { _ = run(ctx) })
	}
	rec := client.NewRecorder(client.RecorderConfig{Sink: client.Must[*corev1.Event](conn), Component: "controller-manager", Logger: m.log})

	var runs []func(context.Context)
	on := func(n string) bool { return slices.Contains(m.cfg.Controllers, n) }
	if on(ReplicaSet) {
		c := replicaset.New(replicaset.Config{Pods: pods, ReplicaSets: rss, PodInformer: podInf, RSInformer: rsInf, Recorder: rec, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.ReplicaSetWorkers) })
	}
	if on(Deployment) {
		c := deployment.New(deployment.Config{Deployments: ds, ReplicaSets: rss, DInformer: dInf, RSInformer: rsInf, PodInformer: podInf, Recorder: rec, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.DeploymentWorkers) })
	}
	daemonSets := client.Must[*appsv1.DaemonSet](conn)
	revisions := client.Must[*appsv1.ControllerRevision](conn)
	var dsInf *client.Informer[*appsv1.DaemonSet]
	var crInf *client.Informer[*appsv1.ControllerRevision]
	if on(DaemonSet) || on(GarbageCollector) || on(StatefulSet) {
		dsInf, crInf = newInformer(daemonSets, m.log), newInformer(revisions, m.log)
		informer(dsInf.Run)
		informer(crInf.Run)
	}
	if on(DaemonSet) {
		nodeInf := client.NewInformer(client.ListWatch(client.Must[*corev1.Node](conn), "", "", "", 500), client.InformerOptions[*corev1.Node]{Logger: m.log})
		informer(nodeInf.Run)
		c := daemonset.New(daemonset.Config{DaemonSets: daemonSets, Revisions: revisions, Pods: pods, DSInformer: dsInf, RevisionInformer: crInf,
			PodInformer: podInf, NodeInformer: nodeInf, Recorder: rec, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.DaemonSetWorkers) })
	}
	jobs := client.Must[*batchv1.Job](conn)
	var jobInf *client.Informer[*batchv1.Job]
	if on(Job) || on(GarbageCollector) || on(CronJob) || on(TTLAfterFinished) {
		jobInf = newInformer(jobs, m.log)
		informer(jobInf.Run)
	}
	// The batch controllers' Events name them as Kubernetes' do.
	batchRecorder := func(component string) *client.Recorder {
		r := client.NewRecorder(client.RecorderConfig{Sink: client.Must[*corev1.Event](conn), Component: component, Logger: m.log})
		extra = append(extra, r.Run)
		return r
	}
	if on(Job) {
		c := job.New(job.Config{Pods: pods, Jobs: jobs, PodInformer: podInf, JobInformer: jobInf, Recorder: batchRecorder("job-controller"), Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.JobWorkers) })
	}
	if on(TTLAfterFinished) {
		c := ttlafterfinished.New(ttlafterfinished.Config{Jobs: jobs, JobInformer: jobInf, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.TTLWorkers) })
	}
	cjs := client.Must[*batchv1.CronJob](conn)
	var cjInf *client.Informer[*batchv1.CronJob]
	if on(CronJob) || on(GarbageCollector) {
		cjInf = newInformer(cjs, m.log)
		informer(cjInf.Run)
	}
	if on(CronJob) {
		c := cronjob.New(cronjob.Config{Jobs: jobs, CronJobs: cjs, JobInformer: jobInf, CronJobInformer: cjInf, Recorder: batchRecorder("cronjob-controller"), Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.CronJobWorkers) })
	}
	rcs := client.Must[*corev1.ReplicationController](conn)
	var rcInf *client.Informer[*corev1.ReplicationController]
	if on(ReplicationController) || on(GarbageCollector) {
		rcInf = newInformer(rcs, m.log)
		informer(rcInf.Run)
	}
	if on(ReplicationController) {
		c := replicationcontroller.New(replicationcontroller.Config{Pods: pods, ReplicationControllers: rcs, PodInformer: podInf, RCInformer: rcInf,
			Recorder: rec, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.ReplicationControllerWorkers) })
	}
	statefulSets := client.Must[*appsv1.StatefulSet](conn)
	claims := client.Must[*corev1.PersistentVolumeClaim](conn)
	var stsInf *client.Informer[*appsv1.StatefulSet]
	var pvcInf *client.Informer[*corev1.PersistentVolumeClaim]
	if on(StatefulSet) || on(GarbageCollector) || on(PersistentVolume) {
		stsInf, pvcInf = newInformer(statefulSets, m.log), newInformer(claims, m.log)
		informer(stsInf.Run)
		informer(pvcInf.Run)
	}
	if on(StatefulSet) {
		c := statefulset.New(statefulset.Config{StatefulSets: statefulSets, Revisions: revisions, Pods: pods, Claims: claims,
			SetInformer: stsInf, RevisionInformer: crInf, PodInformer: podInf, ClaimInformer: pvcInf, Recorder: rec, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.StatefulSetWorkers) })
	}
	if on(PersistentVolume) {
		pvs := client.Must[*corev1.PersistentVolume](conn)
		classes := client.Must[*storagev1.StorageClass](conn)
		pvInf, scInf := newInformer(pvs, m.log), newInformer(classes, m.log)
		nodeInf := client.NewInformer(client.ListWatch(client.Must[*corev1.Node](conn), "", "", "", 500), client.InformerOptions[*corev1.Node]{Logger: m.log})
		informer(pvInf.Run)
		informer(scInf.Run)
		informer(nodeInf.Run)
		c := persistentvolume.New(persistentvolume.Config{Claims: claims, Volumes: pvs, Classes: classes, ClaimInformer: pvcInf, VolumeInf: pvInf,
			ClassInformer: scInf, PodInformer: podInf, NodeInformer: nodeInf, Recorder: rec, Logger: m.log, TracerProvider: m.cfg.TracerProvider,
			VolumeDir: m.cfg.LocalVolumeDir})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.PersistentVolumeWorkers) })
	}
	if on(GarbageCollector) {
		res := []ctrl.Resource{
			ctrl.NewResource(conn, "v1", rcInf),
			ctrl.NewResource(conn, "v1", podInf),
			ctrl.NewResource(conn, "apps/v1", rsInf),
			ctrl.NewResource(conn, "apps/v1", dInf),
			ctrl.NewResource(conn, "apps/v1", dsInf),
			ctrl.NewResource(conn, "apps/v1", crInf),
			ctrl.NewResource(conn, "batch/v1", jobInf),
			ctrl.NewResource(conn, "batch/v1", cjInf),
			ctrl.NewResource(conn, "apps/v1", stsInf),
			ctrl.NewResource(conn, "v1", pvcInf),
		}
		// The other kinds objects are commonly owned in, cached as
		// metadata only (as Kubernetes' collector's metadata informers).
		for _, r := range []*ctrl.MetaResource{
			ctrl.NewMetadataResource[*corev1.ConfigMap](conn, "v1", m.log),
			ctrl.NewMetadataResource[*corev1.Secret](conn, "v1", m.log),
			ctrl.NewMetadataResource[*corev1.Service](conn, "v1", m.log),
			ctrl.NewMetadataResource[*corev1.ServiceAccount](conn, "v1", m.log),
			ctrl.NewMetadataResource[*corev1.Endpoints](conn, "v1", m.log),
			ctrl.NewMetadataResource[*corev1.PodTemplate](conn, "v1", m.log),
			ctrl.NewMetadataResource[*corev1.ResourceQuota](conn, "v1", m.log),
			ctrl.NewMetadataResource[*corev1.LimitRange](conn, "v1", m.log),
			ctrl.NewMetadataResource[*corev1.PersistentVolume](conn, "v1", m.log),
			ctrl.NewMetadataResource[*corev1.Node](conn, "v1", m.log),
			ctrl.NewMetadataResource[*discoveryv1.EndpointSlice](conn, "discovery.k8s.io/v1", m.log),
			ctrl.NewMetadataResource[*coordv1.Lease](conn, "coordination.k8s.io/v1", m.log),
			ctrl.NewMetadataResource[*policyv1.PodDisruptionBudget](conn, "policy/v1", m.log),
			ctrl.NewMetadataResource[*networkingv1.Ingress](conn, "networking.k8s.io/v1", m.log),
			ctrl.NewMetadataResource[*networkingv1.NetworkPolicy](conn, "networking.k8s.io/v1", m.log),
			ctrl.NewMetadataResource[*rbacv1.Role](conn, "rbac.authorization.k8s.io/v1", m.log),
			ctrl.NewMetadataResource[*rbacv1.RoleBinding](conn, "rbac.authorization.k8s.io/v1", m.log),
			ctrl.NewMetadataResource[*rbacv1.ClusterRole](conn, "rbac.authorization.k8s.io/v1", m.log),
			ctrl.NewMetadataResource[*rbacv1.ClusterRoleBinding](conn, "rbac.authorization.k8s.io/v1", m.log),
		} {
			informer(r.Run)
			res = append(res, r)
		}
		c := garbagecollector.New(garbagecollector.Config{Resources: res, Recorder: rec, Logger: m.log, TracerProvider: m.cfg.TracerProvider,
			Custom: dynamicv1.NewResourceServiceClient(conn), CustomResync: m.cfg.GCCustomResync})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.GCWorkers) })
	}

	var svcInf *client.Informer[*corev1.Service]
	if on(Endpoints) || on(EndpointSlice) || on(EndpointSliceMirroring) {
		svcInf = newInformer(client.Must[*corev1.Service](conn), m.log)
		informer(svcInf.Run)
	}
	if on(Endpoints) {
		c := endpoints.New(endpoints.Config{Endpoints: client.Must[*corev1.Endpoints](conn), ServiceInformer: svcInf, PodInformer: podInf, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.EndpointsWorkers) })
	}
	esc := client.Must[*discoveryv1.EndpointSlice](conn)
	var sliceInf *client.Informer[*discoveryv1.EndpointSlice]
	if on(EndpointSlice) || on(EndpointSliceMirroring) {
		sliceInf = client.NewInformer(client.ListWatch(esc, "", "", "", 500), client.InformerOptions[*discoveryv1.EndpointSlice]{Logger: m.log})
		informer(sliceInf.Run)
	}
	if on(EndpointSliceMirroring) {
		epInf := client.NewInformer(client.ListWatch(client.Must[*corev1.Endpoints](conn), "", "", "", 500), client.InformerOptions[*corev1.Endpoints]{Logger: m.log})
		informer(epInf.Run)
		c := endpointslicemirroring.New(endpointslicemirroring.Config{Slices: esc, EndpointsInformer: epInf, ServiceInformer: svcInf,
			SliceInformer: sliceInf, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.EndpointSliceWorkers) })
	}
	if on(EndpointSlice) {
		nodeInf := client.NewInformer(client.ListWatch(client.Must[*corev1.Node](conn), "", "", "", 500), client.InformerOptions[*corev1.Node]{Logger: m.log})
		informer(nodeInf.Run)
		c := endpointslice.New(endpointslice.Config{Slices: esc, ServiceInformer: svcInf, PodInformer: podInf, NodeInformer: nodeInf,
			SliceInformer: sliceInf, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.EndpointSliceWorkers) })
	}
	nsc := client.Must[*corev1.Namespace](conn)
	var nsInf *client.Informer[*corev1.Namespace]
	if on(Namespace) || on(ServiceAccount) || on(RootCACertPublisher) {
		nsInf = client.NewInformer(client.ListWatch(nsc, "", "", "", 500), client.InformerOptions[*corev1.Namespace]{Logger: m.log})
		informer(nsInf.Run)
	}
	sas := client.Must[*corev1.ServiceAccount](conn)
	if on(ServiceAccount) {
		saInf := client.NewInformer(client.ListWatch(sas, "", "", "", 500), client.InformerOptions[*corev1.ServiceAccount]{Logger: m.log})
		informer(saInf.Run)
		c := serviceaccount.New(serviceaccount.Config{ServiceAccounts: sas, NamespaceInformer: nsInf, ServiceAccountInformer: saInf,
			Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.ServiceAccountWorkers) })
	}
	if on(RootCACertPublisher) && len(m.cfg.RootCA) == 0 {
		m.log.Info("root-ca-cert-publisher not started: no root CA")
	} else if on(RootCACertPublisher) {
		cmInf := client.NewInformer(client.ListWatch(client.Must[*corev1.ConfigMap](conn), "", "", rootcacertpublisher.FieldSelector, 500),
			client.InformerOptions[*corev1.ConfigMap]{Logger: m.log})
		informer(cmInf.Run)
		c := rootcacertpublisher.New(rootcacertpublisher.Config{ConfigMaps: client.Must[*corev1.ConfigMap](conn), NamespaceInformer: nsInf,
			ConfigMapInformer: cmInf, RootCA: m.cfg.RootCA, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.ServiceAccountWorkers) })
	}
	if on(Namespace) {
		c := namespace.New(namespace.Config{Namespaces: nsc, Informer: nsInf, Logger: m.log, TracerProvider: m.cfg.TracerProvider, Deleters: []namespace.Deleter{
			namespace.ClientDeleter[*appsv1.Deployment]{C: ds},
			namespace.ClientDeleter[*appsv1.ReplicaSet]{C: rss},
			namespace.ClientDeleter[*corev1.ReplicationController]{C: rcs},
			namespace.ClientDeleter[*appsv1.DaemonSet]{C: daemonSets},
			namespace.ClientDeleter[*appsv1.StatefulSet]{C: statefulSets},
			namespace.ClientDeleter[*appsv1.ControllerRevision]{C: revisions},
			namespace.ClientDeleter[*batchv1.CronJob]{C: cjs},
			namespace.ClientDeleter[*batchv1.Job]{C: jobs},
			namespace.ClientDeleter[*corev1.Pod]{C: pods},
			namespace.ClientDeleter[*corev1.PersistentVolumeClaim]{C: claims},
			namespace.ClientDeleter[*corev1.Service]{C: client.Must[*corev1.Service](conn)},
			namespace.ClientDeleter[*corev1.Endpoints]{C: client.Must[*corev1.Endpoints](conn)},
			namespace.ClientDeleter[*discoveryv1.EndpointSlice]{C: client.Must[*discoveryv1.EndpointSlice](conn)},
			namespace.ClientDeleter[*corev1.PodTemplate]{C: client.Must[*corev1.PodTemplate](conn)},
			namespace.ClientDeleter[*networkingv1.Ingress]{C: client.Must[*networkingv1.Ingress](conn)},
			namespace.ClientDeleter[*networkingv1.NetworkPolicy]{C: client.Must[*networkingv1.NetworkPolicy](conn)},
			namespace.ClientDeleter[*corev1.ConfigMap]{C: client.Must[*corev1.ConfigMap](conn)},
			namespace.ClientDeleter[*corev1.Secret]{C: client.Must[*corev1.Secret](conn)},
			namespace.ClientDeleter[*corev1.ServiceAccount]{C: sas},
			namespace.ClientDeleter[*policyv1.PodDisruptionBudget]{C: client.Must[*policyv1.PodDisruptionBudget](conn)},
			namespace.ClientDeleter[*corev1.Event]{C: client.Must[*corev1.Event](conn)},
			namespace.ClientDeleter[*coordv1.Lease]{C: client.Must[*coordv1.Lease](conn)},
			namespace.ClientDeleter[*rbacv1.RoleBinding]{C: client.Must[*rbacv1.RoleBinding](conn)},
			namespace.ClientDeleter[*rbacv1.Role]{C: client.Must[*rbacv1.Role](conn)},
			namespace.ClientDeleter[*corev1.LimitRange]{C: client.Must[*corev1.LimitRange](conn)},
			namespace.ClientDeleter[*corev1.ResourceQuota]{C: client.Must[*corev1.ResourceQuota](conn)},
		}, Custom: dynamicv1.NewResourceServiceClient(conn)})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.NamespaceWorkers) })
	}
	if on(Disruption) {
		pdbs := client.Must[*policyv1.PodDisruptionBudget](conn)
		pdbInf := client.NewInformer(client.ListWatch(pdbs, "", "", "", 500), client.InformerOptions[*policyv1.PodDisruptionBudget]{Logger: m.log})
		informer(pdbInf.Run)
		c := disruption.New(disruption.Config{PDBs: pdbs, Pods: pods, Scales: disruption.NewScaleClient(conn), PDBInformer: pdbInf, PodInformer: podInf,
			RSInformer: rsInf, DInformer: dInf, Recorder: rec, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.DisruptionWorkers) })
	}
	if on(PodGC) {
		nodes := client.Must[*corev1.Node](conn)
		nodeInf := client.NewInformer(client.ListWatch(nodes, "", "", "", 500), client.InformerOptions[*corev1.Node]{Logger: m.log})
		informer(nodeInf.Run)
		c := podgc.New(podgc.Config{Pods: pods, Nodes: nodes, PodInformer: podInf, NodeInformer: nodeInf,
			TerminatedPodThreshold: m.cfg.TerminatedPodGCThreshold, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, c.Run)
	}
	if on(ResourceQuota) {
		runs = append(runs, m.resourceQuotaController(conn, podInf, rsInf, dInf, rcInf, informer))
	}
	if on(NodeLifecycle) {
		nodes := client.Must[*corev1.Node](conn)
		nodeInf := client.NewInformer(client.ListWatch(nodes, "", "", "", 500), client.InformerOptions[*corev1.Node]{Logger: m.log})
		leaseInf := client.NewInformer(client.ListWatch(client.Must[*coordv1.Lease](conn), nodelifecycle.LeaseNamespace, "", "", 500), client.InformerOptions[*coordv1.Lease]{Logger: m.log})
		informer(nodeInf.Run)
		informer(leaseInf.Run)
		c := nodelifecycle.New(nodelifecycle.Config{Nodes: nodes, Pods: pods, NodeInformer: nodeInf, LeaseInformer: leaseInf, PodInformer: podInf, Recorder: rec,
			GracePeriod: m.cfg.NodeMonitorGracePeriod, DefaultTolerationSeconds: int64(m.cfg.PodEvictionTimeout / time.Second), Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.NodeWorkers) })
	}

	if on(CRD) {
		crds := client.Must[*apiextensionsv1.CustomResourceDefinition](conn)
		crdInf := client.NewInformer(client.ListWatch(crds, "", "", "", 500), client.InformerOptions[*apiextensionsv1.CustomResourceDefinition]{Logger: m.log})
		informer(crdInf.Run)
		c := crd.New(crd.Config{CRDs: crds, Resources: dynamicv1.NewResourceServiceClient(conn), Informer: crdInf, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.CRDWorkers) })
	}

	if on(HorizontalPodAutoscaling) {
		hpas := client.Must[*autoscalingv2.HorizontalPodAutoscaler](conn)
		hpaInf := client.NewInformer(client.ListWatch(hpas, "", "", "", 500), client.InformerOptions[*autoscalingv2.HorizontalPodAutoscaler]{Logger: m.log})
		informer(hpaInf.Run)
		hpaRec := client.NewRecorder(client.RecorderConfig{Sink: client.Must[*corev1.Event](conn), Component: "horizontal-pod-autoscaler", Logger: m.log})
		extra = append(extra, hpaRec.Run)
		c := hpa.New(hpa.Config{HPAs: hpas, Scales: hpa.NewScaleClient(conn), Metrics: hpa.NewMetricsClient(conn), HPAInformer: hpaInf, PodInformer: podInf,
			Recorder: hpaRec, SyncPeriod: m.cfg.HPASyncPeriod, DownscaleStabilization: m.cfg.HPADownscaleStabilization, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
		runs = append(runs, func(ctx context.Context) { c.Run(ctx, m.cfg.HPAWorkers) })
	}

	var wg sync.WaitGroup
	start := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	start(rec.Run)
	start(func(ctx context.Context) { _ = podInf.Run(ctx) })
	start(func(ctx context.Context) { _ = rsInf.Run(ctx) })
	start(func(ctx context.Context) { _ = dInf.Run(ctx) })
	for _, r := range extra {
		start(r)
	}
	for _, r := range runs {
		start(r)
	}
	wg.Wait()
}
