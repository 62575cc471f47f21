// This file holds what the controller reads and writes besides
// autoscalers and pods: any kind's scale subresource, found by the kind's
// generated gRPC service (as Kubernetes' scale client finds it through the
// REST mapper), and the pods' resource metrics from metrics.k8s.io.

package hpa

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metricsv1beta1 "github.com/kplane/kplane/proto/kplane/metrics/v1beta1"
)

// ScaleClient reads and writes scale subresources over conn: a built-in
// kind's through its generated service, a custom resource's through the
// dynamic ResourceService.
type ScaleClient struct {
	conn    grpc.ClientConnInterface
	dynamic dynamicv1.ResourceServiceClient
}

// NewScaleClient returns a ScaleClient over conn.
func NewScaleClient(conn grpc.ClientConnInterface) *ScaleClient {
	return &ScaleClient{conn: conn, dynamic: dynamicv1.NewResourceServiceClient(conn)}
}

var _ Scales = (*ScaleClient)(nil)

// GetScale reads the scale of apiVersion/kind namespace/name.
func (c *ScaleClient) GetScale(ctx context.Context, apiVersion, kind, namespace, name string) (*autoscalingv1.Scale, error) {
	return c.call(ctx, "Get", apiVersion, kind, namespace, name, nil)
}

// UpdateScale writes sc (its spec.replicas) to apiVersion/kind namespace/sc's name.
func (c *ScaleClient) UpdateScale(ctx context.Context, apiVersion, kind, namespace string, sc *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	return c.call(ctx, "Update", apiVersion, kind, namespace, sc.GetMetadata().GetName(), sc)
}

// call invokes <verb><Kind>Scale. A kind kplane does not serve is an
// error (as a kind unknown to Kubernetes' REST mapper: "no matches for
// kind"); a served kind without a scale subresource is NotFound.
func (c *ScaleClient) call(ctx context.Context, verb, apiVersion, kind, namespace, name string, sc *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	svc, ok := findService(gv, kind)
	if !ok {
		return c.customScale(ctx, verb, gv, kind, namespace, name, sc)
	}
	m := svc.Methods().ByName(protoreflect.Name(verb + kind + "Scale"))
	if m == nil {
		return nil, apierrors.NewNotFound(gv.Group, strings.ToLower(kind)+"s/scale", name)
	}
	reqType, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
	if err != nil {
		return nil, fmt.Errorf("hpa: %w", err)
	}
	req := reqType.New()
	fs := req.Descriptor().Fields()
	req.Set(fs.ByName("namespace"), protoreflect.ValueOfString(namespace))
	req.Set(fs.ByName("name"), protoreflect.ValueOfString(name))
	if sc != nil {
		req.Set(fs.ByName("scale"), protoreflect.ValueOfMessage(sc.ProtoReflect()))
	}
	respType, err := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName())
	if err != nil {
		return nil, fmt.Errorf("hpa: %w", err)
	}
	resp := respType.New()
	if err := c.conn.Invoke(ctx, "/"+string(svc.FullName())+"/"+string(m.Name()), req.Interface(), resp.Interface()); err != nil {
		return nil, apierrors.FromError(err)
	}
	out, ok := resp.Get(resp.Descriptor().Fields().ByName("scale")).Message().Interface().(*autoscalingv1.Scale)
	if !ok {
		return nil, fmt.Errorf("hpa: %s carries no Scale", m.Output().FullName())
	}
	return out, nil
}

// customScale is call for a custom resource: its plural from discovery,
// then the dynamic service's GetScale or UpdateScale.
func (c *ScaleClient) customScale(ctx context.Context, verb string, gv schema.GroupVersion, kind, namespace, name string, sc *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	d, err := c.dynamic.Discover(ctx, &dynamicv1.DiscoverRequest{})
	if err != nil {
		return nil, apierrors.FromError(err)
	}
	for _, r := range d.GetResources() {
		if r.GetGroup() != gv.Group || r.GetVersion() != gv.Version || r.GetKind() != kind {
			continue
		}
		if !r.GetScale() {
			return nil, apierrors.NewNotFound(gv.Group, r.GetResource()+"/scale", name)
		}
		t := &dynamicv1.Target{Group: gv.Group, Version: gv.Version, Resource: r.GetResource(), Namespace: namespace, Name: name}
		if verb == "Get" {
			resp, err := c.dynamic.GetScale(ctx, &dynamicv1.GetScaleRequest{Target: t})
			if err != nil {
				return nil, apierrors.FromError(err)
			}
			return resp.GetScale(), nil
		}
		resp, err := c.dynamic.UpdateScale(ctx, &dynamicv1.UpdateScaleRequest{Target: t, Scale: sc})
		if err != nil {
			return nil, apierrors.FromError(err)
		}
		return resp.GetScale(), nil
	}
	return nil, fmt.Errorf("no matches for kind %q in group %q", kind, gv.Group)
}

// findService finds the generated service of kind in group version gv: a
// service named <Kind>Service whose Get<Kind> is served under gv's path.
func findService(gv schema.GroupVersion, kind string) (protoreflect.ServiceDescriptor, bool) {
	prefix := "/apis/" + gv.Group + "/" + gv.Version + "/"
	if gv.Group == "" {
		prefix = "/api/" + gv.Version + "/"
	}
	var found protoreflect.ServiceDescriptor
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "kplane.") {
			return true
		}
		sd := fd.Services().ByName(protoreflect.Name(kind + "Service"))
		if sd == nil {
			return true
		}
		get := sd.Methods().ByName(protoreflect.Name("Get" + kind))
		if get == nil {
			return true
		}
		rule, _ := proto.GetExtension(get.Options(), annotations.E_Http).(*annotations.HttpRule)
		if strings.HasPrefix(rule.GetGet(), prefix) {
			found = sd
			return false
		}
		return true
	})
	return found, found != nil
}

// ResourceMetrics reads the pods' usage of a resource.
type ResourceMetrics interface {
	// PodUsage is the usage of res (milli-units) of each pod in ns the
	// selector picks, by pod name: its containers' sum, or the one
	// container's when container is set. A pod lacking a sample is left
	// out.
	PodUsage(ctx context.Context, ns string, selector labels.Selector, res, container string) (map[string]podMetric, error)
}

// MetricsClient reads metrics.k8s.io over conn, as Kubernetes' resource
// metrics client.
type MetricsClient struct {
	pods metricsv1beta1.PodMetricsServiceClient
}

// NewMetricsClient returns a MetricsClient over conn.
func NewMetricsClient(conn grpc.ClientConnInterface) *MetricsClient {
	return &MetricsClient{pods: metricsv1beta1.NewPodMetricsServiceClient(conn)}
}

var _ ResourceMetrics = (*MetricsClient)(nil)

// PodUsage implements ResourceMetrics.
func (c *MetricsClient) PodUsage(ctx context.Context, ns string, selector labels.Selector, res, container string) (map[string]podMetric, error) {
	resp, err := c.pods.ListPodMetrics(ctx, &metricsv1beta1.ListPodMetricsRequest{Namespace: ns, LabelSelector: selector.String()})
	if err != nil {
		return nil, fmt.Errorf("unable to fetch metrics from resource metrics API: %w", apierrors.FromError(err))
	}
	items := resp.GetList().GetItems()
	if len(items) == 0 {
		return nil, errors.New("no metrics returned from resource metrics API")
	}
	out := map[string]podMetric{}
	for _, m := range items {
		window, _ := parseWindow(m.GetWindow())
		var sum int64
		complete, found := true, false
		for _, ct := range m.GetContainers() {
			if container != "" && ct.GetName() != container {
				continue
			}
			found = true
			v, ok := ct.GetUsage()[res]
			if !ok {
				complete = false
				break
			}
			q, err := resource.ParseQuantity(v)
			if err != nil {
				complete = false
				break
			}
			sum += q.MilliValue()
		}
		if complete && found {
			out[m.GetMetadata().GetName()] = podMetric{value: sum, at: m.GetTimestamp().AsTime(), window: window}
		}
	}
	return out, nil
}

// parseWindow reads a metrics window ("30s", "0s").
func parseWindow(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}
