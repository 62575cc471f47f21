// This file holds the validation of core/v1 ResourceQuotas and
// LimitRanges, as Kubernetes' ValidateResourceQuota and ValidateLimitRange:
// resource names, quantities, scopes and their selector, and the order of
// a limit range's min ≤ defaultRequest ≤ default ≤ max.

package apiserver

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// The resource names Kubernetes knows (pkg/apis/core/helper).
var (
	standardQuotaResources = []string{"cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory",
		"requests.storage", "requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage",
		"pods", "resourcequotas", "services", "replicationcontrollers", "secrets", "persistentvolumeclaims",
		"configmaps", "services.nodeports", "services.loadbalancers"}
	standardResources = append(slices.Clone(standardQuotaResources), "storage")
	integerResources  = []string{"pods", "resourcequotas", "services", "replicationcontrollers", "secrets",
		"configmaps", "persistentvolumeclaims", "services.nodeports", "services.loadbalancers"}
	quotaScopes = []string{"Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass",
		"VolumeAttributesClass", "CrossNamespacePodAffinity"}
)

func isHugePages(name string) bool { return strings.HasPrefix(name, "hugepages-") }

func isQuotaHugePages(name string) bool {
	return isHugePages(name) || strings.HasPrefix(name, "requests.hugepages-") || strings.HasPrefix(name, "limits.hugepages-")
}

func isStandardQuotaResource(name string) bool {
	return slices.Contains(standardQuotaResources, name) || isQuotaHugePages(name)
}

func isNativeResource(name string) bool {
	return !strings.Contains(name, "/") || strings.Contains(name, "kubernetes.io/")
}

func isExtendedResource(name string) bool {
	if isNativeResource(name) || strings.HasPrefix(name, "requests.") {
		return false
	}
	return len(validation.IsQualifiedName("requests."+name)) == 0
}

func isIntegerResource(name string) bool {
	return slices.Contains(integerResources, name) || isExtendedResource(name)
}

// validateResourceName: a qualified name, and one of Kubernetes' when it
// has no domain.
func validateResourceName(name string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	// Kubernetes' ResourceName prints unquoted in a refusal (it is a
	// fmt.Stringer).
	v := goLiteral(name)
	for _, msg := range validation.IsQualifiedName(name) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	if len(errs) > 0 {
		return errs
	}
	if !strings.Contains(name, "/") && !slices.Contains(standardResources, name) && !isQuotaHugePages(name) {
		errs = append(errs, field.Invalid(p, v, "must be a standard resource type or fully qualified"))
	}
	return errs
}

func validateQuotaResourceName(name string, p *field.Path) field.ErrorList {
	errs := validateResourceName(name, p)
	if !strings.Contains(name, "/") && !isStandardQuotaResource(name) {
		errs = append(errs, field.Invalid(p, goLiteral(name), "must be a standard resource for quota"))
	}
	return errs
}

func validateContainerResourceName(name string, p *field.Path) field.ErrorList {
	errs := validateResourceName(name, p)
	if !strings.Contains(name, "/") {
		if !slices.Contains([]string{"cpu", "memory", "ephemeral-storage"}, name) && !isHugePages(name) {
			errs = append(errs, field.Invalid(p, goLiteral(name), "must be a standard resource for containers"))
		}
	} else if !isNativeResource(name) && !isExtendedResource(name) {
		errs = append(errs, field.Invalid(p, goLiteral(name), "doesn't follow extended resource name standard"))
	}
	return errs
}

// parseQuantity reads v, or says how kube-apiserver refuses it.
func parseQuantity(v string, p *field.Path) (resource.Quantity, *field.Error) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return q, field.Invalid(p, v, "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
	}
	return q, nil
}

// validateQuotaQuantities checks a hard or used list: names, and values
// that are not negative (and whole for the counted resources).
func validateQuotaQuantities(l map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range sortedKeys(l) {
		kp := p.Key(k)
		errs = append(errs, validateQuotaResourceName(k, kp)...)
		q, ferr := parseQuantity(l[k], kp)
		if ferr != nil {
			errs = append(errs, ferr)
			continue
		}
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(kp, q.String(), "must be greater than or equal to 0"))
		}
		if isIntegerResource(k) && q.MilliValue()%1000 != 0 {
			errs = append(errs, field.Invalid(kp, q, "must be an integer"))
		}
	}
	return errs
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// scopeValidFor says whether a quota limited to scope may track name.
func scopeValidFor(scope, name string) bool {
	podCompute := []string{"cpu", "memory", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory"}
	switch scope {
	case "Terminating", "NotTerminating", "NotBestEffort", "PriorityClass", "CrossNamespacePodAffinity":
		return name == "pods" || slices.Contains(podCompute, name)
	case "BestEffort":
		return name == "pods"
	case "VolumeAttributesClass":
		return name == "persistentvolumeclaims" || name == "requests.storage"
	}
	return true
}

// scopesValue prints a quota's scopes as kube-apiserver prints the Go
// slice in a refusal.
func scopesValue(scopes []string) string {
	return "[]core.ResourceQuotaScope{" + quotedList(scopes) + "}"
}

func quotedList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// validateResourceQuota is Kubernetes' ValidateResourceQuota (and, given
// old, ValidateResourceQuotaUpdate: the scopes are immutable).
func validateResourceQuota(q, old *corev1.ResourceQuota) field.ErrorList {
	sp := field.NewPath("spec")
	spec := q.GetSpec()
	errs := validateQuotaQuantities(spec.GetHard(), sp.Child("hard"))
	hard := sortedKeys(spec.GetHard())
	if scopes := spec.GetScopes(); len(scopes) > 0 {
		p := sp.Child("scopes")
		for _, sc := range scopes {
			if !slices.Contains(quotaScopes, sc) {
				errs = append(errs, field.Invalid(p, scopesLiteral(scopes), "unsupported scope"))
			}
			for _, k := range hard {
				if isStandardQuotaResource(k) && !scopeValidFor(sc, k) {
					errs = append(errs, field.Invalid(p, scopesLiteral(scopes), "unsupported scope applied to resource"))
				}
			}
		}
		if conflicting(scopes) {
			errs = append(errs, field.Invalid(p, scopesLiteral(scopes), "conflicting scopes"))
		}
	}
	if sel := spec.GetScopeSelector(); sel != nil {
		p := sp.Child("scopeSelector", "matchExpressions")
		var names []string
		for _, req := range sel.GetMatchExpressions() {
			sc := req.GetScopeName()
			if !slices.Contains(quotaScopes, sc) {
				errs = append(errs, field.Invalid(p.Child("scopeName"), sc, "unsupported scope"))
			}
			for _, k := range hard {
				if isStandardQuotaResource(k) && !scopeValidFor(sc, k) {
					errs = append(errs, field.Invalid(p, selectorLiteral(sel), "unsupported scope applied to resource"))
				}
			}
			switch sc {
			case "BestEffort", "NotBestEffort", "Terminating", "NotTerminating", "CrossNamespacePodAffinity":
				if req.GetOperator() != "Exists" {
					errs = append(errs, field.Invalid(p.Child("operator"), req.GetOperator(),
						"must be 'Exists' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity"))
				}
			}
			switch req.GetOperator() {
			case "In", "NotIn":
				if len(req.GetValues()) == 0 {
					errs = append(errs, field.Required(p.Child("values"), "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector"))
				}
			case "Exists", "DoesNotExist":
				if len(req.GetValues()) != 0 {
					errs = append(errs, field.Invalid(p.Child("values"), "[]string{"+quotedList(req.GetValues())+"}",
						"must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector"))
				}
			default:
				errs = append(errs, field.Invalid(p.Child("operator"), req.GetOperator(), "not a valid selector operator"))
			}
			names = append(names, sc)
		}
		if conflicting(names) {
			errs = append(errs, field.Invalid(p, scopesLiteral(spec.GetScopes()), "conflicting scopes"))
		}
	}
	if old == nil {
		errs = append(errs, validateQuotaQuantities(q.GetStatus().GetHard(), field.NewPath("status", "hard"))...)
		errs = append(errs, validateQuotaQuantities(q.GetStatus().GetUsed(), field.NewPath("status", "used"))...)
		return errs
	}
	a, b := slices.Clone(spec.GetScopes()), slices.Clone(old.GetSpec().GetScopes())
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(slices.Compact(a), slices.Compact(b)) {
		errs = append(errs, field.Invalid(sp.Child("scopes"), scopesLiteral(spec.GetScopes()), "field is immutable"))
	}
	return errs
}

// validateResourceQuotaStatus checks a status write's hard and used lists.
func validateResourceQuotaStatus(q *corev1.ResourceQuota) field.ErrorList {
	errs := validateQuotaQuantities(q.GetStatus().GetHard(), field.NewPath("status", "hard"))
	return append(errs, validateQuotaQuantities(q.GetStatus().GetUsed(), field.NewPath("status", "used"))...)
}

func conflicting(scopes []string) bool {
	return (slices.Contains(scopes, "BestEffort") && slices.Contains(scopes, "NotBestEffort")) ||
		(slices.Contains(scopes, "Terminating") && slices.Contains(scopes, "NotTerminating"))
}

// goLiteral is a value printed verbatim in a refusal (field.Error quotes
// strings; kube-apiserver prints these Go values with %#v).
type goLiteral string

func (g goLiteral) String() string { return string(g) }

func scopesLiteral(scopes []string) any {
	if scopes == nil {
		return goLiteral("[]core.ResourceQuotaScope(nil)")
	}
	return goLiteral(scopesValue(scopes))
}

func selectorLiteral(sel *corev1.ScopeSelector) any {
	parts := make([]string, 0, len(sel.GetMatchExpressions()))
	for _, r := range sel.GetMatchExpressions() {
		vals := "[]string(nil)"
		if r.GetValues() != nil {
			vals = "[]string{" + quotedList(r.GetValues()) + "}"
		}
		parts = append(parts, fmt.Sprintf("core.ScopedResourceSelectorRequirement{ScopeName:%q, Operator:%q, Values:%s}", r.GetScopeName(), r.GetOperator(), vals))
	}
	return goLiteral("&core.ScopeSelector{MatchExpressions:[]core.ScopedResourceSelectorRequirement{" + strings.Join(parts, ", ") + "}}")
}

// validateLimitRange is Kubernetes' ValidateLimitRange.
func validateLimitRange(lr *corev1.LimitRange) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	p := field.NewPath("spec", "limits")
	for i, l := range lr.GetSpec().GetLimits() {
		ip := p.Index(i)
		typ := l.GetType()
		for _, msg := range validation.IsQualifiedName(typ) {
			errs = append(errs, field.Invalid(ip.Child("type"), typ, msg))
		}
		if len(validation.IsQualifiedName(typ)) == 0 && !strings.Contains(typ, "/") &&
			!slices.Contains([]string{"Pod", "Container", "PersistentVolumeClaim"}, typ) {
			errs = append(errs, field.Invalid(ip.Child("type"), typ, "must be a standard limit type or fully qualified"))
		}
		if seen[typ] {
			errs = append(errs, field.Duplicate(ip.Child("type"), typ))
		}
		seen[typ] = true
		nameErrs := func(name string, fp *field.Path) field.ErrorList {
			if typ == "Pod" || typ == "Container" {
				return validateContainerResourceName(name, fp)
			}
			return validateResourceName(name, fp)
		}
		lists := map[string]map[string]resource.Quantity{}
		keys := map[string]bool{}
		read := func(child string, m map[string]string) {
			lists[child] = map[string]resource.Quantity{}
			for _, k := range sortedKeys(m) {
				fp := ip.Child(child).Key(k)
				errs = append(errs, nameErrs(k, fp)...)
				keys[k] = true
				q, ferr := parseQuantity(m[k], fp)
				if ferr != nil {
					errs = append(errs, ferr)
					continue
				}
				lists[child][k] = q
			}
		}
		read("max", l.GetMax())
		read("min", l.GetMin())
		if typ == "Pod" {
			if len(l.GetDefault()) > 0 {
				errs = append(errs, field.Forbidden(ip.Child("default"), "may not be specified when `type` is 'Pod'"))
			}
			if len(l.GetDefaultRequest()) > 0 {
				errs = append(errs, field.Forbidden(ip.Child("defaultRequest"), "may not be specified when `type` is 'Pod'"))
			}
		} else {
			read("default", l.GetDefault())
			read("defaultRequest", l.GetDefaultRequest())
		}
		if typ == "PersistentVolumeClaim" {
			_, hasMin := l.GetMin()["storage"]
			_, hasMax := l.GetMax()["storage"]
			if !hasMin && !hasMax {
				errs = append(errs, field.Required(ip.Child("limits"), "either minimum or maximum storage value is required, but neither was provided"))
			}
		}
		read("maxLimitRequestRatio", l.GetMaxLimitRequestRatio())
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			minQ, hasMin := lists["min"][k]
			maxQ, hasMax := lists["max"][k]
			def, hasDef := lists["default"][k]
			defReq, hasDefReq := lists["defaultRequest"][k]
			ratio, hasRatio := lists["maxLimitRequestRatio"][k]
			if hasMin && hasMax && minQ.Cmp(maxQ) > 0 {
				errs = append(errs, field.Invalid(ip.Child("min").Key(k), minQ, fmt.Sprintf("min value %s is greater than max value %s", minQ.String(), maxQ.String())))
			}
			if hasDefReq && hasMin && minQ.Cmp(defReq) > 0 {
				errs = append(errs, field.Invalid(ip.Child("defaultRequest").Key(k), defReq, fmt.Sprintf("min value %s is greater than default request value %s", minQ.String(), defReq.String())))
			}
			if hasDefReq && hasMax && defReq.Cmp(maxQ) > 0 {
				errs = append(errs, field.Invalid(ip.Child("defaultRequest").Key(k), defReq, fmt.Sprintf("default request value %s is greater than max value %s", defReq.String(), maxQ.String())))
			}
			if hasDefReq && hasDef && defReq.Cmp(def) > 0 {
				errs = append(errs, field.Invalid(ip.Child("defaultRequest").Key(k), defReq, fmt.Sprintf("default request value %s is greater than default limit value %s", defReq.String(), def.String())))
			}
			if hasDef && hasMin && minQ.Cmp(def) > 0 {
				errs = append(errs, field.Invalid(ip.Child("default").Key(k), minQ, fmt.Sprintf("min value %s is greater than default value %s", minQ.String(), def.String())))
			}
			if hasDef && hasMax && def.Cmp(maxQ) > 0 {
				errs = append(errs, field.Invalid(ip.Child("default").Key(k), maxQ, fmt.Sprintf("default value %s is greater than max value %s", def.String(), maxQ.String())))
			}
			if hasRatio && ratio.Cmp(*resource.NewQuantity(1, resource.DecimalSI)) < 0 {
				errs = append(errs, field.Invalid(ip.Child("maxLimitRequestRatio").Key(k), ratio, fmt.Sprintf("ratio %s is less than 1", ratio.String())))
			}
			if hasRatio && hasMin && hasMax {
				r, lo, hi := float64(ratio.Value()), minQ.Value(), maxQ.Value()
				if ratio.Value() < resource.MaxMilliValue && lo < resource.MaxMilliValue && hi < resource.MaxMilliValue {
					r, lo, hi = float64(ratio.MilliValue())/1000, minQ.MilliValue(), maxQ.MilliValue()
				}
				if limit := float64(hi) / float64(lo); r > limit {
					errs = append(errs, field.Invalid(ip.Child("maxLimitRequestRatio").Key(k), ratio, fmt.Sprintf("ratio %s is greater than max/min = %f", ratio.String(), limit)))
				}
			}
			overcommit := isNativeResource(k) && !isHugePages(k)
			if !overcommit && hasDef && hasDefReq && def.Cmp(defReq) != 0 {
				errs = append(errs, field.Invalid(ip.Child("defaultRequest").Key(k), defReq, fmt.Sprintf("default value %s must equal to defaultRequest value %s in %s", def.String(), defReq.String(), k)))
			}
		}
	}
	return errs
}

// defaultLimitRange is Kubernetes' SetDefaults_LimitRangeItem: a Container
// item's default limit is its max, and its default request its default
// limit, else its min. Every quantity is written in canonical form, as
// Kubernetes serializes it.
func defaultLimitRange(lr *corev1.LimitRange) {
	for _, l := range lr.GetSpec().GetLimits() {
		if l.GetType() == "Container" {
			if l.Default == nil {
				l.Default = map[string]string{}
			}
			if l.DefaultRequest == nil {
				l.DefaultRequest = map[string]string{}
			}
			fill := func(into, from map[string]string) {
				for k, v := range from {
					if _, ok := into[k]; !ok {
						into[k] = v
					}
				}
			}
			fill(l.Default, l.Max)
			fill(l.DefaultRequest, l.Default)
			fill(l.DefaultRequest, l.Min)
		}
	}
	// A refusal prints the quantities as sent: only a limit range that
	// will be stored is rewritten.
	if len(validateLimitRange(lr)) > 0 {
		return
	}
	for _, l := range lr.GetSpec().GetLimits() {
		for _, m := range []map[string]string{l.Max, l.Min, l.Default, l.DefaultRequest, l.MaxLimitRequestRatio} {
			for k, v := range m {
				if q, err := resource.ParseQuantity(v); err == nil {
					m[k] = q.String()
				}
			}
		}
	}
}

// defaultResourceQuota writes the quantities of a quota's hard list that
// validation accepts in canonical form ("0.5" is "500m"), as Kubernetes
// serializes them; the rest are left as sent for the refusal to print.
func defaultResourceQuota(q *corev1.ResourceQuota) {
	for k, v := range q.GetSpec().GetHard() {
		if len(validateQuotaQuantities(map[string]string{k: v}, field.NewPath("spec", "hard"))) == 0 {
			qt, _ := resource.ParseQuantity(v)
			q.Spec.Hard[k] = qt.String()
		}
	}
}
