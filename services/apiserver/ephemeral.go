// This file holds a pod's ephemeralcontainers subresource, as Kubernetes
// serves it: a write that changes only spec.ephemeralContainers (what
// `kubectl debug` patches), where containers may be added but never changed
// or removed, and the validation of ephemeral containers themselves.
package apiserver

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/request"
)

// mirrorPodAnnotation marks a static pod's mirror, which takes no
// ephemeral containers.
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// updateEphemeralContainers serves pods/ephemeralcontainers: the stored
// pod with the request's spec.ephemeralContainers, everything else kept
// (Kubernetes' ephemeral containers strategy), generation bumped when they
// changed.
func (s *Server) updateEphemeralContainers(ctx context.Context, r *resourceInfo, ns, name string, obj proto.Message, wo writeOptions) (_ proto.Message, err error) {
	c, obj, dry, err := s.beginUpdate(ctx, r, "ephemeralcontainers", ns, name, obj, wo)
	defer func() { s.end(ctx, c, err) }()
	if err != nil {
		return nil, err
	}
	req, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, apierrors.NewBadRequest("the ephemeralcontainers subresource takes a Pod")
	}
	clientRV := meta(obj).GetResourceVersion()
	return s.guaranteedUpdate(ctx, c, r, ns, name, clientRV, dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		if err := s.uidPrecondition(r, ns, name, obj, old); err != nil {
			return nil, nil, err
		}
		op := old.(*corev1.Pod)
		n := proto.Clone(op).(*corev1.Pod)
		if n.Spec == nil {
			n.Spec = &corev1.PodSpec{}
		}
		n.Spec.EphemeralContainers = nil
		for _, ec := range req.GetSpec().GetEphemeralContainers() {
			n.Spec.EphemeralContainers = append(n.Spec.EphemeralContainers, proto.Clone(ec).(*corev1.EphemeralContainer))
		}
		n.Metadata.ManagedFields = req.GetMetadata().GetManagedFields()
		setDefaults(n)
		if !proto.Equal(n.GetSpec(), op.GetSpec()) && n.Metadata.GetGeneration() != 0 {
			n.Metadata.Generation++
		}
		return n, s.admission(c, request.Update, n, old, dry), nil
	})
}

// validateEphemeralContainersUpdate is Kubernetes' validation of a write
// through pods/ephemeralcontainers.
func validateEphemeralContainersUpdate(r *resourceInfo, pod, old *corev1.Pod) field.ErrorList {
	errs := validateMeta(r, pod.GetMetadata(), field.NewPath("metadata"))
	errs = append(errs, validateMetaUpdate(pod.GetMetadata(), old.GetMetadata(), field.NewPath("metadata"))...)
	errs = append(errs, validatePodSpec(pod.GetSpec(), field.NewPath("spec"))...)
	if _, ok := old.GetMetadata().GetAnnotations()[mirrorPodAnnotation]; ok {
		return field.ErrorList{field.Forbidden(field.NewPath(""), "static pods do not support ephemeral containers")}
	}
	p := field.NewPath("spec", "ephemeralContainers")
	byName := map[string]*corev1.EphemeralContainer{}
	for _, ec := range pod.GetSpec().GetEphemeralContainers() {
		byName[ec.GetEphemeralContainerCommon().GetName()] = ec
	}
	for _, o := range old.GetSpec().GetEphemeralContainers() {
		name := o.GetEphemeralContainerCommon().GetName()
		n, ok := byName[name]
		switch {
		case !ok:
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("existing ephemeral containers %q may not be removed\n", name)))
		case !proto.Equal(o, n):
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("existing ephemeral containers %q may not be changed\n%v", name, ephemeralDiff(o, n))))
		}
	}
	return errs
}

// ephemeralDiff says how b differs from a, as JSON documents.
func ephemeralDiff(a, b *corev1.EphemeralContainer) string {
	var ad, bd map[string]any
	if ab, err := kubejson.Marshal(a); err == nil {
		_ = json.Unmarshal(ab, &ad)
	}
	if bb, err := kubejson.Marshal(b); err == nil {
		_ = json.Unmarshal(bb, &bd)
	}
	return cmp.Diff(ad, bd)
}

// ephemeralForbidden are the container fields an ephemeral container may
// not set (Kubernetes keeps an allow list; these are the fields outside
// it), in the order Kubernetes reports them.
var ephemeralForbidden = []struct {
	name string
	set  func(c *corev1.EphemeralContainerCommon) bool
}{
	{"ports", func(c *corev1.EphemeralContainerCommon) bool { return len(c.GetPorts()) > 0 }},
	{"resources", func(c *corev1.EphemeralContainerCommon) bool {
		return c.GetResources() != nil && proto.Size(c.GetResources()) > 0
	}},
	{"resizePolicy", func(c *corev1.EphemeralContainerCommon) bool { return len(c.GetResizePolicy()) > 0 }},
	{"restartPolicy", func(c *corev1.EphemeralContainerCommon) bool { return c.RestartPolicy != nil }},
	{"livenessProbe", func(c *corev1.EphemeralContainerCommon) bool { return c.GetLivenessProbe() != nil }},
	{"readinessProbe", func(c *corev1.EphemeralContainerCommon) bool { return c.GetReadinessProbe() != nil }},
	{"startupProbe", func(c *corev1.EphemeralContainerCommon) bool { return c.GetStartupProbe() != nil }},
	{"lifecycle", func(c *corev1.EphemeralContainerCommon) bool { return c.GetLifecycle() != nil }},
}

// validateEphemeralContainers checks a pod's ephemeral containers as
// Kubernetes does: each as a container (name, image, pull policy, env,
// mounts...), names unique across every container of the pod, a target
// that names a regular or init container, the fields an ephemeral container
// may not have, and no subPath mounts.
func validateEphemeralContainers(s *corev1.PodSpec, p *field.Path) field.ErrorList {
	ecs := s.GetEphemeralContainers()
	if len(ecs) == 0 {
		return nil
	}
	others := sets.New[string]()
	for _, c := range s.GetContainers() {
		others.Insert(c.GetName())
	}
	for _, c := range s.GetInitContainers() {
		others.Insert(c.GetName())
	}
	var errs field.ErrorList
	// The fields they share with a container are checked as a container's
	// (the two messages share their field numbers, as in Kubernetes).
	as := make([]*corev1.Container, 0, len(ecs))
	for _, ec := range ecs {
		c := &corev1.Container{}
		if b, err := proto.Marshal(ec.GetEphemeralContainerCommon()); err == nil {
			_ = proto.Unmarshal(b, c)
		}
		as = append(as, c)
	}
	errs = append(errs, validateContainers(as, p, others.Clone(), false)...)
	for i, ec := range ecs {
		ip := p.Index(i)
		common := ec.GetEphemeralContainerCommon()
		if t := ec.GetTargetContainerName(); t != "" && !others.Has(t) {
			errs = append(errs, field.NotFound(ip.Child("targetContainerName"), t))
		}
		for _, f := range ephemeralForbidden {
			if f.set(common) {
				errs = append(errs, field.Forbidden(ip.Child(f.name), "cannot be set for an Ephemeral Container"))
			}
		}
		for j, vm := range common.GetVolumeMounts() {
			if vm.GetSubPath() != "" {
				errs = append(errs, field.Forbidden(ip.Child("volumeMounts").Index(j).Child("subPath"), "cannot be set for an Ephemeral Container"))
			}
			if vm.GetSubPathExpr() != "" {
				errs = append(errs, field.Forbidden(ip.Child("volumeMounts").Index(j).Child("subPathExpr"), "cannot be set for an Ephemeral Container"))
			}
		}
	}
	return errs
}
