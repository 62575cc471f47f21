// This file holds what the API service does for the
// flowcontrol.apiserver.k8s.io/v1 kinds (FlowSchema and
// PriorityLevelConfiguration) beyond the generic registry: Kubernetes'
// defaults, its strategies' create rule (status is the server's), and its
// validation with kube-apiserver v1.33.13's field paths and messages,
// including the fixed specs of the mandatory objects.
package apiserver

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	kubeflowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/util/shufflesharding"

	flowcontrolv1 "github.com/kplane/kplane/proto/kplane/flowcontrol/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// Kubernetes' defaults for the flowcontrol kinds.
const (
	defaultMatchingPrecedence = int32(1000)
	defaultHandSize           = int32(8)
	defaultQueues             = int32(64)
	defaultQueueLengthLimit   = int32(50)
	defaultLimitedShares      = int32(30)
	maxMatchingPrecedence     = int32(10000)
	maxQueues                 = int32(10 * 1000 * 1000)
	// preserveZeroSharesAnnotation is v1beta3's; v1 refuses it.
	preserveZeroSharesAnnotation = "flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares"
)

var (
	flowVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "proxy", "update", "watch"}
)

func defaultFlowSchema(fs *flowcontrolv1.FlowSchema) {
	if fs.Spec == nil {
		fs.Spec = &flowcontrolv1.FlowSchemaSpec{}
	}
	if fs.Spec.MatchingPrecedence == 0 {
		fs.Spec.MatchingPrecedence = defaultMatchingPrecedence
	}
	if fs.Spec.PriorityLevelConfiguration == nil {
		fs.Spec.PriorityLevelConfiguration = &flowcontrolv1.PriorityLevelConfigurationReference{}
	}
}

func defaultPriorityLevel(pl *flowcontrolv1.PriorityLevelConfiguration) {
	if pl.Spec == nil {
		pl.Spec = &flowcontrolv1.PriorityLevelConfigurationSpec{}
	}
	if e := pl.Spec.Exempt; e != nil {
		if e.NominalConcurrencyShares == nil {
			e.NominalConcurrencyShares = proto.Int32(0)
		}
		if e.LendablePercent == nil {
			e.LendablePercent = proto.Int32(0)
		}
	}
	if l := pl.Spec.Limited; l != nil {
		if l.NominalConcurrencyShares == nil {
			l.NominalConcurrencyShares = proto.Int32(defaultLimitedShares)
		}
		if l.LendablePercent == nil {
			l.LendablePercent = proto.Int32(0)
		}
		if l.LimitResponse == nil {
			l.LimitResponse = &flowcontrolv1.LimitResponse{}
		}
		if q := l.LimitResponse.Queuing; q != nil {
			if q.HandSize == 0 {
				q.HandSize = defaultHandSize
			}
			if q.Queues == 0 {
				q.Queues = defaultQueues
			}
			if q.QueueLengthLimit == 0 {
				q.QueueLengthLimit = defaultQueueLengthLimit
			}
		}
	}
}

// prepareFlowControl is the strategies' PrepareForCreate (old nil): a new
// object's status is empty until the server's controllers write it.
func prepareFlowControl(obj, old proto.Message) {
	if old != nil {
		return
	}
	switch o := obj.(type) {
	case *flowcontrolv1.FlowSchema:
		o.Status = nil
	case *flowcontrolv1.PriorityLevelConfiguration:
		o.Status = nil
	}
}

// validateFlowControl is Kubernetes' validation of both kinds (the same on
// create and update); the metadata is validateMeta's.
func validateFlowControl(obj proto.Message) field.ErrorList {
	switch o := obj.(type) {
	case *flowcontrolv1.FlowSchema:
		return validateFlowSchema(o)
	case *flowcontrolv1.PriorityLevelConfiguration:
		return validatePriorityLevel(o)
	}
	return nil
}

// validateFlowControlStatus is the status subresource's validation.
func validateFlowControlStatus(obj proto.Message) field.ErrorList {
	switch o := obj.(type) {
	case *flowcontrolv1.FlowSchema:
		var types []string
		for _, c := range o.GetStatus().GetConditions() {
			types = append(types, c.GetType())
		}
		return validateConditionTypes(types)
	case *flowcontrolv1.PriorityLevelConfiguration:
		var types []string
		for _, c := range o.GetStatus().GetConditions() {
			types = append(types, c.GetType())
		}
		return validateConditionTypes(types)
	}
	return nil
}

func validateConditionTypes(types []string) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, t := range types {
		p := field.NewPath("status", "conditions").Index(i)
		if seen.Has(t) {
			errs = append(errs, field.Duplicate(p.Child("type"), t))
		}
		seen.Insert(t)
		if t == "" {
			errs = append(errs, field.Required(p.Child("type"), "must not be empty"))
		}
	}
	return errs
}

func validateFlowSchema(fs *flowcontrolv1.FlowSchema) field.ErrorList {
	name := fs.GetMetadata().GetName()
	spec := fs.GetSpec()
	p := field.NewPath("spec")
	var errs field.ErrorList
	prec := spec.GetMatchingPrecedence()
	if prec <= 0 {
		errs = append(errs, field.Invalid(p.Child("matchingPrecedence"), prec, "must be a positive value"))
	}
	if prec > maxMatchingPrecedence {
		errs = append(errs, field.Invalid(p.Child("matchingPrecedence"), prec, fmt.Sprintf("must not be greater than %v", maxMatchingPrecedence)))
	}
	if prec == 1 && name != kubeflowcontrolv1.FlowSchemaNameExempt {
		errs = append(errs, field.Invalid(p.Child("matchingPrecedence"), prec, "only the schema named 'exempt' may have matchingPrecedence 1"))
	}
	if d := spec.GetDistinguisherMethod(); d != nil {
		if t := d.GetType(); t != string(kubeflowcontrolv1.FlowDistinguisherMethodByUserType) && t != string(kubeflowcontrolv1.FlowDistinguisherMethodByNamespaceType) {
			errs = append(errs, field.NotSupported(p.Child("distinguisherMethod", "type"),
				goValue(fmt.Sprintf("flowcontrol.FlowDistinguisherMethod{Type:%q}", t)), []string{"ByNamespace", "ByUser"}))
		}
	}
	plName := spec.GetPriorityLevelConfiguration().GetName()
	if plName != "" {
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(plName, false) {
			errs = append(errs, field.Invalid(p.Child("priorityLevelConfiguration", "name"), plName, msg))
		}
	} else {
		errs = append(errs, field.Required(p.Child("priorityLevelConfiguration", "name"), "must reference a priority level"))
	}
	for i, r := range spec.GetRules() {
		errs = append(errs, validatePolicyRules(r, p.Child("rules").Index(i))...)
	}
	for _, mand := range mandatoryFlowSchemas() {
		if mand.GetMetadata().GetName() == name && !proto.Equal(spec, mand.GetSpec()) {
			errs = append(errs, field.Invalid(p, goSpec(spec), fmt.Sprintf("spec of '%s' must equal the fixed value", name)))
		}
	}
	return append(errs, validateFlowControlStatus(fs)...)
}

// goSpec prints a spec for a message as Kubernetes prints its internal Go
// value (%#v), as far as a generated message allows.
func goSpec(m proto.Message) goValue {
	b, err := kubejson.Marshal(m)
	if err != nil {
		return goValue(fmt.Sprint(m))
	}
	return goValue(strings.ReplaceAll(string(b), "\n", ""))
}

func validatePolicyRules(r *flowcontrolv1.PolicyRulesWithSubjects, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.GetSubjects()) == 0 {
		errs = append(errs, field.Required(p.Child("subjects"), "subjects must contain at least one value"))
	}
	for i, s := range r.GetSubjects() {
		errs = append(errs, validateSubject(s, p.Child("subjects").Index(i))...)
	}
	if len(r.GetResourceRules()) == 0 && len(r.GetNonResourceRules()) == 0 {
		errs = append(errs, field.Required(p, "at least one of resourceRules and nonResourceRules has to be non-empty"))
	}
	for i, rr := range r.GetResourceRules() {
		errs = append(errs, validateResourceRule(rr, p.Child("resourceRules").Index(i))...)
	}
	for i, nr := range r.GetNonResourceRules() {
		errs = append(errs, validateNonResourceRule(nr, p.Child("nonResourceRules").Index(i))...)
	}
	return errs
}

func validateSubject(s *flowcontrolv1.Subject, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	forbidUser := func() {
		if s.User != nil {
			errs = append(errs, field.Forbidden(p.Child("user"), "user is forbidden when subject kind is not 'User'"))
		}
	}
	forbidGroup := func() {
		if s.Group != nil {
			errs = append(errs, field.Forbidden(p.Child("group"), "group is forbidden when subject kind is not 'Group'"))
		}
	}
	forbidSA := func() {
		if s.ServiceAccount != nil {
			errs = append(errs, field.Forbidden(p.Child("serviceAccount"), "serviceAccount is forbidden when subject kind is not 'ServiceAccount'"))
		}
	}
	switch s.GetKind() {
	case string(kubeflowcontrolv1.SubjectKindServiceAccount):
		sa, sp := s.GetServiceAccount(), p.Child("serviceAccount")
		switch {
		case sa == nil:
			errs = append(errs, field.Required(sp, "serviceAccount is required when subject kind is 'ServiceAccount'"))
		default:
			if sa.GetName() == "" {
				errs = append(errs, field.Required(sp.Child("name"), ""))
			} else if sa.GetName() != kubeflowcontrolv1.NameAll {
				for _, msg := range apimachineryvalidation.ValidateServiceAccountName(sa.GetName(), false) {
					errs = append(errs, field.Invalid(sp.Child("name"), sa.GetName(), msg))
				}
			}
			if sa.GetNamespace() != "" {
				for _, msg := range apimachineryvalidation.ValidateNamespaceName(sa.GetNamespace(), false) {
					errs = append(errs, field.Invalid(sp.Child("namespace"), sa.GetNamespace(), msg))
				}
			} else {
				errs = append(errs, field.Required(sp.Child("namespace"), "must specify namespace for service account"))
			}
		}
		forbidUser()
		forbidGroup()
	case string(kubeflowcontrolv1.SubjectKindUser):
		if s.User == nil {
			errs = append(errs, field.Required(p.Child("user"), "user is required when subject kind is 'User'"))
		} else if s.User.GetName() == "" {
			errs = append(errs, field.Required(p.Child("user", "name"), ""))
		}
		forbidSA()
		forbidGroup()
	case string(kubeflowcontrolv1.SubjectKindGroup):
		if s.Group == nil {
			errs = append(errs, field.Required(p.Child("group"), "group is required when subject kind is 'Group'"))
		} else if s.Group.GetName() == "" {
			errs = append(errs, field.Required(p.Child("group", "name"), ""))
		}
		forbidSA()
		forbidUser()
	default:
		errs = append(errs, field.NotSupported(p.Child("kind"), s.GetKind(), []string{"Group", "ServiceAccount", "User"}))
	}
	return errs
}

// validateVerbs checks a rule's verbs: '*' alone, or Kubernetes' verbs.
func validateVerbs(verbs []string, p *field.Path) field.ErrorList {
	switch {
	case len(verbs) == 0:
		return field.ErrorList{field.Required(p, "verbs must contain at least one value")}
	case slices.Contains(verbs, "*"):
		if len(verbs) > 1 {
			return field.ErrorList{field.Invalid(p, verbs, "if '*' is present, must not specify other verbs")}
		}
	default:
		for _, v := range verbs {
			if !slices.Contains(flowVerbs, v) {
				return field.ErrorList{field.NotSupported(p, verbs, flowVerbs)}
			}
		}
	}
	return nil
}

func validateNonResourceRule(r *flowcontrolv1.NonResourcePolicyRule, p *field.Path) field.ErrorList {
	errs := validateVerbs(r.GetVerbs(), p.Child("verbs"))
	urls := r.GetNonResourceUrls()
	switch {
	case len(urls) == 0:
		errs = append(errs, field.Required(p.Child("nonResourceURLs"), "nonResourceURLs must contain at least one value"))
	case slices.Contains(urls, "*"):
		if len(urls) > 1 {
			errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), urls, "if '*' is present, must not specify other non-resource URLs"))
		}
	default:
		for i, u := range urls {
			if msg := nonResourceURLProblem(u); msg != "" {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs").Index(i), u, msg))
			}
		}
	}
	return errs
}

// nonResourceURLProblem is what is wrong with a non-resource URL pattern
// ("" if nothing): a path from /, with at most a trailing /* wildcard.
func nonResourceURLProblem(u string) string {
	switch {
	case u == "":
		return "must not be empty"
	case u == "/":
		return ""
	case !strings.HasPrefix(u, "/"):
		return "must start with slash"
	case strings.Contains(u, " "):
		return "must not contain white-space"
	case strings.Contains(u, "//"):
		return "must not contain double slash"
	}
	if n := strings.Count(u, "*"); n > 1 || (n == 1 && !strings.HasSuffix(u, "/*")) {
		return "wildcard can only do suffix matching"
	}
	return ""
}

func validateResourceRule(r *flowcontrolv1.ResourcePolicyRule, p *field.Path) field.ErrorList {
	errs := validateVerbs(r.GetVerbs(), p.Child("verbs"))
	if g := r.GetApiGroups(); len(g) == 0 {
		errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
	} else if len(g) > 1 && slices.Contains(g, "*") {
		errs = append(errs, field.Invalid(p.Child("apiGroups"), g, "if '*' is present, must not specify other api groups"))
	}
	if rs := r.GetResources(); len(rs) == 0 {
		errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
	} else if len(rs) > 1 && slices.Contains(rs, "*") {
		errs = append(errs, field.Invalid(p.Child("resources"), rs, "if '*' is present, must not specify other resources"))
	}
	ns := r.GetNamespaces()
	switch {
	case len(ns) == 0 && !r.GetClusterScope():
		errs = append(errs, field.Required(p.Child("namespaces"), "resource rules that are not cluster scoped must supply at least one namespace"))
	case slices.Contains(ns, "*"):
		if len(ns) > 1 {
			errs = append(errs, field.Invalid(p.Child("namespaces"), ns, "if '*' is present, must not specify other namespaces"))
		}
	default:
		for i, n := range ns {
			for _, msg := range apimachineryvalidation.ValidateNamespaceName(n, false) {
				errs = append(errs, field.Invalid(p.Child("namespaces").Index(i), n, "each member of this list must be '*' or a DNS-1123 label; "+msg))
			}
		}
	}
	return errs
}

func validatePriorityLevel(pl *flowcontrolv1.PriorityLevelConfiguration) field.ErrorList {
	var errs field.ErrorList
	name := pl.GetMetadata().GetName()
	if _, ok := pl.GetMetadata().GetAnnotations()[preserveZeroSharesAnnotation]; ok {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations"), fmt.Sprintf("annotation '%s' is forbidden", preserveZeroSharesAnnotation)))
	}
	spec, p := pl.GetSpec(), field.NewPath("spec")
	exemptName := name == kubeflowcontrolv1.PriorityLevelConfigurationNameExempt
	if exemptName != (spec.GetType() == string(kubeflowcontrolv1.PriorityLevelEnablementExempt)) {
		errs = append(errs, field.Invalid(p.Child("type"), spec.GetType(), "type must be 'Exempt' if and only if name is 'exempt'"))
	}
	switch spec.GetType() {
	case string(kubeflowcontrolv1.PriorityLevelEnablementExempt):
		if spec.Limited != nil {
			errs = append(errs, field.Forbidden(p.Child("limited"), "must be nil if the type is not Limited"))
		}
		if e := spec.Exempt; e != nil {
			ep := p.Child("exempt")
			if e.NominalConcurrencyShares != nil && *e.NominalConcurrencyShares < 0 {
				errs = append(errs, field.Invalid(ep.Child("nominalConcurrencyShares"), *e.NominalConcurrencyShares, "must be a non-negative integer"))
			}
			if e.LendablePercent != nil && (*e.LendablePercent < 0 || *e.LendablePercent > 100) {
				errs = append(errs, field.Invalid(ep.Child("lendablePercent"), *e.LendablePercent, "must be between 0 and 100, inclusive"))
			}
		}
	case string(kubeflowcontrolv1.PriorityLevelEnablementLimited):
		if spec.Exempt != nil {
			errs = append(errs, field.Forbidden(p.Child("exempt"), "must be nil if the type is Limited"))
		}
		if spec.Limited == nil {
			errs = append(errs, field.Required(p.Child("limited"), "must not be empty when type is Limited"))
		} else {
			errs = append(errs, validateLimited(spec.Limited, p.Child("limited"))...)
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), spec.GetType(), []string{"Exempt", "Limited"}))
	}
	for _, mand := range mandatoryPriorityLevels() {
		if mand.GetMetadata().GetName() != name {
			continue
		}
		want := mand.GetSpec()
		have := proto.Clone(spec).(*flowcontrolv1.PriorityLevelConfigurationSpec)
		msg := fmt.Sprintf("spec of '%s' must equal the fixed value", name)
		if exemptName {
			// The exempt level's spec.exempt is the operator's to tune.
			have.Exempt = want.Exempt
			msg = fmt.Sprintf("spec of '%s' except the 'spec.exempt' field must equal the fixed value", name)
		}
		if !proto.Equal(want, have) {
			errs = append(errs, field.Invalid(p, goSpec(spec), msg))
		}
	}
	return append(errs, validateFlowControlStatus(pl)...)
}

func validateLimited(l *flowcontrolv1.LimitedPriorityLevelConfiguration, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if l.GetNominalConcurrencyShares() < 0 {
		errs = append(errs, field.Invalid(p.Child("nominalConcurrencyShares"), l.GetNominalConcurrencyShares(), "must be a non-negative integer"))
	}
	lr, lp := l.GetLimitResponse(), p.Child("limitResponse")
	switch lr.GetType() {
	case string(kubeflowcontrolv1.LimitResponseTypeReject):
		if lr.Queuing != nil {
			errs = append(errs, field.Forbidden(lp.Child("queuing"), "must be nil if limited.limitResponse.type is not Limited"))
		}
	case string(kubeflowcontrolv1.LimitResponseTypeQueue):
		if lr.Queuing == nil {
			errs = append(errs, field.Required(lp.Child("queuing"), "must not be empty if limited.limitResponse.type is Limited"))
		} else {
			errs = append(errs, validateQueuing(lr.Queuing, lp.Child("queuing"))...)
		}
	default:
		errs = append(errs, field.NotSupported(lp.Child("type"), lr.GetType(), []string{"Queue", "Reject"}))
	}
	if v := l.LendablePercent; v != nil && (*v < 0 || *v > 100) {
		errs = append(errs, field.Invalid(p.Child("lendablePercent"), *v, "must be between 0 and 100, inclusive"))
	}
	if v := l.BorrowingLimitPercent; v != nil && *v < 0 {
		errs = append(errs, field.Invalid(p.Child("borrowingLimitPercent"), *v, "if specified, must be a non-negative integer"))
	}
	return errs
}

func validateQueuing(q *flowcontrolv1.QueuingConfiguration, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if q.GetQueueLengthLimit() <= 0 {
		errs = append(errs, field.Invalid(p.Child("queueLengthLimit"), q.GetQueueLengthLimit(), "must be positive"))
	}
	queues, hand := q.GetQueues(), q.GetHandSize()
	if queues <= 0 {
		errs = append(errs, field.Invalid(p.Child("queues"), queues, "must be positive"))
	} else if queues > maxQueues {
		errs = append(errs, field.Invalid(p.Child("queues"), queues, fmt.Sprintf("must not be greater than %d", maxQueues)))
	}
	switch {
	case hand <= 0:
		errs = append(errs, field.Invalid(p.Child("handSize"), hand, "must be positive"))
	case hand > queues:
		errs = append(errs, field.Invalid(p.Child("handSize"), hand, fmt.Sprintf("should not be greater than queues (%d)", queues)))
	case shufflesharding.RequiredEntropyBits(int(queues), int(hand)) > shufflesharding.MaxHashBits:
		errs = append(errs, field.Invalid(p.Child("handSize"), hand, fmt.Sprintf("required entropy bits of deckSize %d and handSize %d should not be greater than %d",
			queues, hand, shufflesharding.MaxHashBits)))
	}
	return errs
}

// fromKube converts one of Kubernetes' flowcontrol v1 objects into ours,
// through its JSON, defaulted as a create would default it.
func fromKube[T proto.Message](in any, out T) (T, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return out, fmt.Errorf("flowcontrol object to json: %w", err)
	}
	if err := kubejson.Unmarshal(b, out, kubejson.Options{}); err != nil {
		return out, fmt.Errorf("flowcontrol object from json: %w", err)
	}
	setDefaults(out)
	return out, nil
}

// mandatoryFlowSchemas and the functions below are Kubernetes' bootstrap
// configuration (k8s.io/apiserver's flowcontrol/bootstrap) as our types.
// They panic only if that package's data cannot be converted, which
// kubejson's tests rule out.
func mandatoryFlowSchemas() []*flowcontrolv1.FlowSchema {
	return convertFlowSchemas(bootstrapMandatoryFlowSchemas())
}

func mandatoryPriorityLevels() []*flowcontrolv1.PriorityLevelConfiguration {
	return convertPriorityLevels(bootstrapMandatoryPriorityLevels())
}

func convertFlowSchemas(in []*kubeflowcontrolv1.FlowSchema) []*flowcontrolv1.FlowSchema {
	out := make([]*flowcontrolv1.FlowSchema, 0, len(in))
	for _, fs := range in {
		o, err := fromKube(fs, &flowcontrolv1.FlowSchema{})
		if err != nil {
			panic(err)
		}
		out = append(out, o)
	}
	return out
}

func convertPriorityLevels(in []*kubeflowcontrolv1.PriorityLevelConfiguration) []*flowcontrolv1.PriorityLevelConfiguration {
	out := make([]*flowcontrolv1.PriorityLevelConfiguration, 0, len(in))
	for _, pl := range in {
		o, err := fromKube(pl, &flowcontrolv1.PriorityLevelConfiguration{})
		if err != nil {
			panic(err)
		}
		out = append(out, o)
	}
	return out
}
