// This file validates ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
// specs as kube-apiserver v1.33 does: required fields, match resources and
// rules, validationActions, paramKind and paramRef, and every CEL expression
// compiled with Kubernetes' compiler, its errors reported with its messages
// at the expression's path.

package policy

import (
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"
	arv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	internal "github.com/kplane/kplane/services/apiserver/policy/internal/admissionregistration"
)

// ValidatePolicy returns the violations of a policy's spec (kplane's proto
// or Kubernetes' type). old is the stored policy on update (nil on create):
// its expressions are compiled as stored expressions, as Kubernetes does so
// that an upgrade never refuses what was accepted.
func (p *Policies) ValidatePolicy(obj, old proto.Message) (field.ErrorList, error) {
	pol := &arv1.ValidatingAdmissionPolicy{}
	if err := convert(obj, pol); err != nil {
		return nil, err
	}
	stored := sets.New[string]()
	if old != nil {
		o := &arv1.ValidatingAdmissionPolicy{}
		if err := convert(old, o); err != nil {
			return nil, err
		}
		for _, v := range o.Spec.Validations {
			stored.Insert(v.Expression, v.MessageExpression)
		}
		for _, v := range o.Spec.Variables {
			stored.Insert(v.Expression)
		}
		for _, v := range o.Spec.AuditAnnotations {
			stored.Insert(v.ValueExpression)
		}
		for _, v := range o.Spec.MatchConditions {
			stored.Insert(v.Expression)
		}
	}
	return p.validateSpec(pol, stored), nil
}

// ValidateBinding returns the violations of a binding's spec.
func (p *Policies) ValidateBinding(obj proto.Message) (field.ErrorList, error) {
	b := &arv1.ValidatingAdmissionPolicyBinding{}
	if err := convert(obj, b); err != nil {
		return nil, err
	}
	s, path := b.Spec, field.NewPath("spec")
	var errs field.ErrorList
	if s.PolicyName == "" {
		errs = append(errs, field.Required(path.Child("policyName"), ""))
	} else {
		for _, msg := range utilvalidation.IsDNS1123Subdomain(s.PolicyName) {
			errs = append(errs, field.Invalid(path.Child("policyName"), s.PolicyName, msg))
		}
	}
	errs = append(errs, validateParamRef(s.ParamRef, path.Child("paramRef"))...)
	errs = append(errs, validateMatchResources(s.MatchResources, path.Child("matchResources"))...)
	errs = append(errs, validateActions(s.ValidationActions, path.Child("validationActions"))...)
	return errs, nil
}

var (
	failurePolicies  = sets.New(string(arv1.Ignore), string(arv1.Fail))
	matchPolicies    = sets.New(string(arv1.Exact), string(arv1.Equivalent))
	operations       = sets.New(string(arv1.OperationAll), string(arv1.Create), string(arv1.Update), string(arv1.Delete), string(arv1.Connect))
	scopes           = sets.New(string(arv1.ClusterScope), string(arv1.NamespacedScope), string(arv1.AllScopes))
	actions          = sets.New(string(arv1.Deny), string(arv1.Warn), string(arv1.Audit))
	validationReason = sets.New(string(metav1.StatusReasonForbidden), string(metav1.StatusReasonInvalid), string(metav1.StatusReasonRequestEntityTooLarge))
	celIdentifier    = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)
	celReserved      = sets.New("true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function",
		"if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while")
	lineBreaks = regexp.MustCompile(`[\n\r]+`)
)

// maxAuditAnnotations and maxValueExpression are Kubernetes' limits.
const (
	maxAuditAnnotations = 20
	maxValueExpression  = 5 * 1024
)

func (p *Policies) validateSpec(pol *arv1.ValidatingAdmissionPolicy, stored sets.Set[string]) field.ErrorList {
	s, path := pol.Spec, field.NewPath("spec")
	var errs field.ErrorList
	envType := func(expr string) environment.Type {
		if stored.Has(expr) {
			return environment.StoredExpressions
		}
		return environment.NewExpressions
	}
	// Variables need a compiler that keeps them; without variables the
	// stateless one does.
	p.env()
	var compiler plugincel.Compiler = p.stateless
	var composited *plugincel.CompositedCompiler
	if len(s.Variables) > 0 {
		c, err := plugincel.NewCompositedCompiler(p.env())
		if err != nil {
			return field.ErrorList{field.InternalError(path, fmt.Errorf("building the CEL environment: %w", err))}
		}
		compiler, composited = c, c
	}
	if s.FailurePolicy == nil {
		errs = append(errs, field.Required(path.Child("failurePolicy"), ""))
	} else if !failurePolicies.Has(string(*s.FailurePolicy)) {
		errs = append(errs, field.NotSupported(path.Child("failurePolicy"), *s.FailurePolicy, sets.List(failurePolicies)))
	}
	hasParams := s.ParamKind != nil
	if hasParams {
		errs = append(errs, validateParamKind(*s.ParamKind, path.Child("paramKind"))...)
	}
	if s.MatchConstraints == nil {
		errs = append(errs, field.Required(path.Child("matchConstraints"), ""))
	} else {
		errs = append(errs, validateMatchResources(s.MatchConstraints, path.Child("matchConstraints"))...)
		if len(s.MatchConstraints.ResourceRules) == 0 {
			errs = append(errs, field.Required(path.Child("matchConstraints", "resourceRules"), ""))
		}
	}
	decls := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true, StrictCost: true}
	// Match conditions.
	mcPath := path.Child("matchConditions")
	if len(s.MatchConditions) > 64 {
		errs = append(errs, field.TooMany(mcPath, len(s.MatchConditions), 64))
	}
	names := sets.New[string]()
	for i, mc := range s.MatchConditions {
		ip := mcPath.Index(i)
		if expr := strings.TrimSpace(mc.Expression); expr == "" {
			errs = append(errs, field.Required(ip.Child("expression"), ""))
		} else {
			errs = append(errs, compileErr(p.stateless, &matchconditions.MatchCondition{Expression: expr}, decls, envType(expr), ip.Child("expression"))...)
		}
		if mc.Name == "" {
			errs = append(errs, field.Required(ip.Child("name"), ""))
		} else {
			for _, msg := range utilvalidation.IsQualifiedName(mc.Name) {
				errs = append(errs, field.Invalid(ip.Child("name"), mc.Name, msg))
			}
			if names.Has(mc.Name) {
				errs = append(errs, field.Duplicate(ip.Child("name"), mc.Name))
			}
			names.Insert(mc.Name)
		}
	}
	// Variables, compiled in order so each sees those before it.
	for i, v := range s.Variables {
		ip := path.Child("variables").Index(i)
		if strings.TrimSpace(v.Name) == "" {
			errs = append(errs, field.Required(ip.Child("name"), "name is not specified"))
		} else if !celIdentifier.MatchString(v.Name) || celReserved.Has(v.Name) {
			errs = append(errs, field.Invalid(ip.Child("name"), v.Name, "name is not a valid CEL identifier"))
		}
		if strings.TrimSpace(v.Expression) == "" {
			errs = append(errs, field.Required(ip.Child("expression"), "expression is not specified"))
			continue
		}
		variable := &validating.Variable{Name: v.Name, Expression: v.Expression}
		if r := composited.CompileAndStoreVariable(variable, decls, envType(v.Expression)); r.Error != nil {
			errs = append(errs, celError(ip.Child("expression"), v.Expression, r.Error))
		}
	}
	if len(s.Validations) == 0 && len(s.AuditAnnotations) == 0 {
		errs = append(errs, field.Required(path.Child("validations"), "validations or auditAnnotations must contain at least one item"))
		errs = append(errs, field.Required(path.Child("auditAnnotations"), "validations or auditAnnotations must contain at least one item"))
		return errs
	}
	for i, v := range s.Validations {
		errs = append(errs, validateValidation(compiler, v, hasParams, envType, path.Child("validations").Index(i))...)
	}
	if len(s.AuditAnnotations) > maxAuditAnnotations {
		errs = append(errs, field.Invalid(path.Child("auditAnnotations"), s.AuditAnnotations, fmt.Sprintf("must not have more than %d auditAnnotations", maxAuditAnnotations)))
	}
	keys := sets.New[string]()
	for i, a := range s.AuditAnnotations {
		ip := path.Child("auditAnnotations").Index(i)
		if pol.Name != "" {
			for _, msg := range utilvalidation.IsQualifiedName(pol.Name + "/" + a.Key) {
				errs = append(errs, field.Invalid(ip.Child("key"), pol.Name+"/"+a.Key, msg))
			}
		} else {
			errs = append(errs, field.Invalid(ip.Child("key"), a.Key, "requires metadata.name be non-empty"))
		}
		expr := strings.TrimSpace(a.ValueExpression)
		switch {
		case expr == "":
			errs = append(errs, field.Required(ip.Child("valueExpression"), "valueExpression is not specified"))
		case len(expr) > maxValueExpression:
			errs = append(errs, field.Required(ip.Child("valueExpression"), fmt.Sprintf("must not exceed %d bytes in length", maxValueExpression)))
		default:
			r := compiler.CompileCELExpression(&validating.AuditAnnotationCondition{ValueExpression: expr}, decls, envType(a.ValueExpression))
			if r.Error != nil {
				errs = append(errs, celError(ip.Child("valueExpression"), a.ValueExpression, r.Error))
			}
		}
		if keys.Has(a.Key) {
			errs = append(errs, field.Duplicate(ip.Child("key"), a.Key))
		}
		keys.Insert(a.Key)
	}
	return errs
}

func validateValidation(compiler plugincel.Compiler, v arv1.Validation, hasParams bool, envType func(string) environment.Type, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	expr, msg, msgExpr := strings.TrimSpace(v.Expression), strings.TrimSpace(v.Message), strings.TrimSpace(v.MessageExpression)
	if expr == "" {
		errs = append(errs, field.Required(path.Child("expression"), "expression is not specified"))
	} else {
		errs = append(errs, compileErr(compiler, &validating.ValidationCondition{Expression: v.Expression},
			plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true, StrictCost: true}, envType(v.Expression), path.Child("expression"))...)
	}
	if v.MessageExpression != "" && msgExpr == "" {
		errs = append(errs, field.Invalid(path.Child("messageExpression"), v.MessageExpression, "must be non-empty if specified"))
	} else if msgExpr != "" {
		// Kubernetes declares params for a messageExpression only when the
		// policy's match conditions may use them (that is, with a
		// paramKind), and never the authorizer.
		errs = append(errs, compileErr(compiler, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression},
			plugincel.OptionalVariableDeclarations{HasParams: hasParams, StrictCost: true}, envType(v.MessageExpression), path.Child("messageExpression"))...)
	}
	if v.Message != "" && msg == "" {
		errs = append(errs, field.Invalid(path.Child("message"), v.Message, "message must be non-empty if specified"))
	} else if lineBreaks.MatchString(msg) {
		errs = append(errs, field.Invalid(path.Child("message"), v.Message, "message must not contain line breaks"))
	}
	if v.Reason != nil && !validationReason.Has(string(*v.Reason)) {
		errs = append(errs, field.NotSupported(path.Child("reason"), *v.Reason, sets.List(validationReason)))
	}
	return errs
}

// compileErr compiles one expression and returns its error at path.
func compileErr(c plugincel.Compiler, e plugincel.ExpressionAccessor, decls plugincel.OptionalVariableDeclarations, envType environment.Type, path *field.Path) field.ErrorList {
	if r := c.CompileCELExpression(e, decls, envType); r.Error != nil {
		return field.ErrorList{celError(path, e.GetExpression(), r.Error)}
	}
	return nil
}

// celError is Kubernetes' field error for a CEL compile error.
func celError(path *field.Path, expr string, err *cel.Error) *field.Error {
	switch err.Type {
	case cel.ErrorTypeRequired:
		return field.Required(path, err.Detail)
	case cel.ErrorTypeInvalid:
		return field.Invalid(path, expr, err.Detail)
	}
	return field.InternalError(path, err)
}

func validateParamKind(k arv1.ParamKind, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if k.APIVersion == "" {
		errs = append(errs, field.Required(path.Child("apiVersion"), ""))
	} else {
		group, version := "", k.APIVersion
		switch strings.Count(k.APIVersion, "/") {
		case 0:
		case 1:
			i := strings.Index(k.APIVersion, "/")
			group, version = k.APIVersion[:i], k.APIVersion[i+1:]
		default:
			errs = append(errs, field.Invalid(path.Child("apiVersion"), k.APIVersion, fmt.Sprintf("unexpected GroupVersion string: %v", k.APIVersion)))
			group, version = "", "x"
		}
		if group != "" {
			if msgs := utilvalidation.IsDNS1123Subdomain(group); len(msgs) > 0 {
				errs = append(errs, field.Invalid(path.Child("apiVersion"), group, strings.Join(msgs, ",")))
			}
		}
		if version == "" {
			errs = append(errs, field.Invalid(path.Child("apiVersion"), k.APIVersion, "version must be specified"))
		} else if msgs := utilvalidation.IsDNS1035Label(version); len(msgs) > 0 {
			errs = append(errs, field.Invalid(path.Child("apiVersion"), version, strings.Join(msgs, ",")))
		}
	}
	if k.Kind == "" {
		errs = append(errs, field.Required(path.Child("kind"), ""))
	} else if msgs := utilvalidation.IsDNS1035Label(strings.ToLower(k.Kind)); len(msgs) > 0 {
		errs = append(errs, field.Invalid(path.Child("kind"), k.Kind, "may have mixed case, but should otherwise match: "+strings.Join(msgs, ",")))
	}
	return errs
}

func validateMatchResources(m *arv1.MatchResources, path *field.Path) field.ErrorList {
	if m == nil {
		return nil
	}
	var errs field.ErrorList
	if m.MatchPolicy == nil {
		errs = append(errs, field.Required(path.Child("matchPolicy"), ""))
	} else if !matchPolicies.Has(string(*m.MatchPolicy)) {
		errs = append(errs, field.NotSupported(path.Child("matchPolicy"), *m.MatchPolicy, sets.List(matchPolicies)))
	}
	for _, sel := range []struct {
		name string
		s    *metav1.LabelSelector
	}{{"namespaceSelector", m.NamespaceSelector}, {"objectSelector", m.ObjectSelector}} {
		if sel.s == nil {
			errs = append(errs, field.Required(path.Child(sel.name), ""))
		} else {
			errs = append(errs, metav1validation.ValidateLabelSelector(sel.s, metav1validation.LabelSelectorValidationOptions{}, path.Child(sel.name))...)
		}
	}
	for i := range m.ResourceRules {
		errs = append(errs, validateNamedRule(&m.ResourceRules[i], path.Child("resourceRules").Index(i))...)
	}
	for i := range m.ExcludeResourceRules {
		errs = append(errs, validateNamedRule(&m.ExcludeResourceRules[i], path.Child("excludeResourceRules").Index(i))...)
	}
	return errs
}

func validateNamedRule(r *arv1.NamedRuleWithOperations, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, n := range r.ResourceNames {
		for _, msg := range pathSegmentName(n) {
			errs = append(errs, field.Invalid(path.Child("resourceNames").Index(i), n, msg))
		}
		if seen.Has(n) {
			errs = append(errs, field.Duplicate(path.Child("resourceNames").Index(i), n))
		}
		seen.Insert(n)
	}
	if len(r.Operations) == 0 {
		errs = append(errs, field.Required(path.Child("operations"), ""))
	}
	if len(r.Operations) > 1 && hasWildcard(r.Operations) {
		errs = append(errs, field.Invalid(path.Child("operations"), internal.Operations(r.Operations), "if '*' is present, must not specify other operations"))
	}
	for i, op := range r.Operations {
		if !operations.Has(string(op)) {
			errs = append(errs, field.NotSupported(path.Child("operations").Index(i), op, sets.List(operations)))
		}
	}
	if len(r.APIGroups) == 0 {
		errs = append(errs, field.Required(path.Child("apiGroups"), ""))
	}
	if len(r.APIGroups) > 1 && hasWildcard(r.APIGroups) {
		errs = append(errs, field.Invalid(path.Child("apiGroups"), r.APIGroups, "if '*' is present, must not specify other API groups"))
	}
	if len(r.APIVersions) == 0 {
		errs = append(errs, field.Required(path.Child("apiVersions"), ""))
	}
	if len(r.APIVersions) > 1 && hasWildcard(r.APIVersions) {
		errs = append(errs, field.Invalid(path.Child("apiVersions"), r.APIVersions, "if '*' is present, must not specify other API versions"))
	}
	for i, v := range r.APIVersions {
		if v == "" {
			errs = append(errs, field.Required(path.Child("apiVersions").Index(i), ""))
		}
	}
	errs = append(errs, validateResources(r.Resources, path.Child("resources"))...)
	if r.Scope != nil && !scopes.Has(string(*r.Scope)) {
		errs = append(errs, field.NotSupported(path.Child("scope"), *r.Scope, sets.List(scopes)))
	}
	return errs
}

// validateResources checks a rule's resources with their subresources.
func validateResources(resources []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(resources) == 0 {
		errs = append(errs, field.Required(path, ""))
	}
	withWildcardSub, subWithWildcardRes := sets.New[string](), sets.New[string]()
	doubleWildcard, singleWildcard, plain := false, false, false
	for i, rs := range resources {
		if rs == "" {
			errs = append(errs, field.Required(path.Index(i), ""))
			continue
		}
		if rs == "*/*" {
			doubleWildcard = true
		}
		if rs == "*" {
			singleWildcard = true
		}
		res, sub, ok := strings.Cut(rs, "/")
		if !ok {
			plain = rs != "*"
			continue
		}
		if withWildcardSub.Has(res) {
			errs = append(errs, field.Invalid(path.Index(i), rs, fmt.Sprintf("if '%s/*' is present, must not specify %s", res, rs)))
		}
		if subWithWildcardRes.Has(sub) {
			errs = append(errs, field.Invalid(path.Index(i), rs, fmt.Sprintf("if '*/%s' is present, must not specify %s", sub, rs)))
		}
		if sub == "*" {
			withWildcardSub.Insert(res)
		}
		if res == "*" {
			subWithWildcardRes.Insert(sub)
		}
	}
	if len(resources) > 1 && doubleWildcard {
		errs = append(errs, field.Invalid(path, resources, "if '*/*' is present, must not specify other resources"))
	}
	if singleWildcard && plain {
		errs = append(errs, field.Invalid(path, resources, "if '*' is present, must not specify other resources without subresources"))
	}
	return errs
}

func hasWildcard[T ~string](list []T) bool {
	for _, v := range list {
		if v == "*" {
			return true
		}
	}
	return false
}

// pathSegmentName is apimachinery's path segment rule for names.
func pathSegmentName(name string) []string {
	for _, illegal := range []string{".", ".."} {
		if name == illegal {
			return []string{fmt.Sprintf("may not be '%s'", illegal)}
		}
	}
	for _, illegal := range []string{"/", "%"} {
		if strings.Contains(name, illegal) {
			return []string{fmt.Sprintf("may not contain '%s'", illegal)}
		}
	}
	return nil
}

func validateActions(va []arv1.ValidationAction, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, a := range va {
		if !actions.Has(string(a)) {
			errs = append(errs, field.NotSupported(path.Index(i), a, sets.List(actions)))
		}
		if seen.Has(string(a)) {
			errs = append(errs, field.Duplicate(path.Index(i), a))
		}
		seen.Insert(string(a))
	}
	if seen.Has(string(arv1.Deny)) && seen.Has(string(arv1.Warn)) {
		errs = append(errs, field.Invalid(path, internal.ValidationActions(va), "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	if seen.Len() == 0 {
		errs = append(errs, field.Required(path, "at least one validation action is required"))
	}
	return errs
}

func validateParamRef(r *arv1.ParamRef, path *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if r.Name != "" {
		for _, msg := range pathSegmentName(r.Name) {
			errs = append(errs, field.Invalid(path.Child("name"), r.Name, msg))
		}
		if r.Selector != nil {
			errs = append(errs, field.Forbidden(path.Child("name"), `name and selector are mutually exclusive`))
		}
	}
	if r.Selector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(r.Selector, metav1validation.LabelSelectorValidationOptions{}, path.Child("selector"))...)
		if r.Name != "" {
			errs = append(errs, field.Forbidden(path.Child("selector"), `name and selector are mutually exclusive`))
		}
	}
	if r.Name == "" && r.Selector == nil {
		errs = append(errs, field.Required(path, `one of name or selector must be specified`))
	}
	if r.ParameterNotFoundAction == nil || *r.ParameterNotFoundAction == "" {
		errs = append(errs, field.Required(path.Child("parameterNotFoundAction"), ""))
	} else if *r.ParameterNotFoundAction != arv1.DenyAction && *r.ParameterNotFoundAction != arv1.AllowAction {
		errs = append(errs, field.NotSupported(path.Child("parameterNotFoundAction"), r.ParameterNotFoundAction, []string{string(arv1.DenyAction), string(arv1.AllowAction)}))
	}
	return errs
}
