// This file holds delete on the request path: delete options, graceful
// deletion, finalizers, and the removal of the object from the store.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

func (s *Server) delete(ctx context.Context, r *resourceInfo, ns, name string, o deleteOptions) (_ proto.Message, err error) {
	c := s.begin(ctx, "delete", r, "", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	dry, err := parseDryRun(o.DryRun)
	if err != nil {
		return nil, err
	}
	if err := checkDeleteOptions(o); err != nil {
		return nil, err
	}
	if o.PropagationPolicy == "" && ((r.Group == "batch" && r.Resource == "jobs") || (r.Group == "" && r.Resource == "replicationcontrollers")) {
		// As Kubernetes keeps for compatibility: deleting a batch/v1 Job
		// or a v1 ReplicationController without a policy orphans its pods
		// (kubectl sends Background).
		o.PropagationPolicy = "Orphan"
	}
	return s.deleteObject(ctx, c, r, ns, name, o, dry, true)
}

// checkDeleteOptions refuses a negative grace period and an unknown
// propagation policy, as Kubernetes' DeleteOptions validation does.
func checkDeleteOptions(o deleteOptions) error {
	if g := o.GracePeriodSeconds; g != nil && *g < 0 {
		return apierrors.NewInvalid("", "DeleteOptions", "", []apierrors.Cause{{Type: "FieldValueInvalid", Field: "gracePeriodSeconds", Message: fmt.Sprintf("Invalid value: %d: must be greater than or equal to 0", *g)}})
	}
	switch o.PropagationPolicy {
	case "", "Orphan", "Background", "Foreground":
	default:
		return apierrors.NewInvalid("", "DeleteOptions", "", []apierrors.Cause{{Type: "FieldValueNotSupported", Field: "propagationPolicy", Message: fmt.Sprintf("Unsupported value: %q: supported values: \"Foreground\", \"Background\", \"Orphan\"", o.PropagationPolicy)}})
	}
	return nil
}

// deleteObject is delete once the request is authorized and its options
// checked: the preconditions, admission (when admit; an eviction's delete
// runs none of its own, as in Kubernetes, where admission sees the
// Eviction), then the delete or the marking of the object.
func (s *Server) deleteObject(ctx context.Context, c *call, r *resourceInfo, ns, name string, o deleteOptions, dry, admit bool) (proto.Message, error) {
	for attempt := 0; ; attempt++ {
		old, err := s.store.get(ctx, r, ns, name)
		if err != nil {
			return nil, err
		}
		om := meta(old)
		if p := o.Preconditions; p != nil {
			if p.Uid != nil && p.GetUid() != om.GetUid() {
				return nil, apierrors.NewConflict(r.Group, r.Resource, name, fmt.Sprintf("Precondition failed: UID in precondition: %s, UID in object meta: %s", p.GetUid(), om.GetUid()))
			}
			if p.ResourceVersion != nil && p.GetResourceVersion() != om.GetResourceVersion() {
				return nil, apierrors.NewConflict(r.Group, r.Resource, name, fmt.Sprintf("Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", p.GetResourceVersion(), om.GetResourceVersion()))
			}
		}
		if ns, ok := old.(*corev1.Namespace); ok && om.GetDeletionTimestamp() != nil && len(ns.GetSpec().GetFinalizers()) > 0 {
			return nil, apierrors.NewConflict(r.Group, r.Resource, name, "The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system.")
		}
		if admit {
			adm := s.admission(c, request.Delete, nil, old, dry)
			if err := s.mutate(ctx, c, adm); err != nil {
				return nil, err
			}
			if err := s.admitValidating(ctx, c, adm); err != nil {
				return nil, err
			}
		}
		n, pending := deletionState(r, old, o)
		rev, _ := parseRV(om.GetResourceVersion())
		if dry {
			return n, nil
		}
		if pending && !proto.Equal(n, old) {
			// Marking the object is a change: the controllers that carry
			// out the deletion (namespace, garbage collector, node agent)
			// continue this request's trace.
			setTraceAnnotation(ctx, meta(n))
		}
		var newRev int64
		err = s.storeStage(ctx, c, func(ctx context.Context) (err error) {
			switch {
			case pending && proto.Equal(n, old):
				newRev = rev // already marked; nothing to write
			case pending:
				newRev, err = s.store.update(ctx, r, ns, name, rev, n)
			default:
				newRev, err = s.storeRemove(ctx, r, ns, name, rev, old)
			}
			return err
		})
		var ce *casError
		if errors.As(err, &ce) {
			if ce.cur == nil {
				return nil, apierrors.NewNotFound(r.Group, r.Resource, name)
			}
			if attempt >= maxGuaranteedAttempts {
				return nil, apierrors.NewConflict(r.Group, r.Resource, name, apierrors.ConflictModified)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if pending {
			meta(n).ResourceVersion = formatRV(newRev)
		}
		return n, nil
	}
}

// deletionState decides what a delete does to old: pending (the object
// stays, marked with deletionTimestamp, because of finalizers or a pod's
// grace period) with the marked object, or gone (returns old).
func deletionState(r *resourceInfo, old proto.Message, o deleteOptions) (proto.Message, bool) {
	n := proto.Clone(old)
	m := meta(n)
	grace := int64(0)
	if r.Graceful {
		pod := old.(*corev1.Pod)
		grace = pod.GetSpec().GetTerminationGracePeriodSeconds()
		if o.GracePeriodSeconds != nil {
			grace = *o.GracePeriodSeconds
		}
		// Never scheduled or already finished: nothing to wait for.
		if pod.GetSpec().GetNodeName() == "" || pod.GetStatus().GetPhase() == "Succeeded" || pod.GetStatus().GetPhase() == "Failed" {
			grace = 0
		}
		// A second delete may shorten the grace period, never lengthen it.
		if m.DeletionGracePeriodSeconds != nil && *m.DeletionGracePeriodSeconds < grace {
			grace = *m.DeletionGracePeriodSeconds
		}
	}
	switch o.PropagationPolicy {
	case "Orphan":
		addFinalizer(m, "orphan")
	case "Foreground":
		addFinalizer(m, "foregroundDeletion")
	}
	if crd, ok := n.(*apiextensionsv1.CustomResourceDefinition); ok {
		markCRDTerminating(crd)
	}
	if grace == 0 && !heldByFinalizers(n) {
		return old, false
	}
	if m.DeletionTimestamp == nil || (m.DeletionGracePeriodSeconds != nil && grace < *m.DeletionGracePeriodSeconds) {
		m.DeletionTimestamp = timestamppb.New(time.Now().Add(time.Duration(grace) * time.Second).Truncate(time.Second))
		m.DeletionGracePeriodSeconds = proto.Int64(grace)
	}
	if ns, ok := n.(*corev1.Namespace); ok {
		if ns.Status == nil {
			ns.Status = &corev1.NamespaceStatus{}
		}
		ns.Status.Phase = "Terminating"
	}
	return n, true
}

func addFinalizer(m *metav1.ObjectMeta, f string) {
	for _, x := range m.Finalizers {
		if x == f {
			return
		}
	}
	m.Finalizers = append(m.Finalizers, f)
}
