// This file holds autoscaling/v1 HorizontalPodAutoscaler, served as a view
// of the stored autoscaling/v2 one: the same objects under the same keys
// and one watch cache, converted at the edge by Kubernetes' rules
// (internal/hpaconv: v1's CPU target is a Resource cpu metric, what v1
// cannot hold travels in its annotations), as kube-apiserver serves both
// versions from /registry/horizontalpodautoscalers.

package apiserver

import (
	"context"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	k8sautoscalingv1 "k8s.io/api/autoscaling/v1"
	k8sautoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/kplane/kplane/internal/hpaconv"
	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	"github.com/kplane/kplane/proto/kubejson"
)

// hpaV1View is autoscaling/v1 horizontalpodautoscalers over v2, the stored
// resource: requests through it are authorized, audited and admitted as
// autoscaling/v1's, validated as Kubernetes validates the internal object
// (v2's field paths), and its objects are v2 messages inside the service.
func hpaV1View(v2 *resourceInfo) *resourceInfo {
	return &resourceInfo{
		Group: "autoscaling", Version: "v1", Kind: "HorizontalPodAutoscaler", Resource: "horizontalpodautoscalers",
		Namespaced: true, HasStatus: true, AllowUnconditionalUpdate: true,
		New: v2.New, stored: v2,
	}
}

// hpaToV1 is a stored HorizontalPodAutoscaler as autoscaling/v1 (nil for
// nil). The proto messages are Kubernetes' JSON field for field, so the
// conversion goes through k8s.io/api's types, whose encoding the
// annotations must have.
func hpaToV1(obj proto.Message) (*autoscalingv1.HorizontalPodAutoscaler, error) {
	h, _ := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if h == nil {
		return nil, nil
	}
	b, err := kubejson.Marshal(h)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var in k8sautoscalingv2.HorizontalPodAutoscaler
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("apiserver: decoding an autoscaling/v2 HorizontalPodAutoscaler: %w", err))
	}
	out, err := hpaconv.ToV1(&in)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if b, err = json.Marshal(out); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	v1 := &autoscalingv1.HorizontalPodAutoscaler{}
	if err := kubejson.Unmarshal(b, v1, kubejson.Options{}); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return v1, nil
}

// hpaFromV1 is an autoscaling/v1 HorizontalPodAutoscaler as the stored v2
// message (nil for nil), with v1's default (minReplicas 1) applied first
// as Kubernetes decodes a v1 body; v2's defaults follow in the generic
// write.
func hpaFromV1(h *autoscalingv1.HorizontalPodAutoscaler) (proto.Message, error) {
	if h == nil {
		return nil, nil
	}
	b, err := kubejson.Marshal(h)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var in k8sautoscalingv1.HorizontalPodAutoscaler
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding an autoscaling/v1 HorizontalPodAutoscaler: %v", err))
	}
	if in.Spec.MinReplicas == nil {
		one := int32(1)
		in.Spec.MinReplicas = &one
	}
	if b, err = json.Marshal(hpaconv.FromV1(&in)); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	v2 := &autoscalingv2.HorizontalPodAutoscaler{}
	if err := kubejson.Unmarshal(b, v2, kubejson.Options{}); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return v2, nil
}

// autoscalingv1HorizontalPodAutoscalerView serves autoscaling/v1
// horizontalpodautoscalers through the generic handlers of the view r
// (hpaV1View).
type autoscalingv1HorizontalPodAutoscalerView struct {
	autoscalingv1.UnimplementedHorizontalPodAutoscalerServiceServer
	s *Server
	r *resourceInfo
}

var _ autoscalingv1.HorizontalPodAutoscalerServiceServer = (*autoscalingv1HorizontalPodAutoscalerView)(nil)

func (x *autoscalingv1HorizontalPodAutoscalerView) GetHorizontalPodAutoscaler(ctx context.Context, req *autoscalingv1.GetHorizontalPodAutoscalerRequest) (*autoscalingv1.GetHorizontalPodAutoscalerResponse, error) {
	obj, err := x.s.get(ctx, x.r, req.GetNamespace(), req.GetName(), req.GetResourceVersion())
	if err != nil {
		return nil, toGRPC(err)
	}
	h, err := hpaToV1(obj)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &autoscalingv1.GetHorizontalPodAutoscalerResponse{HorizontalPodAutoscaler: h}, nil
}

func (x *autoscalingv1HorizontalPodAutoscalerView) ListHorizontalPodAutoscalers(ctx context.Context, req *autoscalingv1.ListHorizontalPodAutoscalersRequest) (*autoscalingv1.ListHorizontalPodAutoscalersResponse, error) {
	items, lm, err := x.s.list(ctx, x.r, req.GetNamespace(), listOptions{
		LabelSelector: req.GetLabelSelector(), FieldSelector: req.GetFieldSelector(),
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		Limit: req.GetLimit(), Continue: req.GetContinue(),
	})
	if err != nil {
		return nil, toGRPC(err)
	}
	list := &autoscalingv1.HorizontalPodAutoscalerList{ApiVersion: x.r.APIVersion(), Kind: "HorizontalPodAutoscalerList", Metadata: lm,
		Items: make([]*autoscalingv1.HorizontalPodAutoscaler, len(items))}
	for i, it := range items {
		if list.Items[i], err = hpaToV1(it); err != nil {
			return nil, toGRPC(err)
		}
	}
	return &autoscalingv1.ListHorizontalPodAutoscalersResponse{List: list}, nil
}

// WatchHorizontalPodAutoscalers watches the v2 cache, converting each event
// for this watcher.
func (x *autoscalingv1HorizontalPodAutoscalerView) WatchHorizontalPodAutoscalers(req *autoscalingv1.WatchHorizontalPodAutoscalersRequest, stream autoscalingv1.HorizontalPodAutoscalerService_WatchHorizontalPodAutoscalersServer) error {
	opts := listOptions{
		LabelSelector: req.GetLabelSelector(), FieldSelector: req.GetFieldSelector(),
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		AllowWatchBookmarks: req.GetAllowWatchBookmarks(), SendInitialEvents: req.SendInitialEvents,
	}
	if req.TimeoutSeconds != nil {
		opts.TimeoutSeconds = req.GetTimeoutSeconds()
	}
	err := x.s.runWatch(stream.Context(), x.r, req.GetNamespace(), opts, watchSink{
		encode: func(e *watchEvent) (any, trace.SpanContext, error) {
			obj := e.obj
			if e.typ == eventBookmark {
				obj = e.bookmark(x.r)
			}
			h, err := hpaToV1(obj)
			if err != nil {
				return nil, trace.SpanContext{}, err
			}
			return &autoscalingv1.WatchHorizontalPodAutoscalersResponse{Type: e.typ, Object: h}, trace.SpanContext{}, nil
		},
		send: stream.SendMsg,
	})
	return toGRPC(err)
}

func (x *autoscalingv1HorizontalPodAutoscalerView) CreateHorizontalPodAutoscaler(ctx context.Context, req *autoscalingv1.CreateHorizontalPodAutoscalerRequest) (*autoscalingv1.CreateHorizontalPodAutoscalerResponse, error) {
	in, err := hpaFromV1(req.GetHorizontalPodAutoscaler())
	if err != nil {
		return nil, toGRPC(err)
	}
	obj, err := x.s.create(ctx, x.r, req.GetNamespace(), in, writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	h, err := hpaToV1(obj)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &autoscalingv1.CreateHorizontalPodAutoscalerResponse{HorizontalPodAutoscaler: h}, nil
}

func (x *autoscalingv1HorizontalPodAutoscalerView) UpdateHorizontalPodAutoscaler(ctx context.Context, req *autoscalingv1.UpdateHorizontalPodAutoscalerRequest) (*autoscalingv1.UpdateHorizontalPodAutoscalerResponse, error) {
	in, err := hpaFromV1(req.GetHorizontalPodAutoscaler())
	if err != nil {
		return nil, toGRPC(err)
	}
	obj, err := x.s.update(ctx, x.r, req.GetNamespace(), req.GetName(), in, writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	h, err := hpaToV1(obj)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &autoscalingv1.UpdateHorizontalPodAutoscalerResponse{HorizontalPodAutoscaler: h}, nil
}

func (x *autoscalingv1HorizontalPodAutoscalerView) UpdateHorizontalPodAutoscalerStatus(ctx context.Context, req *autoscalingv1.UpdateHorizontalPodAutoscalerStatusRequest) (*autoscalingv1.UpdateHorizontalPodAutoscalerStatusResponse, error) {
	in, err := hpaFromV1(req.GetHorizontalPodAutoscaler())
	if err != nil {
		return nil, toGRPC(err)
	}
	obj, err := x.s.updateStatus(ctx, x.r, req.GetNamespace(), req.GetName(), in, writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	h, err := hpaToV1(obj)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &autoscalingv1.UpdateHorizontalPodAutoscalerStatusResponse{HorizontalPodAutoscaler: h}, nil
}

func (x *autoscalingv1HorizontalPodAutoscalerView) DeleteHorizontalPodAutoscaler(ctx context.Context, req *autoscalingv1.DeleteHorizontalPodAutoscalerRequest) (*autoscalingv1.DeleteHorizontalPodAutoscalerResponse, error) {
	obj, err := x.s.delete(ctx, x.r, req.GetNamespace(), req.GetName(), deleteOptions{
		GracePeriodSeconds: req.GracePeriodSeconds, PropagationPolicy: req.GetPropagationPolicy(),
		Preconditions: req.GetPreconditions(), DryRun: req.GetDryRun(),
	})
	if err != nil {
		return nil, toGRPC(err)
	}
	h, err := hpaToV1(obj)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &autoscalingv1.DeleteHorizontalPodAutoscalerResponse{HorizontalPodAutoscaler: h}, nil
}
