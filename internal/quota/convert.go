// This file converts kplane's stored objects to the k8s.io/api types the
// evaluators and k8s.io/apiserver's quota checks read.

package quota

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kplane/kplane/proto/kubejson"
)

// ToK8s converts obj through its Kubernetes JSON: pods, services and
// quotas to their k8s.io/api types, anything else to Unstructured (enough
// to be counted).
func ToK8s(obj proto.Message) (runtime.Object, error) {
	b, err := kubejson.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("quota: encode %s: %w", obj.ProtoReflect().Descriptor().FullName(), err)
	}
	var out runtime.Object
	switch obj.ProtoReflect().Descriptor().FullName() {
	case "kplane.core.v1.Pod":
		out = &corev1.Pod{}
	case "kplane.core.v1.Service":
		out = &corev1.Service{}
	case "kplane.core.v1.ResourceQuota":
		out = &corev1.ResourceQuota{}
	default:
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("quota: decode %s: %w", obj.ProtoReflect().Descriptor().FullName(), err)
		}
		return u, nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("quota: decode %s: %w", obj.ProtoReflect().Descriptor().FullName(), err)
	}
	return out, nil
}

// Quantities turns a quota's resource list into kplane's map of canonical
// quantity strings.
func Quantities(l corev1.ResourceList) map[string]string {
	if l == nil {
		return nil
	}
	out := make(map[string]string, len(l))
	for k, v := range l {
		out[string(k)] = v.String()
	}
	return out
}
