// This file holds ScaleClient: the scale subresource of any kind the API
// service serves one for, found by the kind's generated gRPC service, as
// Kubernetes' disruption controller reads any controller's scale through
// its scale client.
package disruption

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
)

// ScaleClient reads scale subresources over conn.
type ScaleClient struct {
	conn grpc.ClientConnInterface
}

// NewScaleClient returns a ScaleClient over conn.
func NewScaleClient(conn grpc.ClientConnInterface) *ScaleClient { return &ScaleClient{conn: conn} }

var _ Scales = (*ScaleClient)(nil)

// GetScale reads the scale of the object apiVersion/kind namespace/name. A
// kind kplane does not serve is an error (as a kind unknown to
// Kubernetes' REST mapper); a served kind without a scale subresource is
// NotFound, as kube-apiserver answers.
func (c *ScaleClient) GetScale(ctx context.Context, apiVersion, kind, namespace, name string) (*autoscalingv1.Scale, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, fmt.Errorf("disruption: controller apiVersion %q: %w", apiVersion, err)
	}
	svc, ok := findService(gv, kind)
	if !ok {
		return nil, fmt.Errorf("no matches for kind %q in version %q", kind, apiVersion)
	}
	m := svc.Methods().ByName(protoreflect.Name("Get" + kind + "Scale"))
	if m == nil {
		return nil, apierrors.NewNotFound(gv.Group, strings.ToLower(kind)+"s/scale", name)
	}
	reqType, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
	if err != nil {
		return nil, fmt.Errorf("disruption: %w", err)
	}
	req := reqType.New()
	req.Set(req.Descriptor().Fields().ByName("namespace"), protoreflect.ValueOfString(namespace))
	req.Set(req.Descriptor().Fields().ByName("name"), protoreflect.ValueOfString(name))
	respType, err := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName())
	if err != nil {
		return nil, fmt.Errorf("disruption: %w", err)
	}
	resp := respType.New()
	method := "/" + string(svc.FullName()) + "/" + string(m.Name())
	if err := c.conn.Invoke(ctx, method, req.Interface(), resp.Interface()); err != nil {
		return nil, apierrors.FromError(err)
	}
	fd := resp.Descriptor().Fields().ByName("scale")
	sc, ok := resp.Get(fd).Message().Interface().(*autoscalingv1.Scale)
	if !ok {
		return nil, fmt.Errorf("disruption: %s carries no Scale", m.Output().FullName())
	}
	return sc, nil
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
