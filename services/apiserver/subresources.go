// This file holds the scale and binding subresources on the request path:
// get and update of a workload's scale, and a pod's binding to a node.

package apiserver

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

func (s *Server) getScale(ctx context.Context, r *resourceInfo, ns, name string) (_ *autoscalingv1.Scale, err error) {
	c := s.begin(ctx, "get", r, "scale", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	obj, err := s.store.get(ctx, r, ns, name)
	if err != nil {
		return nil, err
	}
	return scaleOf(ctx, r, obj)
}

// scaleOf renders the scale subresource of a workload or a custom object.
func scaleOf(ctx context.Context, r *resourceInfo, obj proto.Message) (*autoscalingv1.Scale, error) {
	m := meta(obj)
	sc := &autoscalingv1.Scale{
		ApiVersion: "autoscaling/v1", Kind: "Scale",
		Metadata: &metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), Uid: m.GetUid(),
			ResourceVersion: m.GetResourceVersion(), CreationTimestamp: m.GetCreationTimestamp()},
		Spec: &autoscalingv1.ScaleSpec{}, Status: &autoscalingv1.ScaleStatus{},
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		sc.Spec.Replicas = o.GetSpec().GetReplicas()
		sc.Status.Replicas = o.GetStatus().GetReplicas()
		sc.Status.Selector = labelSelectorString(o.GetSpec().GetSelector())
	case *appsv1.ReplicaSet:
		sc.Spec.Replicas = o.GetSpec().GetReplicas()
		sc.Status.Replicas = o.GetStatus().GetReplicas()
		sc.Status.Selector = labelSelectorString(o.GetSpec().GetSelector())
	case *corev1.ReplicationController:
		sc.Spec.Replicas = o.GetSpec().GetReplicas()
		sc.Status.Replicas = o.GetStatus().GetReplicas()
		sc.Status.Selector = labels.SelectorFromSet(o.GetSpec().GetSelector()).String()
	case *appsv1.StatefulSet:
		sc.Spec.Replicas = o.GetSpec().GetReplicas()
		sc.Status.Replicas = o.GetStatus().GetReplicas()
		sc.Status.Selector = labelSelectorString(o.GetSpec().GetSelector())
	case *dynamicv1.Object:
		if err := customScale(ctx, r, o, sc); err != nil {
			return nil, err
		}
	}
	return sc, nil
}

func (s *Server) updateScale(ctx context.Context, r *resourceInfo, ns, name string, sc *autoscalingv1.Scale, wo writeOptions) (_ *autoscalingv1.Scale, err error) {
	c := s.begin(ctx, "update", r, "scale", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	if sc == nil {
		return nil, apierrors.NewBadRequest("the request has no Scale")
	}
	dry, err := wo.dryRun()
	if err != nil {
		return nil, err
	}
	if n := sc.GetMetadata().GetName(); n != "" && n != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", n, name))
	}
	if sc.GetSpec().GetReplicas() < 0 {
		return nil, apierrors.NewInvalid("autoscaling", "Scale", name, []apierrors.Cause{{Type: "FieldValueInvalid", Field: "spec.replicas", Message: fmt.Sprintf("Invalid value: %d: must be greater than or equal to 0", sc.GetSpec().GetReplicas())}})
	}
	replicas := sc.GetSpec().GetReplicas()
	out, err := s.guaranteedUpdate(ctx, c, r, ns, name, sc.GetMetadata().GetResourceVersion(), dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		n := proto.Clone(old)
		switch o := n.(type) {
		case *appsv1.Deployment:
			o.Spec.Replicas = proto.Int32(replicas)
		case *appsv1.ReplicaSet:
			o.Spec.Replicas = proto.Int32(replicas)
		case *corev1.ReplicationController:
			o.Spec.Replicas = proto.Int32(replicas)
		case *appsv1.StatefulSet:
			o.Spec.Replicas = proto.Int32(replicas)
		case *dynamicv1.Object:
			if err := setCustomReplicas(ctx, r, o, replicas); err != nil {
				return nil, nil, err
			}
		}
		if !specEqual(n, old) {
			meta(n).Generation++
		}
		return n, s.admission(c, request.Update, n, old, dry), nil
	})
	if err != nil {
		return nil, err
	}
	return scaleOf(ctx, r, out)
}

func (s *Server) bind(ctx context.Context, r *resourceInfo, ns, name string, b *corev1.Binding, wo writeOptions) (_ *metav1.Status, err error) {
	c := s.begin(ctx, "create", r, "binding", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	if b == nil {
		return nil, apierrors.NewBadRequest("the request has no Binding")
	}
	dry, err := wo.dryRun()
	if err != nil {
		return nil, err
	}
	if n := b.GetMetadata().GetName(); n != "" && n != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", n, name))
	}
	node := b.GetTarget().GetName()
	if k := b.GetTarget().GetKind(); k != "" && k != "Node" {
		return nil, apierrors.NewInvalid("", "Binding", name, []apierrors.Cause{{Type: "FieldValueNotSupported", Field: "target.kind", Message: fmt.Sprintf("Unsupported value: %q: supported values: \"Node\"", k)}})
	}
	if node == "" {
		return nil, apierrors.NewInvalid("", "Binding", name, []apierrors.Cause{{Type: "FieldValueRequired", Field: "target.name", Message: "Required value"}})
	}
	_, err = s.guaranteedUpdate(ctx, c, r, ns, name, "", dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		pod := proto.Clone(old).(*corev1.Pod)
		if n := pod.GetSpec().GetNodeName(); n != "" {
			return nil, nil, apierrors.NewConflict("", "pods/binding", name, fmt.Sprintf("pod %s is already assigned to node %q", name, n))
		}
		if pod.GetMetadata().GetDeletionTimestamp() != nil {
			return nil, nil, apierrors.NewConflict("", "pods/binding", name, fmt.Sprintf("pod %s is being deleted, cannot be assigned to a host", name))
		}
		if uid := b.GetMetadata().GetUid(); uid != "" && uid != pod.GetMetadata().GetUid() {
			return nil, nil, apierrors.NewConflict("", "pods/binding", name, "Precondition failed: UID in precondition: "+uid+", UID in object meta: "+pod.GetMetadata().GetUid())
		}
		if pod.Spec == nil {
			pod.Spec = &corev1.PodSpec{}
		}
		pod.Spec.NodeName = node
		if pod.Status == nil {
			pod.Status = &corev1.PodStatus{}
		}
		setPodCondition(pod.Status, &corev1.PodCondition{Type: "PodScheduled", Status: "True", LastTransitionTime: now()})
		adm := s.admission(c, request.Create, b, old, dry)
		return pod, adm, nil
	})
	if err != nil {
		return nil, err
	}
	return &metav1.Status{ApiVersion: "v1", Kind: "Status", Status: "Success", Code: 201}, nil
}

func setPodCondition(st *corev1.PodStatus, c *corev1.PodCondition) {
	for i, existing := range st.Conditions {
		if existing.GetType() == c.GetType() {
			if existing.GetStatus() == c.GetStatus() {
				c.LastTransitionTime = existing.GetLastTransitionTime()
			}
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}
