// Package replicationcontroller is the ReplicationController controller:
// the ReplicaSet controller's logic (services/controllers/replicaset) run
// over core/v1 ReplicationControllers, each seen as the ReplicaSet it
// converts to (its equality selector as matchLabels), its status written
// back through replicationcontrollers/status, as Kubernetes runs it.
package replicationcontroller

import (
	"context"
	"log/slog"
	"maps"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/replicaset"
)

// Client is what the controller writes status with
// (*client.Client[*corev1.ReplicationController]).
type Client interface {
	UpdateStatus(ctx context.Context, obj *corev1.ReplicationController) (*corev1.ReplicationController, error)
}

// Config wires a Controller. The informers are shared with other
// controllers; New adds its handlers, the caller runs them.
type Config struct {
	Pods                   replicaset.PodClient
	ReplicationControllers Client
	PodInformer            *client.Informer[*corev1.Pod]
	RCInformer             *client.Informer[*corev1.ReplicationController]
	Recorder               *client.Recorder // nil records nothing
	// BurstReplicas caps the creations or deletions of one sync (default 500).
	BurstReplicas  int
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider // nil uses the global one
}

// Controller is the ReplicationController controller.
type Controller = replicaset.KindController[*corev1.ReplicationController]

// New returns a controller and registers its informer handlers.
func New(cfg Config) *Controller {
	return replicaset.NewForKind(replicaset.KindConfig[*corev1.ReplicationController]{
		Kind: Kind(cfg.ReplicationControllers), Pods: cfg.Pods, PodInformer: cfg.PodInformer, Informer: cfg.RCInformer,
		Recorder: cfg.Recorder, BurstReplicas: cfg.BurstReplicas, Logger: cfg.Logger, TracerProvider: cfg.TracerProvider,
	})
}

// Kind is the replicaset.Kind of ReplicationControllers, written with c.
func Kind(c Client) replicaset.Kind[*corev1.ReplicationController] {
	return replicaset.Kind[*corev1.ReplicationController]{
		Name: "replicationcontroller", APIVersion: "v1", Kind: "ReplicationController",
		ToReplicaSet: ToReplicaSet,
		Selector: func(rc *corev1.ReplicationController) (labels.Selector, error) {
			return labels.SelectorFromSet(rc.GetSpec().GetSelector()), nil
		},
		UpdateStatus: func(ctx context.Context, rc *corev1.ReplicationController, st *appsv1.ReplicaSetStatus) error {
			out := proto.Clone(rc).(*corev1.ReplicationController)
			out.Status = fromReplicaSetStatus(st)
			_, err := c.UpdateStatus(ctx, out)
			return err
		},
	}
}

// ToReplicaSet is rc as the ReplicaSet the controller reasons about: the
// same metadata, replicas, minReadySeconds and template, the selector as
// matchLabels, and the status.
func ToReplicaSet(rc *corev1.ReplicationController) *appsv1.ReplicaSet {
	s := rc.GetSpec()
	rs := &appsv1.ReplicaSet{
		ApiVersion: "apps/v1", Kind: "ReplicaSet",
		Metadata: proto.Clone(rc.GetMetadata()).(*metav1.ObjectMeta),
		Spec: &appsv1.ReplicaSetSpec{
			MinReadySeconds: s.GetMinReadySeconds(),
			Selector:        &metav1.LabelSelector{MatchLabels: maps.Clone(s.GetSelector())},
		},
		Status: toReplicaSetStatus(rc.GetStatus()),
	}
	if s.Replicas != nil {
		rs.Spec.Replicas = proto.Int32(*s.Replicas)
	}
	if t := s.GetTemplate(); t != nil {
		rs.Spec.Template = proto.Clone(t).(*corev1.PodTemplateSpec)
	}
	return rs
}

func toReplicaSetStatus(st *corev1.ReplicationControllerStatus) *appsv1.ReplicaSetStatus {
	if st == nil {
		return nil
	}
	out := &appsv1.ReplicaSetStatus{Replicas: st.GetReplicas(), FullyLabeledReplicas: st.GetFullyLabeledReplicas(),
		ReadyReplicas: st.GetReadyReplicas(), AvailableReplicas: st.GetAvailableReplicas(), ObservedGeneration: st.GetObservedGeneration()}
	for _, c := range st.GetConditions() {
		out.Conditions = append(out.Conditions, &appsv1.ReplicaSetCondition{Type: c.GetType(), Status: c.GetStatus(),
			LastTransitionTime: c.GetLastTransitionTime(), Reason: c.GetReason(), Message: c.GetMessage()})
	}
	return out
}

func fromReplicaSetStatus(st *appsv1.ReplicaSetStatus) *corev1.ReplicationControllerStatus {
	out := &corev1.ReplicationControllerStatus{Replicas: st.GetReplicas(), FullyLabeledReplicas: st.GetFullyLabeledReplicas(),
		ReadyReplicas: st.GetReadyReplicas(), AvailableReplicas: st.GetAvailableReplicas(), ObservedGeneration: st.GetObservedGeneration()}
	for _, c := range st.GetConditions() {
		out.Conditions = append(out.Conditions, &corev1.ReplicationControllerCondition{Type: c.GetType(), Status: c.GetStatus(),
			LastTransitionTime: c.GetLastTransitionTime(), Reason: c.GetReason(), Message: c.GetMessage()})
	}
	return out
}
