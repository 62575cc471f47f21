// This file runs the policies on one request: matching, params, evaluation,
// and the decisions turned into a refusal, warnings and audit annotations as
// kube-apiserver's validating policy dispatcher turns them.

package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	arv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	k8serrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/request"
)

// Result is what the policies add to an admitted request.
type Result struct {
	// Warnings go to the client as Warning headers (validationActions Warn).
	Warnings []string
	// Annotations go to the request's audit event: each policy's
	// auditAnnotations as "<policy>/<key>", and validationActions Audit
	// failures as "validation.policy.admission.k8s.io/validation_failure".
	Annotations map[string]string
}

// maxAuditAnnotationValue bounds an audit annotation's value, as Kubernetes.
const maxAuditAnnotationValue = 10 * 1024

// failureAnnotation is the audit annotation of validationActions Audit.
const failureAnnotation = "validation.policy.admission.k8s.io/validation_failure"

// denied is one refusal with the policy and binding it came from.
type denied struct {
	decision validating.PolicyDecision
	policy   *arv1.ValidatingAdmissionPolicy
	binding  *arv1.ValidatingAdmissionPolicyBinding
}

// Validate runs every bound policy that matches a. The first refusal (in
// the order of the policies' and then the bindings' names) is returned as
// Kubernetes words it: `<resource> "<name>" is forbidden:
// ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied
// request: <message>`, with the validation's reason (Invalid, 422, unless
// it names another). Warnings and audit annotations are returned whether or
// not the request is refused.
func (p *Policies) Validate(ctx context.Context, a *request.Admission) (Result, error) {
	res := Result{Annotations: map[string]string{}}
	hooks := p.snapshot()
	if len(hooks) == 0 {
		return res, nil
	}
	attrs, err := p.attributes(a)
	if err != nil {
		return res, apierrors.NewInternalError(err)
	}
	ns := &namespaces{ctx: ctx, p: p}
	matcher := generic.NewPolicyMatcher(matching.NewMatcher(ns, ns.client()))
	oi := admission.NewObjectInterfacesFromScheme(runtime.NewScheme())
	authz := &authorizerAdapter{authorize: p.cfg.Authorize}

	var span trace.Span
	defer func() {
		if span != nil {
			span.End()
		}
	}()
	var refusals []denied
	configError := func(err error, pol *arv1.ValidatingAdmissionPolicy, b *arv1.ValidatingAdmissionPolicyBinding) {
		fp := arv1.Fail
		if pol.Spec.FailurePolicy != nil {
			fp = *pol.Spec.FailurePolicy
		}
		switch fp {
		case arv1.Ignore:
			return
		case arv1.Fail:
			what := "policy"
			if b != nil {
				what = "binding"
			}
			refusals = append(refusals, denied{policy: pol, binding: b, decision: validating.PolicyDecision{
				Action: validating.ActionDeny, Message: fmt.Errorf("failed to configure %s: %w", what, err).Error()}})
		default:
			refusals = append(refusals, denied{policy: pol, binding: b, decision: validating.PolicyDecision{
				Action: validating.ActionDeny, Message: fmt.Sprintf("unrecognized failure policy: '%v'", fp)}})
		}
	}

	for _, h := range hooks {
		pol := h.policy
		ok, matchedResource, matchedKind, err := matcher.DefinitionMatches(attrs, oi, validating.NewValidatingAdmissionPolicyAccessor(pol))
		if err != nil {
			configError(err, pol, nil)
			continue
		}
		if !ok {
			continue
		}
		if span == nil {
			ctx, span = p.tracer.Start(ctx, "admission.policy")
			span.SetAttributes(attribute.String("policy.resource", a.Resource), attribute.String("policy.operation", string(a.Operation)))
		}
		span.AddEvent("policy matched", trace.WithAttributes(attribute.String("policy.name", pol.Name)))
		if h.err != nil {
			configError(h.err, pol, nil)
			continue
		}
		collected := map[string][]string{}
		for _, b := range h.bindings {
			ok, err := matcher.BindingMatches(attrs, oi, validating.NewValidatingAdmissionPolicyBindingAccessor(b))
			if err != nil {
				configError(err, pol, b)
				continue
			}
			if !ok {
				continue
			}
			params, err := p.collectParams(ctx, pol.Spec.ParamKind, b.Spec.ParamRef, a.Namespace)
			if err != nil {
				configError(err, pol, b)
				continue
			}
			versioned, err := admission.NewVersionedAttributes(attrs, matchedKind, oi)
			if err != nil {
				configError(fmt.Errorf("failed to convert object version: %w", err), pol, b)
				continue
			}
			var nsObj *corev1.Namespace
			if a.Namespace != "" && !(a.APIGroup == "" && a.Resource == "namespaces") {
				if nsObj, err = ns.GetNamespace(a.Namespace); err != nil {
					return res, apierrors.FromError(statusErr(err))
				}
			}
			for _, param := range params {
				r := h.validator.Validate(ctx, matchedResource, versioned, param, nsObj, celconfig.RuntimeCELCostBudget, authz)
				for i, d := range r.Decisions {
					switch d.Action {
					case validating.ActionAdmit:
					case validating.ActionDeny:
						for _, action := range b.Spec.ValidationActions {
							switch action {
							case arv1.Deny:
								refusals = append(refusals, denied{decision: d, policy: pol, binding: b})
							case arv1.Warn:
								res.Warnings = append(res.Warnings, fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s", pol.Name, b.Name, d.Message))
							case arv1.Audit:
								v, _ := json.Marshal([]validating.ValidationFailureValue{{ExpressionIndex: i, Message: d.Message,
									ValidationActions: b.Spec.ValidationActions, Binding: b.Name, Policy: b.Spec.PolicyName}})
								res.Annotations[failureAnnotation] = string(v)
							}
						}
					default:
						return res, apierrors.NewInternalError(fmt.Errorf("unrecognized evaluation decision '%s' for ValidatingAdmissionPolicyBinding '%s' with ValidatingAdmissionPolicy '%s'", d.Action, b.Name, pol.Name))
					}
				}
				for _, an := range r.AuditAnnotations {
					switch an.Action {
					case validating.AuditAnnotationActionPublish:
						v := an.Value
						if len(v) > maxAuditAnnotationValue {
							v = v[:maxAuditAnnotationValue]
						}
						if !contains(collected[an.Key], v) {
							collected[an.Key] = append(collected[an.Key], v)
						}
					case validating.AuditAnnotationActionError:
						refusals = append(refusals, denied{policy: pol, binding: b, decision: validating.PolicyDecision{
							Action: validating.ActionDeny, Evaluation: validating.EvalError, Message: an.Error}})
					case validating.AuditAnnotationActionExclude:
					}
				}
			}
		}
		for k, vs := range collected {
			res.Annotations[pol.Name+"/"+k] = strings.Join(vs, ", ")
		}
	}
	if span != nil {
		span.SetAttributes(attribute.Int("policy.refusals", len(refusals)), attribute.Int("policy.warnings", len(res.Warnings)))
	}
	if len(refusals) == 0 {
		return res, nil
	}
	err = refusal(a, attrs, refusals[0])
	if span != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return res, err
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

// refusal is Kubernetes' error for a denied request.
func refusal(a *request.Admission, attrs admission.Attributes, d denied) *apierrors.StatusError {
	var msg string
	if d.binding != nil {
		msg = fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", d.policy.Name, d.binding.Name, d.decision.Message)
	} else {
		msg = fmt.Sprintf("ValidatingAdmissionPolicy '%s' denied request: %s", d.policy.Name, d.decision.Message)
	}
	// Kubernetes names the group-resource only (pods, not pods/status).
	e := apierrors.NewForbidden(a.APIGroup, a.Resource, objectName(a, attrs), msg)
	reason := apierrors.Reason(d.decision.Reason)
	if reason == "" {
		reason = apierrors.ReasonInvalid
	}
	e.Reason = reason
	e.Code = apierrors.HTTPCode(reason)
	if e.Code == 0 {
		e.Code = 500
	}
	e.Causes = []apierrors.Cause{{Message: msg}}
	return e
}

// objectName is the name Kubernetes' admission errors give: the request's,
// else the object's name or generateName, else "Unknown".
func objectName(a *request.Admission, attrs admission.Attributes) string {
	if a.Name != "" {
		return a.Name
	}
	if u, ok := attrs.GetObject().(*unstructured.Unstructured); ok && u != nil {
		if u.GetName() != "" {
			return u.GetName()
		}
		if u.GetGenerateName() != "" {
			return u.GetGenerateName()
		}
	}
	return "Unknown"
}

// attributes is the request in Kubernetes' admission terms; objects are
// their Kubernetes JSON as unstructured objects.
func (p *Policies) attributes(a *request.Admission) (admission.Attributes, error) {
	obj, err := unstructuredOf(a.Object)
	if err != nil {
		return nil, err
	}
	old, err := unstructuredOf(a.OldObject)
	if err != nil {
		return nil, err
	}
	var gvk schema.GroupVersionKind
	for _, u := range []*unstructured.Unstructured{obj, old} {
		if u != nil {
			gvk = u.GroupVersionKind()
			break
		}
	}
	var objRT, oldRT runtime.Object
	if obj != nil {
		objRT = obj
	}
	if old != nil {
		oldRT = old
	}
	name := a.Name
	if name == "" && obj != nil {
		name = obj.GetName()
	}
	u := a.User
	info := &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}
	var opts runtime.Object
	switch a.Operation {
	case request.Create:
		opts = &metav1.CreateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "CreateOptions"}}
	case request.Update:
		opts = &metav1.UpdateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "UpdateOptions"}}
	case request.Delete:
		opts = &metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "DeleteOptions"}}
	}
	version := a.APIVersion
	if version == "" {
		version = "v1"
	}
	return admission.NewAttributesRecord(objRT, oldRT, gvk, a.Namespace, name,
		schema.GroupVersionResource{Group: a.APIGroup, Version: version, Resource: a.Resource}, a.Subresource,
		admission.Operation(a.Operation), opts, a.DryRun, info), nil
}

// unstructuredOf is m's Kubernetes JSON as an unstructured object (nil for
// nil).
func unstructuredOf(m proto.Message) (*unstructured.Unstructured, error) {
	if m == nil || !m.ProtoReflect().IsValid() {
		return nil, nil
	}
	b, err := kubejson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("policy: encode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("policy: decode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return u, nil
}

// collectParams finds a binding's params as Kubernetes does: none needed
// without paramKind or paramRef (one nil param); by name or by selector in
// the request's namespace (or paramRef.namespace) for a namespaced kind; an
// empty result is an error under parameterNotFoundAction Deny and no
// evaluation under Allow.
func (p *Policies) collectParams(ctx context.Context, kind *arv1.ParamKind, ref *arv1.ParamRef, namespace string) ([]runtime.Object, error) {
	if kind == nil || ref == nil {
		return []runtime.Object{nil}, nil
	}
	var namespaced, ok bool
	if p.cfg.Params != nil {
		namespaced, ok = p.cfg.Params.Scope(kind.APIVersion, kind.Kind)
	}
	if !ok {
		return nil, fmt.Errorf("failed to find resource referenced by paramKind: '%s, Kind=%s'", kind.APIVersion, kind.Kind)
	}
	ns := ""
	if namespaced {
		ns = namespace
		if ref.Namespace != "" {
			ns = ref.Namespace
		} else if ns == "" {
			return nil, errors.New("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources")
		}
	} else if ref.Namespace != "" {
		return nil, errors.New("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
	}
	var match func(map[string]string) bool
	switch {
	case ref.Name != "":
		if ref.Selector != nil {
			return nil, errors.New("paramRef.name and paramRef.selector are mutually exclusive")
		}
	case ref.Selector != nil:
		sel, err := metav1.LabelSelectorAsSelector(ref.Selector)
		if err != nil {
			return nil, err
		}
		match = func(l map[string]string) bool { return sel.Matches(labels.Set(l)) }
	default:
		return nil, errors.New("one of name or selector must be provided")
	}
	found, err := p.cfg.Params.Params(ctx, kind.APIVersion, kind.Kind, ns, ref.Name, match)
	if err != nil {
		return nil, err
	}
	params := make([]runtime.Object, 0, len(found))
	for _, m := range found {
		u, err := unstructuredOf(m)
		if err != nil {
			return nil, err
		}
		params = append(params, u)
	}
	if len(params) == 0 && ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == arv1.DenyAction {
		return nil, errors.New("no params found for policy binding with `Deny` parameterNotFoundAction")
	}
	return params, nil
}

// statusErr turns a Kubernetes API error back into kplane's.
func statusErr(err error) error {
	var se *k8serrors.StatusError
	if errors.As(err, &se) {
		st := se.Status()
		return &apierrors.StatusError{Reason: apierrors.Reason(st.Reason), Code: st.Code, Message: st.Message}
	}
	return err
}
