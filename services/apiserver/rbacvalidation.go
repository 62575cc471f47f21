// This file holds the validation of RBAC objects' contents, as
// Kubernetes checks them: policy rules, role references and subjects.

package apiserver

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
)

func validateRules(rules []*rbacv1.PolicyRule) field.ErrorList {
	var errs field.ErrorList
	for i, r := range rules {
		p := field.NewPath("rules").Index(i)
		if len(r.GetVerbs()) == 0 {
			errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(r.GetNonResourceUrls()) > 0 {
			if len(r.GetApiGroups()) > 0 || len(r.GetResources()) > 0 {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), r.GetNonResourceUrls(), "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(r.GetApiGroups()) == 0 {
			errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(r.GetResources()) == 0 {
			errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

func validateBinding(ref *rbacv1.RoleRef, subjects []*rbacv1.Subject, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("roleRef")
	if ref.GetApiGroup() != "rbac.authorization.k8s.io" {
		errs = append(errs, field.NotSupported(p.Child("apiGroup"), ref.GetApiGroup(), []string{"rbac.authorization.k8s.io"}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	errs = append(errs, validateEnum(ref.GetKind(), p.Child("kind"), true, kinds...)...)
	if ref.GetName() == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	for i, s := range subjects {
		sp := field.NewPath("subjects").Index(i)
		errs = append(errs, validateEnum(s.GetKind(), sp.Child("kind"), true, "ServiceAccount", "User", "Group")...)
		if s.GetName() == "" {
			errs = append(errs, field.Required(sp.Child("name"), ""))
		}
		if s.GetKind() == "ServiceAccount" && s.GetNamespace() == "" && !namespaced {
			errs = append(errs, field.Required(sp.Child("namespace"), ""))
		}
	}
	return errs
}
