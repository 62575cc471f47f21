// Package hpa is the HorizontalPodAutoscaler controller, as Kubernetes'
// horizontal-pod-autoscaler controller is for resource metrics: every
// autoscaler is reconciled once each sync period (15 s by default; a new
// or changed one a period later); it reads its target's scale subresource (any kind
// served with one: Deployments, ReplicaSets, StatefulSets,
// ReplicationControllers, custom resources), computes the replicas its
// Resource and ContainerResource metrics (Utilization or AverageValue, from
// metrics.k8s.io) ask for with Kubernetes' replica calculation, bounds
// them with the stabilization windows and the behavior's policies (or the
// built-in rules without a behavior), writes the new scale and the status
// with Kubernetes' conditions (AbleToScale, ScalingActive, ScalingLimited)
// and reasons, and records Kubernetes' events (SuccessfulRescale,
// FailedGetResourceMetric, FailedGetScale, ...).
//
// Pods, Object and External metrics need a custom or external metrics API,
// which kplane does not serve: such a metric is invalid
// (FailedGetPodsMetric, FailedGetObjectMetric, FailedGetExternalMetric), as
// on a Kubernetes cluster without the adapter.
package hpa

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/runtime/schema"

	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// HPAClient writes an autoscaler's status (*client.Client[*autoscalingv2.HorizontalPodAutoscaler]).
type HPAClient interface {
	UpdateStatus(ctx context.Context, obj *autoscalingv2.HorizontalPodAutoscaler) (*autoscalingv2.HorizontalPodAutoscaler, error)
}

// Scales reads and writes the scale subresource of any kind that has one.
type Scales interface {
	GetScale(ctx context.Context, apiVersion, kind, namespace, name string) (*autoscalingv1.Scale, error)
	UpdateScale(ctx context.Context, apiVersion, kind, namespace string, sc *autoscalingv1.Scale) (*autoscalingv1.Scale, error)
}

// Config wires a Controller; New adds handlers to the informer.
type Config struct {
	HPAs        HPAClient
	Scales      Scales
	Metrics     ResourceMetrics
	HPAInformer *client.Informer[*autoscalingv2.HorizontalPodAutoscaler]
	PodInformer *client.Informer[*corev1.Pod]
	Recorder    *client.Recorder
	// SyncPeriod is how often each autoscaler is reconciled (default 15 s,
	// Kubernetes' --horizontal-pod-autoscaler-sync-period).
	SyncPeriod time.Duration
	// DownscaleStabilization is the scale-down window of an autoscaler
	// without its own (default 5 minutes,
	// --horizontal-pod-autoscaler-downscale-stabilization).
	DownscaleStabilization time.Duration
	// Tolerance is the usage ratio change that does not scale (default
	// 0.1, --horizontal-pod-autoscaler-tolerance).
	Tolerance float64
	// CPUInitializationPeriod (default 5 minutes) and
	// InitialReadinessDelay (default 30 s) decide which pods' CPU samples
	// count, as Kubernetes' flags of the same names.
	CPUInitializationPeriod, InitialReadinessDelay time.Duration
	Logger                                         *slog.Logger
	// TracerProvider records a span per reconcile; nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the HorizontalPodAutoscaler controller. Its queue holds
// namespace/name keys.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue

	// The recommendations and scale events of each autoscaler, by key,
	// as Kubernetes keeps them in memory: a new leader starts afresh.
	mu              sync.Mutex
	recommendations map[string][]recommendation
	scaleUpEvents   map[string][]scaleEvent
	scaleDownEvents map[string][]scaleEvent
}

type recommendation struct {
	replicas int32
	at       time.Time
}

type scaleEvent struct {
	change   int32
	at       time.Time
	outdated bool
}

// New returns a controller and registers its handlers.
func New(cfg Config) *Controller {
	if cfg.SyncPeriod <= 0 {
		cfg.SyncPeriod = 15 * time.Second
	}
	if cfg.DownscaleStabilization <= 0 {
		cfg.DownscaleStabilization = 5 * time.Minute
	}
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = 0.1
	}
	if cfg.CPUInitializationPeriod <= 0 {
		cfg.CPUInitializationPeriod = 5 * time.Minute
	}
	if cfg.InitialReadinessDelay <= 0 {
		cfg.InitialReadinessDelay = 30 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "horizontal-pod-autoscaler"), queue: client.NewQueue("horizontalpodautoscaler", 0, 0),
		recommendations: map[string][]recommendation{}, scaleUpEvents: map[string][]scaleEvent{}, scaleDownEvents: map[string][]scaleEvent{}}
	// As Kubernetes' controller: an autoscaler added or changed (its own
	// status writes included) is reconciled one sync period later, not at
	// once, so each is reconciled about once a period; a deleted one at
	// once, to forget it.
	cfg.HPAInformer.AddEventHandler(client.Handler[*autoscalingv2.HorizontalPodAutoscaler]{
		OnAdd:    func(h *autoscalingv2.HorizontalPodAutoscaler) { c.queue.AddAfter(key(h), c.cfg.SyncPeriod) },
		OnUpdate: func(_, h *autoscalingv2.HorizontalPodAutoscaler) { c.queue.AddAfter(key(h), c.cfg.SyncPeriod) },
		OnDelete: func(h *autoscalingv2.HorizontalPodAutoscaler) { c.queue.Add(key(h)) },
	})
	return c
}

func key(h *autoscalingv2.HorizontalPodAutoscaler) string {
	return h.GetMetadata().GetNamespace() + "/" + h.GetMetadata().GetName()
}

// Run waits for the caches, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.HPAInformer, c.cfg.PodInformer) {
		return
	}
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "horizontalpodautoscaler.reconcile",
		Annotations: client.StoreAnnotations(c.cfg.HPAInformer.Store())}
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
}

// Reconcile reconciles the autoscaler k (namespace/name) and asks for its
// next sync a sync period later, whether or not this one failed; a deleted
// autoscaler's memory is dropped.
func (c *Controller) Reconcile(ctx context.Context, k string) (client.Result, error) {
	shared, ok := c.cfg.HPAInformer.Store().Get(k)
	if !ok {
		c.mu.Lock()
		delete(c.recommendations, k)
		delete(c.scaleUpEvents, k)
		delete(c.scaleDownEvents, k)
		c.mu.Unlock()
		return client.Result{}, nil
	}
	err := c.reconcile(ctx, proto.Clone(shared).(*autoscalingv2.HorizontalPodAutoscaler), k)
	return client.Result{RequeueAfter: c.cfg.SyncPeriod}, err
}

func (c *Controller) reconcile(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, k string) error {
	if hpa.Spec == nil {
		hpa.Spec = &autoscalingv2.HorizontalPodAutoscalerSpec{}
	}
	if hpa.Status == nil {
		hpa.Status = &autoscalingv2.HorizontalPodAutoscalerStatus{}
	}
	original := proto.Clone(hpa.Status).(*autoscalingv2.HorizontalPodAutoscalerStatus)
	ref := hpa.Spec.GetScaleTargetRef()
	reference := fmt.Sprintf("%s/%s/%s", ref.GetKind(), hpa.GetMetadata().GetNamespace(), ref.GetName())
	failScale := func(err error) error {
		c.cfg.Recorder.Eventf(hpa, "Warning", "FailedGetScale", "%s", err.Error())
		setCondition(hpa, "AbleToScale", "False", "FailedGetScale", "the HPA controller was unable to get the target's current scale: %v", err)
		c.updateStatusIfNeeded(ctx, original, hpa)
		return fmt.Errorf("hpa %s: scale of %s: %w", k, reference, err)
	}
	if _, err := schema.ParseGroupVersion(ref.GetApiVersion()); err != nil {
		return failScale(err)
	}
	scale, err := c.cfg.Scales.GetScale(ctx, ref.GetApiVersion(), ref.GetKind(), hpa.GetMetadata().GetNamespace(), ref.GetName())
	if err != nil {
		return failScale(err)
	}
	setCondition(hpa, "AbleToScale", "True", "SucceededGetScale", "the HPA controller was able to get the target's current scale")
	current := scale.GetSpec().GetReplicas()
	c.recordInitialRecommendation(current, k)

	var statuses []*autoscalingv2.MetricStatus
	var retErr error
	desired, reason := int32(0), ""
	minReplicas := int32(1)
	if hpa.Spec.MinReplicas != nil {
		minReplicas = hpa.Spec.GetMinReplicas()
	}
	rescale := true
	switch {
	case current == 0 && minReplicas != 0:
		rescale = false
		setCondition(hpa, "ScalingActive", "False", "ScalingDisabled", "scaling is disabled since the replica count of the target is zero")
	case current > hpa.Spec.GetMaxReplicas():
		reason, desired = "Current number of replicas above Spec.MaxReplicas", hpa.Spec.GetMaxReplicas()
	case current < minReplicas:
		reason, desired = "Current number of replicas below Spec.MinReplicas", minReplicas
	default:
		proposed, metric, sts, err := c.computeReplicasForMetrics(ctx, hpa, scale)
		statuses = sts
		if err != nil && proposed == -1 {
			c.setStatus(hpa, current, hpa.Status.GetDesiredReplicas(), statuses, false)
			c.updateStatusIfNeeded(ctx, original, hpa)
			c.cfg.Recorder.Eventf(hpa, "Warning", "FailedComputeMetricsReplicas", "%s", err.Error())
			return fmt.Errorf("hpa %s: failed to compute desired number of replicas based on listed metrics for %s: %w", k, reference, err)
		}
		retErr = err
		rescaleMetric := ""
		if proposed > desired {
			desired, rescaleMetric = proposed, metric
		}
		if desired > current {
			reason = rescaleMetric + " above target"
		}
		if desired < current {
			reason = "All metrics below target"
		}
		if hpa.Spec.Behavior == nil {
			desired = c.normalize(hpa, k, current, desired, minReplicas)
		} else {
			desired = c.normalizeWithBehaviors(hpa, k, current, desired, minReplicas)
		}
		rescale = desired != current
	}
	if rescale {
		sc := proto.Clone(scale).(*autoscalingv1.Scale)
		sc.Spec.Replicas = desired
		if _, err := c.cfg.Scales.UpdateScale(ctx, ref.GetApiVersion(), ref.GetKind(), hpa.GetMetadata().GetNamespace(), sc); err != nil {
			c.cfg.Recorder.Eventf(hpa, "Warning", "FailedRescale", "New size: %d; reason: %s; error: %v", desired, reason, err.Error())
			setCondition(hpa, "AbleToScale", "False", "FailedUpdateScale", "the HPA controller was unable to update the target scale: %v", err)
			c.setStatus(hpa, current, hpa.Status.GetDesiredReplicas(), statuses, false)
			c.updateStatusIfNeeded(ctx, original, hpa)
			return fmt.Errorf("hpa %s: failed to rescale %s: %w", k, reference, err)
		}
		setCondition(hpa, "AbleToScale", "True", "SucceededRescale", "the HPA controller was able to update the target scale to %d", desired)
		c.cfg.Recorder.Eventf(hpa, "Normal", "SuccessfulRescale", "New size: %d; reason: %s", desired, reason)
		c.storeScaleEvent(hpa.Spec.Behavior, k, current, desired)
		c.log.InfoContext(ctx, "rescaled", "hpa", k, "currentReplicas", current, "desiredReplicas", desired, "reason", reason)
	} else {
		desired = current
	}
	c.setStatus(hpa, current, desired, statuses, rescale)
	if err := c.updateStatusIfNeeded(ctx, original, hpa); err != nil {
		return err
	}
	return retErr
}

// setStatus writes the replica counts and metrics, keeping the conditions;
// a rescale stamps lastScaleTime.
func (c *Controller) setStatus(hpa *autoscalingv2.HorizontalPodAutoscaler, current, desired int32, statuses []*autoscalingv2.MetricStatus, rescale bool) {
	st := &autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: current, DesiredReplicas: desired,
		LastScaleTime: hpa.Status.GetLastScaleTime(), CurrentMetrics: statuses, Conditions: hpa.Status.GetConditions()}
	if rescale {
		st.LastScaleTime = timestamppb.New(time.Now().Truncate(time.Second))
	}
	hpa.Status = st
}

// updateStatusIfNeeded writes hpa's status if it differs from original; a
// failure is recorded as Kubernetes' FailedUpdateStatus event and returned.
func (c *Controller) updateStatusIfNeeded(ctx context.Context, original *autoscalingv2.HorizontalPodAutoscalerStatus, hpa *autoscalingv2.HorizontalPodAutoscaler) error {
	if proto.Equal(original, hpa.Status) {
		return nil
	}
	if _, err := c.cfg.HPAs.UpdateStatus(ctx, hpa); err != nil {
		c.cfg.Recorder.Eventf(hpa, "Warning", "FailedUpdateStatus", "%s", err.Error())
		return fmt.Errorf("failed to update status for %s: %w", hpa.GetMetadata().GetName(), err)
	}
	return nil
}

// setCondition sets condition typ, stamping its transition time when the
// status changes.
func setCondition(hpa *autoscalingv2.HorizontalPodAutoscaler, typ, status, reason, format string, args ...any) {
	var cond *autoscalingv2.HorizontalPodAutoscalerCondition
	for _, x := range hpa.Status.Conditions {
		if x.GetType() == typ {
			cond = x
			break
		}
	}
	if cond == nil {
		cond = &autoscalingv2.HorizontalPodAutoscalerCondition{Type: typ}
		hpa.Status.Conditions = append(hpa.Status.Conditions, cond)
	}
	if cond.Status != status {
		cond.LastTransitionTime = timestamppb.New(time.Now().Truncate(time.Second))
	}
	cond.Status, cond.Reason, cond.Message = status, reason, fmt.Sprintf(format, args...)
}

// unableCondition is ScalingActive False with reason, recorded as a
// Warning event, as Kubernetes' getUnableComputeReplicaCountCondition.
func (c *Controller) unableCondition(hpa *autoscalingv2.HorizontalPodAutoscaler, reason string, err error) *autoscalingv2.HorizontalPodAutoscalerCondition {
	c.cfg.Recorder.Eventf(hpa, "Warning", reason, "%s", err.Error())
	return &autoscalingv2.HorizontalPodAutoscalerCondition{Type: "ScalingActive", Status: "False", Reason: reason,
		Message: fmt.Sprintf("the HPA was unable to compute the replica count: %v", err)}
}

// lower is s with a lower-case first letter ("Pods" → "pods").
func lower(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}
