// This file wires ValidatingAdmissionPolicies into the API service: their
// defaults, their validation (the policy package compiles every CEL
// expression), the watch-fed cache every replica enforces from, and the
// params any served kind may provide.

package apiserver

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kplane/kplane/proto/apierrors"
	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/policy"
	"github.com/kplane/kplane/services/apiserver/request"
)

// newPolicies builds the policy enforcer on the service's own caches and
// authorizer, and registers it to be fed the policies and bindings.
func (s *Server) newPolicies() *policy.Policies {
	p := policy.New(policy.Config{
		Logger:         s.log,
		TracerProvider: s.cfg.TracerProvider,
		Authorize:      s.cfg.Authorizer.Authorize,
		Namespace: func(ctx context.Context, name string) (proto.Message, error) {
			return s.cachedOrStored(ctx, s.resources["namespaces"], "", name)
		},
		Params: paramSource{s: s},
	})
	informers := make(map[string][]ObjectSink, len(s.cfg.Informers)+2)
	for k, v := range s.cfg.Informers {
		informers[k] = v
	}
	for _, res := range []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
		// Clipped: the caller's slice is never appended to in place.
		informers[res] = append(slices.Clip(informers[res]), p)
	}
	s.cfg.Informers = informers
	return p
}

// typeChecker builds the policy type checker over the served kinds.
func (s *Server) typeChecker() *policy.TypeChecker {
	kinds := make([]policy.Kind, 0, len(s.resources))
	for _, r := range s.resources {
		kinds = append(kinds, policy.Kind{GVK: schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind},
			Resource: r.Resource, Namespaced: r.Namespaced, Message: r.New().ProtoReflect().Descriptor()})
	}
	return policy.NewTypeChecker(kinds)
}

// typeCheckPolicy writes a policy's status as kube-controller-manager's
// policy status controller does once it sees a new generation:
// observedGeneration and status.typeChecking, the warnings of
// k8s.io/apiserver's TypeChecker on the expressions (validations and their
// messageExpressions) against the kinds the policy matches. kplane writes
// it with the write of the policy itself rather than moments after. Other
// objects are left as they are.
func (s *Server) typeCheckPolicy(obj proto.Message) error {
	pol, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if !ok {
		return nil
	}
	gen := meta(pol).GetGeneration()
	if pol.Status != nil && pol.Status.ObservedGeneration >= gen && gen > 1 {
		return nil
	}
	warnings, err := s.typeCheck.Check(pol)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	st := &admissionregistrationv1.ValidatingAdmissionPolicyStatus{ObservedGeneration: gen, TypeChecking: &admissionregistrationv1.TypeChecking{}}
	for _, w := range warnings {
		st.TypeChecking.ExpressionWarnings = append(st.TypeChecking.ExpressionWarnings,
			&admissionregistrationv1.ExpressionWarning{FieldRef: w.FieldRef, Warning: w.Warning})
	}
	if pol.Status != nil {
		st.Conditions = pol.Status.Conditions
	}
	pol.Status = st
	return nil
}

// cachedOrStored returns an object from the watch cache, or from the store
// when the cache does not have it (yet).
func (s *Server) cachedOrStored(ctx context.Context, r *resourceInfo, ns, name string) (proto.Message, error) {
	c := s.cachers[r.Resource]
	c.mu.Lock()
	obj, ok := c.state[s.store.key(r, ns, name)]
	c.mu.Unlock()
	if ok {
		return obj, nil
	}
	return s.store.get(ctx, r, ns, name)
}

// admitPolicies runs the ValidatingAdmissionPolicies on a write: their
// warnings go to the client as Warning headers, their audit annotations to
// the request's audit event, and a refusal is returned.
func (s *Server) admitPolicies(ctx context.Context, c *call, a *request.Admission) error {
	res, err := s.policies.Validate(ctx, a)
	for _, w := range res.Warnings {
		_ = grpc.SetHeader(ctx, metadata.Pairs(apierrors.WarningHeader, apierrors.WarningValue(w)))
	}
	if len(res.Annotations) > 0 {
		if c.ev.Annotations == nil {
			c.ev.Annotations = map[string]string{}
		}
		for k, v := range res.Annotations {
			c.ev.Annotations[k] = v
		}
	}
	return err
}

// validatePolicyObject adds the policy package's checks of a policy's or
// binding's spec to the metadata's; a well-formed one is then authorized as
// Kubernetes' strategies do (paramAccess).
func (s *Server) validatePolicyObject(ctx context.Context, c *call, r *resourceInfo, obj, old proto.Message) error {
	errs := validateObjectErrs(r, obj, old)
	var more field.ErrorList
	var err error
	switch obj.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		more, err = s.policies.ValidatePolicy(obj, old)
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		more, err = s.policies.ValidateBinding(obj)
	}
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	errs = append(errs, more...)
	if len(errs) == 0 {
		if errs, err = s.paramAccess(ctx, c.attrs.User, obj, old); err != nil {
			return apierrors.NewInternalError(err)
		}
	}
	return invalid(r, meta(obj).GetName(), errs)
}

// paramAccess refuses, as kube-apiserver's strategies do, a policy whose
// paramKind its writer may not "get" (every object of that kind), and a
// binding whose paramRef its writer may not "get" (by name) or "list" (by
// selector); members of system:masters are not checked, nor an update that
// keeps the paramKind (the paramRef and policyName).
func (s *Server) paramAccess(ctx context.Context, u request.User, obj, old proto.Message) (field.ErrorList, error) {
	for _, g := range u.Groups {
		if g == request.MastersGroup {
			return nil, nil
		}
	}
	who := fmt.Sprintf("%v", &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra})
	switch o := obj.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		kind := o.GetSpec().GetParamKind()
		if kind == nil {
			return nil, nil
		}
		if old != nil && proto.Equal(kind, old.(*admissionregistrationv1.ValidatingAdmissionPolicy).GetSpec().GetParamKind()) {
			return nil, nil
		}
		a := s.paramAttributes(u, "get", kind.GetApiVersion(), kind.GetKind())
		a.Name, a.Namespace = "*", "*"
		d, err := s.cfg.Authorizer.Authorize(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("authorizer: %w", err)
		}
		if !d.Allowed {
			return field.ErrorList{field.Forbidden(field.NewPath("spec", "paramKind"), fmt.Sprintf(
				`user %v must have "get" permission on all objects of the referenced paramKind (kind=%s, apiVersion=%s)`, who, kind.GetKind(), kind.GetApiVersion()))}, nil
		}
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		ref := o.GetSpec().GetParamRef()
		if ref == nil {
			return nil, nil
		}
		if ob, ok := old.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding); ok &&
			proto.Equal(ref, ob.GetSpec().GetParamRef()) && o.GetSpec().GetPolicyName() == ob.GetSpec().GetPolicyName() {
			return nil, nil
		}
		verb := "get"
		if ref.GetName() == "" {
			verb = "list"
		}
		a := request.Attributes{User: u, Verb: verb, APIGroup: "*", APIVersion: "*", Resource: "*"}
		pol, err := s.cachedOrStored(ctx, s.resources["validatingadmissionpolicies"], "", o.GetSpec().GetPolicyName())
		var why string
		switch {
		case err != nil:
			why = fmt.Sprintf(`unable to get policy %s to determine minimum required permissions and user %v does not have "%v" permission for all groups, versions and resources`, o.GetSpec().GetPolicyName(), who, verb)
		case pol.(*admissionregistrationv1.ValidatingAdmissionPolicy).GetSpec().GetParamKind() != nil:
			kind := pol.(*admissionregistrationv1.ValidatingAdmissionPolicy).GetSpec().GetParamKind()
			a = s.paramAttributes(u, verb, kind.GetApiVersion(), kind.GetKind())
		}
		a.Name, a.Namespace = ref.GetName(), ref.GetNamespace()
		d, err := s.cfg.Authorizer.Authorize(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("authorizer: %w", err)
		}
		if !d.Allowed {
			if why == "" {
				why = fmt.Sprintf(`user %v does not have "%v" permission on the object referenced by paramRef`, who, verb)
			}
			return field.ErrorList{field.Forbidden(field.NewPath("spec", "paramRef"), why)}, nil
		}
	}
	return nil, nil
}

// paramAttributes are the attributes of reading a paramKind: its group,
// version and (when served) resource, else "*".
func (s *Server) paramAttributes(u request.User, verb, apiVersion, kind string) request.Attributes {
	a := request.Attributes{User: u, Verb: verb, APIGroup: "*", APIVersion: "*", Resource: "*"}
	if gv, err := schema.ParseGroupVersion(apiVersion); err == nil {
		a.APIGroup, a.APIVersion = gv.Group, gv.Version
		if r := (paramSource{s: s}).resource(apiVersion, kind); r != nil {
			a.Resource = r.Resource
		}
	}
	return a
}

// defaultPolicyObject sets a policy's or binding's defaults as Kubernetes'
// admissionregistration/v1 defaulting does: failurePolicy Fail; in match
// resources, matchPolicy Equivalent, empty namespace and object selectors,
// and rules' scope "*".
func defaultPolicyObject(obj proto.Message) {
	switch o := obj.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		if o.Spec == nil {
			o.Spec = &admissionregistrationv1.ValidatingAdmissionPolicySpec{}
		}
		if o.Spec.FailurePolicy == nil {
			o.Spec.FailurePolicy = proto.String("Fail")
		}
		defaultMatchResources(o.Spec.MatchConstraints)
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		if o.Spec == nil {
			o.Spec = &admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{}
		}
		defaultMatchResources(o.Spec.MatchResources)
	}
}

func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		m.MatchPolicy = proto.String("Equivalent")
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]*admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for _, r := range rules {
			if r.RuleWithOperations == nil {
				r.RuleWithOperations = &admissionregistrationv1.RuleWithOperations{}
			}
			if r.RuleWithOperations.Rule == nil {
				r.RuleWithOperations.Rule = &admissionregistrationv1.Rule{}
			}
			if r.RuleWithOperations.Rule.Scope == nil {
				r.RuleWithOperations.Rule.Scope = proto.String("*")
			}
		}
	}
}

// paramSource finds params in the service's watch caches: any served kind.
type paramSource struct{ s *Server }

var _ policy.ParamSource = paramSource{}

func (p paramSource) resource(apiVersion, kind string) *resourceInfo {
	for _, r := range p.s.resources {
		if r.Kind == kind && r.APIVersion() == apiVersion {
			return r
		}
	}
	return nil
}

// Scope says whether apiVersion/kind is served and whether it is namespaced.
func (p paramSource) Scope(apiVersion, kind string) (namespaced, ok bool) {
	r := p.resource(apiVersion, kind)
	if r == nil {
		return false, false
	}
	return r.Namespaced, true
}

// Params reads the params from the kind's watch cache, once it has its first
// list (as Kubernetes waits for the param informer's sync); a selector's
// matches come by name.
func (p paramSource) Params(ctx context.Context, apiVersion, kind, ns, name string, selector func(map[string]string) bool) ([]proto.Message, error) {
	r := p.resource(apiVersion, kind)
	c := p.s.cachers[r.Resource]
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if name != "" {
		if obj, ok := c.state[p.s.store.key(r, ns, name)]; ok {
			return []proto.Message{obj}, nil
		}
		return nil, nil
	}
	var out []proto.Message
	for _, obj := range c.state {
		m := meta(obj)
		if m.GetNamespace() == ns && selector(m.GetLabels()) {
			out = append(out, obj)
		}
	}
	// By name, so that the first refusal does not depend on map order.
	sort.Slice(out, func(i, j int) bool { return meta(out[i]).GetName() < meta(out[j]).GetName() })
	return out, nil
}
