// This file wires the generated grpc-gateway handlers into the REST mux and
// rewrites what the methods return into what Kubernetes writes: objects,
// lists, watch events and Status errors.

package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/proto/apierrors"
	admissionv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	certificatesv1 "github.com/kplane/kplane/proto/kplane/certificates/v1"
	coordinationv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	eventsv1 "github.com/kplane/kplane/proto/kplane/events/v1"
	flowcontrolv1 "github.com/kplane/kplane/proto/kplane/flowcontrol/v1"
	metricsv1beta1 "github.com/kplane/kplane/proto/kplane/metrics/v1beta1"
	networkingv1 "github.com/kplane/kplane/proto/kplane/networking/v1"
	nodev1 "github.com/kplane/kplane/proto/kplane/node/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	schedulingv1 "github.com/kplane/kplane/proto/kplane/scheduling/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// registration mounts one service's generated grpc-gateway handlers.
type registration func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error

// register adapts a generated Register<Service>HandlerClient function.
func register[C any](handlers func(context.Context, *runtime.ServeMux, C) error, client func(grpc.ClientConnInterface) C) registration {
	return func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
		return handlers(ctx, mux, client(cc))
	}
}

// services are the API service's services whose google.api.http rules the
// gateway serves, through the handlers protoc-gen-grpc-gateway generated.
var services = []registration{
	register(corev1.RegisterNamespaceServiceHandlerClient, corev1.NewNamespaceServiceClient),
	register(corev1.RegisterPodServiceHandlerClient, corev1.NewPodServiceClient),
	register(corev1.RegisterNodeServiceHandlerClient, corev1.NewNodeServiceClient),
	register(corev1.RegisterEventServiceHandlerClient, corev1.NewEventServiceClient),
	register(corev1.RegisterServiceServiceHandlerClient, corev1.NewServiceServiceClient),
	register(corev1.RegisterEndpointsServiceHandlerClient, corev1.NewEndpointsServiceClient),
	register(corev1.RegisterConfigMapServiceHandlerClient, corev1.NewConfigMapServiceClient),
	register(corev1.RegisterSecretServiceHandlerClient, corev1.NewSecretServiceClient),
	register(corev1.RegisterServiceAccountServiceHandlerClient, corev1.NewServiceAccountServiceClient),
	register(corev1.RegisterReplicationControllerServiceHandlerClient, corev1.NewReplicationControllerServiceClient),
	register(corev1.RegisterResourceQuotaServiceHandlerClient, corev1.NewResourceQuotaServiceClient),
	register(corev1.RegisterLimitRangeServiceHandlerClient, corev1.NewLimitRangeServiceClient),
	register(schedulingv1.RegisterPriorityClassServiceHandlerClient, schedulingv1.NewPriorityClassServiceClient),
	register(appsv1.RegisterDeploymentServiceHandlerClient, appsv1.NewDeploymentServiceClient),
	register(appsv1.RegisterReplicaSetServiceHandlerClient, appsv1.NewReplicaSetServiceClient),
	register(appsv1.RegisterDaemonSetServiceHandlerClient, appsv1.NewDaemonSetServiceClient),
	register(appsv1.RegisterControllerRevisionServiceHandlerClient, appsv1.NewControllerRevisionServiceClient),
	register(appsv1.RegisterStatefulSetServiceHandlerClient, appsv1.NewStatefulSetServiceClient),
	register(corev1.RegisterPersistentVolumeClaimServiceHandlerClient, corev1.NewPersistentVolumeClaimServiceClient),
	register(corev1.RegisterPersistentVolumeServiceHandlerClient, corev1.NewPersistentVolumeServiceClient),
	register(storagev1.RegisterStorageClassServiceHandlerClient, storagev1.NewStorageClassServiceClient),
	register(batchv1.RegisterJobServiceHandlerClient, batchv1.NewJobServiceClient),
	register(batchv1.RegisterCronJobServiceHandlerClient, batchv1.NewCronJobServiceClient),
	register(discoveryv1.RegisterEndpointSliceServiceHandlerClient, discoveryv1.NewEndpointSliceServiceClient),
	register(eventsv1.RegisterEventServiceHandlerClient, eventsv1.NewEventServiceClient),
	register(certificatesv1.RegisterCertificateSigningRequestServiceHandlerClient, certificatesv1.NewCertificateSigningRequestServiceClient),
	register(corev1.RegisterPodTemplateServiceHandlerClient, corev1.NewPodTemplateServiceClient),
	register(networkingv1.RegisterIngressServiceHandlerClient, networkingv1.NewIngressServiceClient),
	register(networkingv1.RegisterIngressClassServiceHandlerClient, networkingv1.NewIngressClassServiceClient),
	register(networkingv1.RegisterNetworkPolicyServiceHandlerClient, networkingv1.NewNetworkPolicyServiceClient),
	register(nodev1.RegisterRuntimeClassServiceHandlerClient, nodev1.NewRuntimeClassServiceClient),
	register(flowcontrolv1.RegisterFlowSchemaServiceHandlerClient, flowcontrolv1.NewFlowSchemaServiceClient),
	register(flowcontrolv1.RegisterPriorityLevelConfigurationServiceHandlerClient, flowcontrolv1.NewPriorityLevelConfigurationServiceClient),
	register(storagev1.RegisterCSIDriverServiceHandlerClient, storagev1.NewCSIDriverServiceClient),
	register(storagev1.RegisterCSINodeServiceHandlerClient, storagev1.NewCSINodeServiceClient),
	register(storagev1.RegisterVolumeAttachmentServiceHandlerClient, storagev1.NewVolumeAttachmentServiceClient),
	register(storagev1.RegisterCSIStorageCapacityServiceHandlerClient, storagev1.NewCSIStorageCapacityServiceClient),
	register(coordinationv1.RegisterLeaseServiceHandlerClient, coordinationv1.NewLeaseServiceClient),
	register(policyv1.RegisterPodDisruptionBudgetServiceHandlerClient, policyv1.NewPodDisruptionBudgetServiceClient),
	register(rbacv1.RegisterRoleServiceHandlerClient, rbacv1.NewRoleServiceClient),
	register(rbacv1.RegisterClusterRoleServiceHandlerClient, rbacv1.NewClusterRoleServiceClient),
	register(rbacv1.RegisterRoleBindingServiceHandlerClient, rbacv1.NewRoleBindingServiceClient),
	register(rbacv1.RegisterClusterRoleBindingServiceHandlerClient, rbacv1.NewClusterRoleBindingServiceClient),
	register(admissionv1.RegisterMutatingWebhookConfigurationServiceHandlerClient, admissionv1.NewMutatingWebhookConfigurationServiceClient),
	register(admissionv1.RegisterValidatingWebhookConfigurationServiceHandlerClient, admissionv1.NewValidatingWebhookConfigurationServiceClient),
	register(admissionv1.RegisterValidatingAdmissionPolicyServiceHandlerClient, admissionv1.NewValidatingAdmissionPolicyServiceClient),
	register(admissionv1.RegisterValidatingAdmissionPolicyBindingServiceHandlerClient, admissionv1.NewValidatingAdmissionPolicyBindingServiceClient),
	register(authorizationv1.RegisterAuthorizationServiceHandlerClient, authorizationv1.NewAuthorizationServiceClient),
	register(authenticationv1.RegisterAuthenticationServiceHandlerClient, authenticationv1.NewAuthenticationServiceClient),
	register(apiextensionsv1.RegisterCustomResourceDefinitionServiceHandlerClient, apiextensionsv1.NewCustomResourceDefinitionServiceClient),
	register(autoscalingv1.RegisterHorizontalPodAutoscalerServiceHandlerClient, autoscalingv1.NewHorizontalPodAutoscalerServiceClient),
	register(autoscalingv2.RegisterHorizontalPodAutoscalerServiceHandlerClient, autoscalingv2.NewHorizontalPodAutoscalerServiceClient),
	register(metricsv1beta1.RegisterPodMetricsServiceHandlerClient, metricsv1beta1.NewPodMetricsServiceClient),
	register(metricsv1beta1.RegisterNodeMetricsServiceHandlerClient, metricsv1beta1.NewNodeMetricsServiceClient),
}

// requestInfo is what the front of the gateway learnt about a request,
// handed to the grpc-gateway extension points through the context.
type requestInfo struct {
	// md is the caller's identity for the API service.
	md metadata.MD
	// fieldValidation is Strict, Warn ("") or Ignore.
	fieldValidation string
	// table: the client asked for a meta.k8s.io Table, with includeObject.
	table         bool
	includeObject string
	// warnings collected while decoding, sent as Warning headers.
	warnings []string
	// name is the object the path names, if any.
	name string
	// tableColumnsSent: a watch in Tables has sent its column definitions.
	tableColumnsSent bool
}

type infoKey struct{}

func withInfo(ctx context.Context, info *requestInfo) context.Context {
	return context.WithValue(ctx, infoKey{}, info)
}

func infoFrom(ctx context.Context) *requestInfo {
	if info, ok := ctx.Value(infoKey{}).(*requestInfo); ok {
		return info
	}
	return &requestInfo{}
}

// outgoingHeader names the HTTP response header a gRPC response header of
// the API service becomes, if the client is to see it.
func outgoingHeader(k string) (string, bool) {
	switch k {
	case apierrors.WarningHeader:
		return "Warning", true
	case apierrors.FlowSchemaUIDHeader:
		return "X-Kubernetes-PF-FlowSchema-UID", true
	case apierrors.PriorityLevelUIDHeader:
		return "X-Kubernetes-PF-PriorityLevel-UID", true
	}
	return "", false
}

// newRESTMux builds the grpc-gateway mux serving every annotated method,
// with Kubernetes' encoding, errors and identity plugged into its extension
// points.
func newRESTMux(conn grpc.ClientConnInterface, tab *table, rewrite func(context.Context, proto.Message) (any, error)) (*runtime.ServeMux, error) {
	km := &kubeMarshaler{tab: tab}
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, km),
		// Nothing from the HTTP request reaches the API service as metadata
		// but the identity the gateway established (a client must not be
		// able to send kplane-impersonate-* itself).
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
		// Of the API service's response headers only Kubernetes' warnings
		// (`299 - "..."`) and priority and fairness's classification reach
		// the client.
		runtime.WithOutgoingHeaderMatcher(outgoingHeader),
		runtime.WithMetadata(func(ctx context.Context, _ *http.Request) metadata.MD { return infoFrom(ctx).md }),
		runtime.WithErrorHandler(func(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
			// A refusal names the call's FlowSchema and priority level
			// too, as kube-apiserver's responses do.
			if md, ok := runtime.ServerMetadataFromContext(ctx); ok {
				for _, k := range []string{apierrors.FlowSchemaUIDHeader, apierrors.PriorityLevelUIDHeader} {
					if v := md.HeaderMD.Get(k); len(v) > 0 {
						name, _ := outgoingHeader(k)
						w.Header().Set(name, v[0])
					}
				}
			}
			writeError(w, err)
		}),
		runtime.WithRoutingErrorHandler(func(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, code int) {
			if code == http.StatusMethodNotAllowed {
				writeError(w, methodNotAllowed())
				return
			}
			writeError(w, notFound())
		}),
		runtime.WithStreamErrorHandler(func(_ context.Context, err error) *status.Status {
			return apierrors.FromError(err).GRPCStatus()
		}),
		runtime.WithForwardResponseOption(forwardResponse),
		runtime.WithForwardResponseRewriter(rewrite),
		runtime.WithDisableHTTPMethodOverride(),
	)
	for _, reg := range services {
		if err := reg(context.Background(), mux, conn); err != nil {
			return nil, err
		}
	}
	// pods/log: raw text, not the generated handler (see podlog.go).
	if err := mux.HandlePath(http.MethodGet, podLogPath, podLogHandler(corev1.NewPodServiceClient(conn))); err != nil {
		return nil, err
	}
	return mux, nil
}

func methodNotAllowed() *apierrors.StatusError {
	return &apierrors.StatusError{Reason: apierrors.ReasonMethodNotAllowed, Code: http.StatusMethodNotAllowed,
		Message: "the server does not allow this method on the requested resource"}
}

// forwardResponse runs before a response is written: a watch stream (resp
// nil) sends its headers at once, as Kubernetes does — a client waiting for
// them cannot be stopped otherwise (client-go's reflector watches without a
// context, and kubectl rollout status waits for it to stop); a create
// and an eviction answer 201; decoding warnings become Warning headers.
func forwardResponse(ctx context.Context, w http.ResponseWriter, resp proto.Message) error {
	if resp == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return http.NewResponseController(w).Flush()
	}
	addWarnings(w, infoFrom(ctx).warnings)
	if n := string(resp.ProtoReflect().Descriptor().Name()); strings.HasPrefix(n, "Create") || strings.HasPrefix(n, "Evict") {
		w.WriteHeader(http.StatusCreated)
	}
	return nil
}

// scaleName is the scale subresource's message.
var scaleName = (&autoscalingv1.Scale{}).ProtoReflect().Descriptor().FullName()

// responseBody is implemented by responses whose HTTP rule names a
// response_body field.
type responseBody interface{ XXX_ResponseBody() any }

// rewrite turns what a method returned into what Kubernetes
// writes: watch events in its framing, lists with items always present,
// Tables when asked, and a Success Status for a delete that left nothing.
func (g *Gateway) rewrite(ctx context.Context, resp proto.Message) (any, error) {
	tab := g.tab
	info := infoFrom(ctx)
	m := resp.ProtoReflect()
	if strings.HasPrefix(string(m.Descriptor().Name()), "Watch") {
		return watchEventOf(tab, g.rendered, m, info)
	}
	rb, ok := resp.(responseBody)
	if !ok {
		return resp, nil
	}
	body, _ := rb.XXX_ResponseBody().(proto.Message)
	if body == nil || !body.ProtoReflect().IsValid() {
		if strings.HasPrefix(string(m.Descriptor().Name()), "Delete") {
			return map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
				"status": "Success", "details": map[string]any{"name": info.name}}, nil
		}
		return nil, status.Error(codes.Internal, "empty response from the API service")
	}
	fn := body.ProtoReflect().Descriptor().FullName()
	res, isList := tab.byList[fn]
	if !isList {
		res = tab.byObject[fn]
	}
	if !isList && info.table && res == nil && fn == scaleName {
		res = tab.scale
	}
	if !isList && (!info.table || res == nil) {
		return body, nil
	}
	b, err := kubejson.Marshal(body)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	if !isList {
		return buildTable(res, []map[string]any{obj}, str(obj, "metadata", "resourceVersion"), info.includeObject, true, time.Now())
	}
	if _, ok := obj["items"]; !ok {
		obj["items"] = []any{}
	}
	if _, ok := obj["metadata"]; !ok {
		obj["metadata"] = map[string]any{}
	}
	if !info.table {
		return obj, nil
	}
	var items []map[string]any
	for _, it := range obj["items"].([]any) {
		if o, ok := it.(map[string]any); ok {
			items = append(items, o)
		}
	}
	t, err := buildTable(res, items, str(obj, "metadata", "resourceVersion"), info.includeObject, true, time.Now())
	if err != nil {
		return nil, err
	}
	if c := str(obj, "metadata", "continue"); c != "" {
		t["metadata"].(map[string]any)["continue"] = c
	}
	return t, nil
}

// watchEventOf renders one Watch<Resource>Response.
func watchEventOf(tab *table, rendered *renderCache, m protoreflect.Message, info *requestInfo) (*watchEvent, error) {
	fields := m.Descriptor().Fields()
	ev := &watchEvent{Type: m.Get(fields.ByName("type")).String()}
	if ev.Type == "ERROR" {
		if fd := fields.ByName("status"); fd != nil && m.Has(fd) {
			b, err := kubejson.Marshal(m.Get(fd).Message().Interface())
			if err != nil {
				return nil, err
			}
			ev.Object = json.RawMessage(withEmptyMetadata(b))
		}
		return ev, nil
	}
	fd := fields.ByName("object")
	if fd == nil || !m.Has(fd) {
		return ev, nil
	}
	obj := m.Get(fd).Message().Interface()
	b, err := rendered.render(obj)
	if err != nil {
		return nil, err
	}
	res := tab.byObject[obj.ProtoReflect().Descriptor().FullName()]
	if !info.table || ev.Type == "BOOKMARK" || res == nil {
		ev.Object = json.RawMessage(b)
		return ev, nil
	}
	var o map[string]any
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, err
	}
	// Like kube-apiserver, only a watch's first Table defines the columns.
	first := !info.tableColumnsSent
	info.tableColumnsSent = true
	if ev.Object, err = buildTable(res, []map[string]any{o}, str(o, "metadata", "resourceVersion"), info.includeObject, first, time.Now()); err != nil {
		return nil, err
	}
	return ev, nil
}

// statusObject renders err as a Kubernetes Status object.
func statusObject(err error) json.RawMessage {
	b, merr := kubejson.Marshal(statusOf(err))
	if merr != nil {
		return json.RawMessage(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure"}`)
	}
	return json.RawMessage(withEmptyMetadata(b))
}
