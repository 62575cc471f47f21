// Package policy enforces ValidatingAdmissionPolicies and their bindings
// (admissionregistration.k8s.io/v1) in the API service's admission chain, with
// Kubernetes' own CEL code from k8s.io/apiserver: each policy is compiled by
// its CompositedCompiler (variables, validations, messageExpressions,
// auditAnnotations, matchConditions) into validating.NewValidator, the
// evaluator kube-apiserver's plugin runs; requests are matched with its
// matching.Matcher (resourceRules, excludeResourceRules, namespaceSelector,
// objectSelector). This package only keeps the policies and bindings (fed
// from the API service's watch, so every replica enforces the same set),
// finds the params and turns the evaluator's decisions into kplane's
// refusals, warnings and audit annotations, as kube-apiserver's dispatcher
// does. It also validates policies and bindings as kube-apiserver does
// (validation.go) and type-checks policies for their status with
// k8s.io/apiserver's TypeChecker (typecheck.go).
package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	arv1 "k8s.io/api/admissionregistration/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/request"
)

// Config gives Policies what it needs from the API service.
type Config struct {
	// Logger; nil discards.
	Logger *slog.Logger
	// TracerProvider records an "admission.policy" span per request that
	// some policy matched. Nil records nothing.
	TracerProvider trace.TracerProvider
	// Authorize answers the CEL authorizer library's checks
	// (authorizer.group(...).resource(...).check(...)) with the API
	// service's authorizer. Nil allows nothing (every check is denied).
	Authorize func(ctx context.Context, a request.Attributes) (request.Decision, error)
	// Namespace returns a namespace (kplane's proto Namespace), for
	// namespaceSelector and CEL's namespaceObject; a namespace that does not
	// exist is an apierrors NotFound.
	Namespace func(ctx context.Context, name string) (proto.Message, error)
	// Params finds the objects of a paramKind. Nil: no paramKind resolves.
	Params ParamSource
}

// ParamSource finds the objects a binding's paramRef names, of any kind the
// API service serves.
type ParamSource interface {
	// Scope says whether apiVersion/kind is served, and if so whether it is
	// namespaced.
	Scope(apiVersion, kind string) (namespaced, ok bool)
	// Params returns the objects of apiVersion/kind in namespace ns ("" for
	// a cluster-scoped kind) named name, or, when name is "", those whose
	// labels match selector. A missing named object is not an error: the
	// result is empty.
	Params(ctx context.Context, apiVersion, kind, ns, name string, selector func(map[string]string) bool) ([]proto.Message, error)
}

// Policies holds the compiled policies and their bindings. It implements the
// API service's ObjectSink for validatingadmissionpolicies and
// validatingadmissionpolicybindings. It is safe for concurrent use.
type Policies struct {
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer

	envOnce sync.Once
	envSet  *environment.EnvSet
	// stateless compiles match conditions at validation (no variables).
	stateless plugincel.Compiler

	mu       sync.RWMutex
	policies map[string]*compiled
	bindings map[string]*arv1.ValidatingAdmissionPolicyBinding
}

// compiled is one policy and its evaluator.
type compiled struct {
	policy    *arv1.ValidatingAdmissionPolicy
	validator validating.Validator
	err       error // the policy could not be set up
}

// New returns Policies with none.
func New(cfg Config) *Policies {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Policies{
		cfg:      cfg,
		log:      log.With("component", "admission.policy"),
		tracer:   tp.Tracer("github.com/kplane/kplane/services/apiserver/policy"),
		policies: map[string]*compiled{},
		bindings: map[string]*arv1.ValidatingAdmissionPolicyBinding{},
	}
}

// env returns the CEL environment set kube-apiserver v1.33 compiles policies
// with: the base library at the default compatibility version, with strict
// cost enforcement (StrictCostEnforcementForVAP is on).
func (p *Policies) env() *environment.EnvSet {
	p.envOnce.Do(func() {
		p.envSet = environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true)
		p.stateless = plugincel.NewCompiler(p.envSet)
	})
	return p.envSet
}

// Upsert adds or replaces a policy or binding (kplane's proto message or
// Kubernetes' type). Other objects are logged and ignored.
func (p *Policies) Upsert(obj any) {
	if err := p.put(obj); err != nil {
		p.log.Error("ignoring object", "err", err)
	}
}

// Delete forgets a policy or binding.
func (p *Policies) Delete(obj any) {
	k, err := toKube(obj)
	if err != nil {
		p.log.Error("ignoring object", "err", err)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch o := k.(type) {
	case *arv1.ValidatingAdmissionPolicy:
		delete(p.policies, o.Name)
	case *arv1.ValidatingAdmissionPolicyBinding:
		delete(p.bindings, o.Name)
	}
}

func (p *Policies) put(obj any) error {
	k, err := toKube(obj)
	if err != nil {
		return err
	}
	switch o := k.(type) {
	case *arv1.ValidatingAdmissionPolicy:
		v, err := p.compile(o)
		c := &compiled{policy: o, validator: v, err: err}
		p.mu.Lock()
		p.policies[o.Name] = c
		p.mu.Unlock()
	case *arv1.ValidatingAdmissionPolicyBinding:
		p.mu.Lock()
		p.bindings[o.Name] = o
		p.mu.Unlock()
	}
	return nil
}

// toKube converts kplane's proto policy or binding to Kubernetes' type (the
// two share their JSON).
func toKube(obj any) (any, error) {
	switch o := obj.(type) {
	case *arv1.ValidatingAdmissionPolicy, *arv1.ValidatingAdmissionPolicyBinding:
		return o, nil
	case proto.Message:
		var into any
		switch string(o.ProtoReflect().Descriptor().Name()) {
		case "ValidatingAdmissionPolicy":
			into = &arv1.ValidatingAdmissionPolicy{}
		case "ValidatingAdmissionPolicyBinding":
			into = &arv1.ValidatingAdmissionPolicyBinding{}
		default:
			return nil, fmt.Errorf("policy: %s is not a policy or binding", o.ProtoReflect().Descriptor().FullName())
		}
		if err := convert(o, into); err != nil {
			return nil, err
		}
		return into, nil
	}
	return nil, fmt.Errorf("policy: %T is not a policy or binding", obj)
}

// convert decodes a proto message's Kubernetes JSON into a Kubernetes type.
func convert(m proto.Message, into any) error {
	b, err := kubejson.Marshal(m)
	if err != nil {
		return fmt.Errorf("policy: encode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("policy: decode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// compile builds a policy's evaluator as kube-apiserver's plugin does: the
// variables first (stored in the composition environment), then the
// validations, messageExpressions (without the authorizer), auditAnnotations
// and matchConditions. Expressions are compiled as stored expressions (the
// policy was validated when written); an expression that does not compile
// is reported when evaluated, under the policy's failurePolicy.
func (p *Policies) compile(pol *arv1.ValidatingAdmissionPolicy) (validating.Validator, error) {
	hasParams := pol.Spec.ParamKind != nil
	decls := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true, StrictCost: true}
	msgDecls := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: false, StrictCost: true}
	c, err := plugincel.NewCompositedCompiler(p.env())
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	vars := make([]plugincel.NamedExpressionAccessor, len(pol.Spec.Variables))
	for i, v := range pol.Spec.Variables {
		vars[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	c.CompileAndStoreVariables(vars, decls, environment.StoredExpressions)

	validations := make([]plugincel.ExpressionAccessor, len(pol.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(pol.Spec.Validations))
	for i, v := range pol.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	audits := make([]plugincel.ExpressionAccessor, len(pol.Spec.AuditAnnotations))
	for i, a := range pol.Spec.AuditAnnotations {
		audits[i] = &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	var matcher matchconditions.Matcher
	if len(pol.Spec.MatchConditions) > 0 {
		conds := make([]plugincel.ExpressionAccessor, len(pol.Spec.MatchConditions))
		for i := range pol.Spec.MatchConditions {
			conds[i] = (*matchconditions.MatchCondition)(&pol.Spec.MatchConditions[i])
		}
		matcher = matchconditions.NewMatcher(c.CompileCondition(conds, decls, environment.StoredExpressions),
			pol.Spec.FailurePolicy, "policy", "validate", pol.Name)
	}
	return validating.NewValidator(
		c.CompileCondition(validations, decls, environment.StoredExpressions),
		matcher,
		c.CompileCondition(audits, decls, environment.StoredExpressions),
		c.CompileCondition(messages, msgDecls, environment.StoredExpressions),
		pol.Spec.FailurePolicy,
	), nil
}

// hook is one policy with the bindings that name it, as of one request.
type hook struct {
	policy    *arv1.ValidatingAdmissionPolicy
	validator validating.Validator
	err       error
	bindings  []*arv1.ValidatingAdmissionPolicyBinding
}

// snapshot returns the policies that have bindings, by name, each with its
// bindings by name. A binding naming a policy that does not exist does
// nothing, as on Kubernetes.
func (p *Policies) snapshot() []hook {
	p.mu.RLock()
	defer p.mu.RUnlock()
	byPolicy := map[string][]*arv1.ValidatingAdmissionPolicyBinding{}
	for _, b := range p.bindings {
		if _, ok := p.policies[b.Spec.PolicyName]; ok {
			byPolicy[b.Spec.PolicyName] = append(byPolicy[b.Spec.PolicyName], b)
		}
	}
	hooks := make([]hook, 0, len(byPolicy))
	for name, bs := range byPolicy {
		sort.Slice(bs, func(i, j int) bool { return bs[i].Name < bs[j].Name })
		c := p.policies[name]
		hooks = append(hooks, hook{policy: c.policy, validator: c.validator, err: c.err, bindings: bs})
	}
	sort.Slice(hooks, func(i, j int) bool { return hooks[i].policy.Name < hooks[j].policy.Name })
	return hooks
}
