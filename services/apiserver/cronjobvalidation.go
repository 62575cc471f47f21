// This file holds the validation of CronJobs: the schedule, the time
// zone and the Job template, with Kubernetes' messages.

package apiserver

import (
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	k8smetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
)

// validTimeZonePart reports whether part may be one part of an IANA time
// zone name: 1 to 14 ASCII letters, digits, '.', '-', '_' or '+'.
func validTimeZonePart(part string) bool {
	if len(part) < 1 || len(part) > 14 {
		return false
	}
	for _, r := range part {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_+", r)) {
			return false
		}
	}
	return true
}

// validateCronJob is ValidateCronJobCreate (old nil) and
// ValidateCronJobUpdate.
func validateCronJob(o, old *batchv1.CronJob) field.ErrorList {
	var errs field.ErrorList
	s, p := o.GetSpec(), field.NewPath("spec")
	if old == nil && len(meta(o).GetName()) > validation.DNS1035LabelMaxLength-11 {
		// The controller names a CronJob's Jobs <name>-<11 digits>.
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), meta(o).GetName(), "must be no more than 52 characters"))
	}
	if s.GetSchedule() == "" {
		errs = append(errs, field.Required(p.Child("schedule"), ""))
	} else {
		allowTZ := old != nil && strings.Contains(old.GetSpec().GetSchedule(), "TZ")
		if _, err := cron.ParseStandard(s.GetSchedule()); err != nil {
			errs = append(errs, field.Invalid(p.Child("schedule"), s.GetSchedule(), err.Error()))
		}
		switch {
		case allowTZ && strings.Contains(s.GetSchedule(), "TZ") && s.TimeZone != nil:
			errs = append(errs, field.Invalid(p.Child("schedule"), s.GetSchedule(), "cannot use both timeZone field and TZ or CRON_TZ in schedule"))
		case !allowTZ && strings.Contains(s.GetSchedule(), "TZ"):
			errs = append(errs, field.Invalid(p.Child("schedule"), s.GetSchedule(), "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"))
		}
	}
	if v := s.StartingDeadlineSeconds; v != nil && *v < 0 {
		errs = append(errs, field.Invalid(p.Child("startingDeadlineSeconds"), *v, "must be greater than or equal to 0"))
	}
	if old == nil || s.GetTimeZone() != old.GetSpec().GetTimeZone() || (s.TimeZone == nil) != (old.GetSpec().TimeZone == nil) {
		errs = append(errs, validateTimeZone(s.TimeZone, p.Child("timeZone"))...)
	}
	errs = append(errs, validateEnum(s.GetConcurrencyPolicy(), p.Child("concurrencyPolicy"), true, "Allow", "Forbid", "Replace")...)
	jp := p.Child("jobTemplate")
	js := s.GetJobTemplate().GetSpec()
	errs = append(errs, validateJobSpec(js, jp.Child("spec"))...)
	if js.GetSelector() != nil {
		errs = append(errs, field.Invalid(jp.Child("spec", "selector"), kubeValue[k8smetav1.LabelSelector](js.GetSelector()), "`selector` will be auto-generated"))
	}
	if js.GetManualSelector() {
		errs = append(errs, field.NotSupported(jp.Child("spec", "manualSelector"), js.GetManualSelector(), []string{"nil", "false"}))
	}
	errs = append(errs, nonNegative(s.SuccessfulJobsHistoryLimit, p.Child("successfulJobsHistoryLimit"))...)
	errs = append(errs, nonNegative(s.FailedJobsHistoryLimit, p.Child("failedJobsHistoryLimit"))...)
	return errs
}

// validateTimeZone is Kubernetes' check of a CronJob's timeZone: an IANA
// name the server's time zone database knows, not Local.
func validateTimeZone(tz *string, p *field.Path) field.ErrorList {
	if tz == nil {
		return nil
	}
	if *tz == "" {
		return field.ErrorList{field.Invalid(p, *tz, "timeZone must be nil or non-empty string")}
	}
	for _, part := range strings.Split(*tz, "/") {
		if part == "." || part == ".." || strings.HasPrefix(part, "-") || !validTimeZonePart(part) {
			return field.ErrorList{field.Invalid(p, *tz, "unknown time zone "+*tz)}
		}
	}
	var errs field.ErrorList
	if strings.EqualFold(*tz, "Local") {
		errs = append(errs, field.Invalid(p, *tz, "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"))
	}
	if _, err := time.LoadLocation(*tz); err != nil {
		errs = append(errs, field.Invalid(p, *tz, err.Error()))
	}
	return errs
}
