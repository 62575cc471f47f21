// This file holds the validation of an admission webhook in a
// Mutating- or ValidatingWebhookConfiguration: its name, client config,
// rules, failure policy, side effects, timeout and review versions.

package apiserver

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
)

func validateWebhook(p *field.Path, names sets.Set[string], name string, cc *admissionregistrationv1.WebhookClientConfig, rules []*admissionregistrationv1.RuleWithOperations, failurePolicy, sideEffects *string, timeout *int32, versions []string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsFullyQualifiedName(field.NewPath("name"), name) {
		errs = append(errs, field.Invalid(p.Child("name"), name, msg.Detail))
	}
	if names.Has(name) {
		errs = append(errs, field.Duplicate(p.Child("name"), name))
	}
	names.Insert(name)
	switch {
	case cc == nil || (cc.Url == nil && cc.Service == nil):
		errs = append(errs, field.Required(p.Child("clientConfig"), "exactly one of url or service is required"))
	case cc.Url != nil && cc.Service != nil:
		errs = append(errs, field.Required(p.Child("clientConfig"), "exactly one of url or service is required"))
	case cc.Url != nil && !strings.HasPrefix(cc.GetUrl(), "https://"):
		errs = append(errs, field.Invalid(p.Child("clientConfig", "url"), cc.GetUrl(), "'https' is the only allowed URL scheme"))
	case cc.Service != nil:
		if cc.Service.GetName() == "" {
			errs = append(errs, field.Required(p.Child("clientConfig", "service", "name"), "service name is required"))
		}
		if cc.Service.GetNamespace() == "" {
			errs = append(errs, field.Required(p.Child("clientConfig", "service", "namespace"), "service namespace is required"))
		}
	}
	for i, r := range rules {
		rp := p.Child("rules").Index(i)
		if len(r.GetOperations()) == 0 {
			errs = append(errs, field.Required(rp.Child("operations"), ""))
		}
		for j, op := range r.GetOperations() {
			errs = append(errs, validateEnum(op, rp.Child("operations").Index(j), true, "*", "CREATE", "UPDATE", "DELETE", "CONNECT")...)
		}
		if len(r.GetResources()) == 0 {
			errs = append(errs, field.Required(rp.Child("resources"), ""))
		}
		errs = append(errs, validateEnum(r.GetScope(), rp.Child("scope"), false, "*", "Cluster", "Namespaced")...)
	}
	if failurePolicy != nil {
		errs = append(errs, validateEnum(*failurePolicy, p.Child("failurePolicy"), true, "Ignore", "Fail")...)
	}
	if sideEffects == nil {
		errs = append(errs, field.Required(p.Child("sideEffects"), "must specify one of None, NoneOnDryRun"))
	} else {
		errs = append(errs, validateEnum(*sideEffects, p.Child("sideEffects"), true, "None", "NoneOnDryRun")...)
	}
	if timeout != nil && (*timeout < 1 || *timeout > 30) {
		errs = append(errs, field.Invalid(p.Child("timeoutSeconds"), *timeout, "the timeout value must be between 1 and 30 seconds"))
	}
	hasV1 := false
	for _, v := range versions {
		hasV1 = hasV1 || v == "v1" || v == "v1beta1"
	}
	if !hasV1 {
		errs = append(errs, field.Invalid(p.Child("admissionReviewVersions"), versions, "must include at least one of v1, v1beta1"))
	}
	return errs
}
