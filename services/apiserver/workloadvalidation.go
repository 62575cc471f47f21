// This file holds the validation the workload kinds share: label
// selectors against their pod template, Deployment strategies, and
// int-or-percent fields.

package apiserver

import (
	"strconv"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubeconv"
)

// labelSelectorString is s in selector syntax, as Kubernetes shows a
// selector in messages; "" if it is invalid.
func labelSelectorString(s *metav1.LabelSelector) string {
	sel, err := kubeconv.Selector(s)
	if err != nil {
		return ""
	}
	return sel.String()
}

func validateSelectorAndTemplate(sel *metav1.LabelSelector, t *corev1.PodTemplateSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sel == nil {
		errs = append(errs, field.Required(p.Child("selector"), ""))
	} else {
		errs = append(errs, validateLabels(sel.GetMatchLabels(), p.Child("selector", "matchLabels"))...)
		s, err := kubeconv.Selector(sel)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p.Child("selector"), labelSelectorString(sel), err.Error()))
		case s.Empty():
			errs = append(errs, field.Invalid(p.Child("selector"), "", "empty selector is invalid for deployment"))
		case !s.Matches(labels.Set(t.GetMetadata().GetLabels())):
			errs = append(errs, field.Invalid(p.Child("template", "metadata", "labels"), t.GetMetadata().GetLabels(), "`selector` does not match template `labels`"))
		}
	}
	if t == nil {
		return append(errs, field.Required(p.Child("template"), ""))
	}
	errs = append(errs, validateLabels(t.GetMetadata().GetLabels(), p.Child("template", "metadata", "labels"))...)
	errs = append(errs, validatePodSpec(t.GetSpec(), p.Child("template", "spec"))...)
	if rp := t.GetSpec().GetRestartPolicy(); rp != "" && rp != "Always" {
		errs = append(errs, field.NotSupported(p.Child("template", "spec", "restartPolicy"), rp, []string{"Always"}))
	}
	return errs
}

func validateStrategy(s *appsv1.DeploymentStrategy, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateEnum(s.GetType(), p.Child("type"), true, "Recreate", "RollingUpdate")...)
	ru := s.GetRollingUpdate()
	if s.GetType() == "Recreate" && ru != nil {
		errs = append(errs, field.Forbidden(p.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
	}
	if s.GetType() == "RollingUpdate" && ru != nil {
		// As Kubernetes' ValidateRollingUpdateDeployment, in its order.
		rp := p.Child("rollingUpdate")
		unavail, surge := kubeconv.IntOrString(ru.GetMaxUnavailable()), kubeconv.IntOrString(ru.GetMaxSurge())
		errs = append(errs, validatePositiveIntOrPercent(unavail, rp.Child("maxUnavailable"))...)
		errs = append(errs, validatePositiveIntOrPercent(surge, rp.Child("maxSurge"))...)
		if intOrPercentValue(unavail) == 0 && intOrPercentValue(surge) == 0 {
			errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), unavail, "may not be 0 when `maxSurge` is 0"))
		}
		errs = append(errs, notMoreThan100Percent(unavail, rp.Child("maxUnavailable"))...)
	}
	return errs
}

// validatePositiveIntOrPercent, percentValue, intOrPercentValue and
// notMoreThan100Percent are apps validation's checks of an int-or-percent
// (maxSurge, maxUnavailable, a budget's minAvailable): the value is
// Kubernetes' own IntOrString, so a message prints it as kube-apiserver's
// does.
func validatePositiveIntOrPercent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if v.Type == intstr.String {
		for _, msg := range validation.IsValidPercent(v.StrVal) {
			errs = append(errs, field.Invalid(p, v, msg))
		}
	} else if v.IntVal < 0 {
		errs = append(errs, field.Invalid(p, int64(v.IntVal), "must be greater than or equal to 0"))
	}
	return errs
}

// percentValue is N for a valid "N%".
func percentValue(v intstr.IntOrString) (int, bool) {
	if v.Type != intstr.String || len(validation.IsValidPercent(v.StrVal)) != 0 {
		return 0, false
	}
	n, _ := strconv.Atoi(v.StrVal[:len(v.StrVal)-1])
	return n, true
}

func intOrPercentValue(v intstr.IntOrString) int {
	if n, ok := percentValue(v); ok {
		return n
	}
	return v.IntValue()
}

func notMoreThan100Percent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	if n, ok := percentValue(v); ok && n > 100 {
		return field.ErrorList{field.Invalid(p, v, "must not be greater than 100%")}
	}
	return nil
}
