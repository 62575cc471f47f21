// This file holds the plugin's metrics: Kubernetes' pod_security_evaluations,
// pod_security_exemptions and pod_security_errors counters, with the same
// labels, as OpenTelemetry counters.

package podsecurity

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	psaapi "k8s.io/pod-security-admission/api"
	psametrics "k8s.io/pod-security-admission/metrics"
)

// recorder implements the library's metrics.Recorder.
type recorder struct {
	evaluations, exemptions, errors metric.Int64Counter
}

var _ psametrics.Recorder = (*recorder)(nil)

func newRecorder(mp metric.MeterProvider) (*recorder, error) {
	m := mp.Meter("github.com/kplane/kplane/services/apiserver/podsecurity")
	var r recorder
	var err error
	if r.evaluations, err = m.Int64Counter("pod_security_evaluations", metric.WithDescription("Policy evaluations by the PodSecurity admission plugin.")); err != nil {
		return nil, fmt.Errorf("podsecurity: metrics: %w", err)
	}
	if r.exemptions, err = m.Int64Counter("pod_security_exemptions", metric.WithDescription("Requests exempt from Pod Security checks.")); err != nil {
		return nil, fmt.Errorf("podsecurity: metrics: %w", err)
	}
	if r.errors, err = m.Int64Counter("pod_security_errors", metric.WithDescription("Errors that prevented a Pod Security evaluation.")); err != nil {
		return nil, fmt.Errorf("podsecurity: metrics: %w", err)
	}
	return &r, nil
}

func (r *recorder) RecordEvaluation(d psametrics.Decision, lv psaapi.LevelVersion, mode psametrics.Mode, attrs psaapi.Attributes) {
	// Privileged is the same at every version; a version newer than the
	// library's is "future", as Kubernetes labels them.
	version := "latest"
	if !lv.Version.Latest() && lv.Level != psaapi.LevelPrivileged {
		version = lv.Version.String()
		if api := psaapi.GetAPIVersion(); api.Older(lv.Version) {
			version = "future"
		}
	}
	r.evaluations.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("decision", string(d)),
		attribute.String("policy_level", string(lv.Level)),
		attribute.String("policy_version", version),
		attribute.String("mode", string(mode)),
		attribute.String("request_operation", operationLabel(attrs.GetOperation())),
		attribute.String("resource", resourceLabel(attrs.GetResource())),
		attribute.String("subresource", attrs.GetSubresource()),
	))
}

func (r *recorder) RecordExemption(attrs psaapi.Attributes) {
	r.exemptions.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("request_operation", operationLabel(attrs.GetOperation())),
		attribute.String("resource", resourceLabel(attrs.GetResource())),
		attribute.String("subresource", attrs.GetSubresource()),
	))
}

func (r *recorder) RecordError(fatal bool, attrs psaapi.Attributes) {
	r.errors.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("fatal", strconv.FormatBool(fatal)),
		attribute.String("request_operation", operationLabel(attrs.GetOperation())),
		attribute.String("resource", resourceLabel(attrs.GetResource())),
		attribute.String("subresource", attrs.GetSubresource()),
	))
}

// resourceLabel: pod, namespace, or controller for the kinds with a pod
// template.
func resourceLabel(r schema.GroupVersionResource) string {
	if r.Group == "" {
		switch r.Resource {
		case "pods":
			return "pod"
		case "namespaces":
			return "namespace"
		}
	}
	return "controller"
}

func operationLabel(op admissionv1.Operation) string {
	return strings.ToLower(string(op))
}
