// This file holds the field managers' object converter: the scheme's (which
// converts nothing between versions: client-go's types carry no
// conversions), plus HorizontalPodAutoscaler between autoscaling/v1 and
// autoscaling/v2 by Kubernetes' rules (internal/hpaconv), so an object
// written at one version keeps the managed fields of writes at the other,
// as kube-apiserver's converter through the internal version does.

package gateway

import (
	"encoding/json"
	"fmt"

	k8sautoscalingv1 "k8s.io/api/autoscaling/v1"
	k8sautoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kplane/kplane/internal/hpaconv"
)

var (
	hpaV1GVK = schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "HorizontalPodAutoscaler"}
	hpaV2GVK = schema.GroupVersionKind{Group: "autoscaling", Version: "v2", Kind: "HorizontalPodAutoscaler"}
)

// hpaConverter is an ObjectConvertor that converts HorizontalPodAutoscalers
// between v1 and v2 itself and leaves everything else to the scheme.
type hpaConverter struct{ runtime.ObjectConvertor }

var _ runtime.ObjectConvertor = hpaConverter{}

// ConvertToVersion converts in to target: a HorizontalPodAutoscaler of the
// other autoscaling version here (answered as unstructured if in was), any
// other object by the scheme.
func (c hpaConverter) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	from := in.GetObjectKind().GroupVersionKind()
	to, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{from})
	if (from != hpaV1GVK && from != hpaV2GVK) || !ok || to.GroupKind() != from.GroupKind() || to.Version == from.Version {
		return c.ObjectConvertor.ConvertToVersion(in, target)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("gateway: converting %s to %s: %w", from, to, err)
	}
	var out any
	if from == hpaV1GVK {
		var h k8sautoscalingv1.HorizontalPodAutoscaler
		if err := json.Unmarshal(b, &h); err != nil {
			return nil, fmt.Errorf("gateway: converting %s to %s: %w", from, to, err)
		}
		out = hpaconv.FromV1(&h)
	} else {
		var h k8sautoscalingv2.HorizontalPodAutoscaler
		if err := json.Unmarshal(b, &h); err != nil {
			return nil, fmt.Errorf("gateway: converting %s to %s: %w", from, to, err)
		}
		if out, err = hpaconv.ToV1(&h); err != nil {
			return nil, fmt.Errorf("gateway: converting %s to %s: %w", from, to, err)
		}
	}
	if b, err = json.Marshal(out); err != nil {
		return nil, fmt.Errorf("gateway: converting %s to %s: %w", from, to, err)
	}
	if _, isUnstructured := in.(runtime.Unstructured); isUnstructured {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("gateway: converting %s to %s: %w", from, to, err)
		}
		return u, nil
	}
	return out.(runtime.Object), nil
}
