// This file holds the request as the Pod Security library reads it: kplane's
// admission attributes, with the objects turned into their k8s.io/api types
// only when the library asks for them.

package podsecurity

import (
	"encoding/json"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	psaapi "k8s.io/pod-security-admission/api"

	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/request"
)

// attributes implements the library's api.Attributes over a kplane
// admission request. The conversions run at most once each, and only for a
// namespace whose policy needs the object looked at.
type attributes struct {
	a         *request.Admission
	namespace string

	objOnce sync.Once
	obj     runtime.Object
	objErr  error
	oldOnce sync.Once
	old     runtime.Object
	oldErr  error
}

var _ psaapi.Attributes = (*attributes)(nil)

func newAttributes(a *request.Admission) *attributes {
	ns := a.Namespace
	// kube-apiserver gives a namespace's own requests its name as their
	// namespace, creates included.
	if a.Resource == "namespaces" && a.APIGroup == "" {
		ns = a.Name
	}
	return &attributes{a: a, namespace: ns}
}

func (at *attributes) GetName() string      { return at.a.Name }
func (at *attributes) GetNamespace() string { return at.namespace }
func (at *attributes) GetSubresource() string {
	return at.a.Subresource
}
func (at *attributes) GetUserName() string { return at.a.User.Name }

func (at *attributes) GetResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: at.a.APIGroup, Version: at.a.APIVersion, Resource: at.a.Resource}
}

func (at *attributes) GetKind() schema.GroupVersionKind {
	gvk := schema.GroupVersionKind{Group: at.a.APIGroup, Version: at.a.APIVersion}
	if at.a.Object != nil {
		gvk.Kind = string(at.a.Object.ProtoReflect().Descriptor().Name())
	}
	return gvk
}

func (at *attributes) GetOperation() admissionv1.Operation {
	return admissionv1.Operation(at.a.Operation)
}

func (at *attributes) GetObject() (runtime.Object, error) {
	at.objOnce.Do(func() { at.obj, at.objErr = toK8s(at.a.Object) })
	return at.obj, at.objErr
}

func (at *attributes) GetOldObject() (runtime.Object, error) {
	at.oldOnce.Do(func() { at.old, at.oldErr = toK8s(at.a.OldObject) })
	return at.old, at.oldErr
}

// toK8s converts one of the kinds the library reads (namespaces, pods and
// the kinds with a pod template) through its Kubernetes JSON.
func toK8s(m proto.Message) (runtime.Object, error) {
	if m == nil {
		return nil, nil
	}
	name := m.ProtoReflect().Descriptor().FullName()
	var out runtime.Object
	switch name {
	case "kplane.core.v1.Namespace":
		out = &corev1.Namespace{}
	case "kplane.core.v1.Pod":
		out = &corev1.Pod{}
	case "kplane.core.v1.ReplicationController":
		out = &corev1.ReplicationController{}
	case "kplane.core.v1.PodTemplate":
		out = &corev1.PodTemplate{}
	case "kplane.apps.v1.ReplicaSet":
		out = &appsv1.ReplicaSet{}
	case "kplane.apps.v1.Deployment":
		out = &appsv1.Deployment{}
	case "kplane.apps.v1.StatefulSet":
		out = &appsv1.StatefulSet{}
	case "kplane.apps.v1.DaemonSet":
		out = &appsv1.DaemonSet{}
	case "kplane.batch.v1.Job":
		out = &batchv1.Job{}
	case "kplane.batch.v1.CronJob":
		out = &batchv1.CronJob{}
	default:
		return nil, fmt.Errorf("podsecurity: unexpected type %s", name)
	}
	b, err := kubejson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("podsecurity: encode %s: %w", name, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("podsecurity: decode %s: %w", name, err)
	}
	return out, nil
}
