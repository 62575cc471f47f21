// Package podsecurity is kube-apiserver's PodSecurity admission plugin for
// kplane: the Pod Security Standards, as the namespace labels
// pod-security.kubernetes.io/{enforce,audit,warn}[-version] ask, checked by
// k8s.io/pod-security-admission (the library Kubernetes' plugin wraps), on
// pods, on the kinds with a pod template (warn and audit only) and on
// namespaces (label validity, and warnings about the pods a stricter
// enforce level would refuse).
package podsecurity

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"
	k8scorev1 "k8s.io/api/core/v1"
	k8smetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	psaadmission "k8s.io/pod-security-admission/admission"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// Cluster is what the plugin reads besides the request, from the API
// service's watch caches. Objects returned are shared: not to be changed.
type Cluster interface {
	// Namespace returns the named namespace, or a NotFound error.
	Namespace(ctx context.Context, name string) (*corev1.Namespace, error)
	// Pods returns the pods of a namespace.
	Pods(ctx context.Context, namespace string) ([]*corev1.Pod, error)
}

// Result is what an admitted request takes back: warnings for the client
// (Warning headers) and annotations for its audit event, already prefixed
// pod-security.kubernetes.io/.
type Result struct {
	Warnings    []string
	Annotations map[string]string
}

// Plugin is the PodSecurity admission plugin. It is safe for concurrent
// use.
type Plugin struct {
	delegate *psaadmission.Admission
}

// New builds the plugin from its configuration (nil: the defaults,
// privileged everywhere); a configuration the library finds invalid is an
// error.
func New(cfg *Configuration, cluster Cluster, mp metric.MeterProvider) (*Plugin, error) {
	if cfg == nil {
		var err error
		if cfg, err = loadFrom(nil); err != nil {
			return nil, err
		}
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks())
	if err != nil {
		return nil, fmt.Errorf("podsecurity: checks: %w", err)
	}
	rec, err := newRecorder(mp)
	if err != nil {
		return nil, err
	}
	d := &psaadmission.Admission{
		Configuration:    cfg,
		Evaluator:        evaluator,
		Metrics:          rec,
		PodSpecExtractor: psaadmission.DefaultPodSpecExtractor{},
		NamespaceGetter:  namespaceGetter{cluster},
		PodLister:        podLister{cluster},
	}
	if err := d.CompleteConfiguration(); err != nil {
		return nil, fmt.Errorf("podsecurity: configuration: %w", err)
	}
	if err := d.ValidateConfiguration(); err != nil {
		return nil, fmt.Errorf("podsecurity: invalid configuration: %w", err)
	}
	return &Plugin{delegate: d}, nil
}

// Applies says whether the plugin looks at a request: creates and updates
// of pods, namespaces and the kinds with a pod template, as Kubernetes'
// plugin.
func (p *Plugin) Applies(a *request.Admission) bool {
	if a.Operation != request.Create && a.Operation != request.Update {
		return false
	}
	gr := schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}
	if gr.Group == "" && (gr.Resource == "pods" || gr.Resource == "namespaces") {
		return true
	}
	return p.delegate.PodSpecExtractor.HasPodSpec(gr)
}

// Validate checks one request the plugin applies to. A refusal is a
// *apierrors.StatusError with the library's reason, message and details
// (403 for a pod that violates the enforce level, 422 for invalid labels on
// a namespace); the Result is returned either way.
//
// A pod in a namespace whose policy is privileged on all three modes
// costs a watch-cache lookup: the pod itself is converted to its
// k8s.io/api type only when a check has to read it.
func (p *Plugin) Validate(ctx context.Context, a *request.Admission) (Result, error) {
	resp := p.delegate.Validate(ctx, newAttributes(a))
	var res Result
	res.Warnings = resp.Warnings
	if len(resp.AuditAnnotations) > 0 {
		res.Annotations = make(map[string]string, len(resp.AuditAnnotations))
		for k, v := range resp.AuditAnnotations {
			res.Annotations[psaapi.AuditAnnotationPrefix+k] = v
		}
	}
	if resp.Allowed {
		return res, nil
	}
	return res, statusError(a, resp.Result)
}

// statusError turns the library's refusal into kplane's error, keeping its
// reason, code, message and causes; with none, a generic Forbidden as
// Kubernetes' plugin gives.
func statusError(a *request.Admission, st *k8smetav1.Status) *apierrors.StatusError {
	e := apierrors.NewForbidden(a.APIGroup, a.Resource, a.Name, "Not allowed by PodSecurity")
	if st == nil {
		return e
	}
	if st.Message != "" {
		e.Message = st.Message
	}
	if st.Reason != "" {
		e.Reason = apierrors.Reason(st.Reason)
	}
	if st.Code != 0 {
		e.Code = st.Code
	}
	if d := st.Details; d != nil {
		e.Group, e.Kind, e.Name = d.Group, d.Kind, d.Name
		for _, c := range d.Causes {
			e.Causes = append(e.Causes, apierrors.Cause{Type: string(c.Type), Message: c.Message, Field: c.Field})
		}
	}
	return e
}

// namespaceGetter gives the library a namespace's name and labels, all it
// reads of it, without converting the stored object.
type namespaceGetter struct{ c Cluster }

func (g namespaceGetter) GetNamespace(ctx context.Context, name string) (*k8scorev1.Namespace, error) {
	ns, err := g.c.Namespace(ctx, name)
	if err != nil {
		return nil, err
	}
	m := ns.GetMetadata()
	return &k8scorev1.Namespace{ObjectMeta: k8smetav1.ObjectMeta{Name: m.GetName(), Labels: m.GetLabels()}}, nil
}

// podLister converts a namespace's pods for the library's check of a
// stricter enforce level.
type podLister struct{ c Cluster }

func (l podLister) ListPods(ctx context.Context, namespace string) ([]*k8scorev1.Pod, error) {
	pods, err := l.c.Pods(ctx, namespace)
	if err != nil {
		return nil, err
	}
	out := make([]*k8scorev1.Pod, 0, len(pods))
	for _, p := range pods {
		o, err := toK8s(p)
		if err != nil {
			return nil, err
		}
		out = append(out, o.(*k8scorev1.Pod))
	}
	return out, nil
}
