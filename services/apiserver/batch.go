// This file holds what the API service does for batch/v1 Jobs and CronJobs
// beyond the generic path, as Kubernetes' batch defaults, strategy and
// validation do: the defaults, the selector a Job gets when manualSelector
// is unset, and the checks of specs, updates and status writes.
package apiserver

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/proto"
	k8sbatchv1 "k8s.io/api/batch/v1"
	k8scorev1 "k8s.io/api/core/v1"
	k8smetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubeconv"
	"github.com/kplane/kplane/proto/kubejson"
)

// The labels a Job's generated selector and its pods carry.
const (
	jobNameLabel             = "batch.kubernetes.io/job-name"
	jobControllerUIDLabel    = "batch.kubernetes.io/controller-uid"
	legacyJobNameLabel       = "job-name"
	legacyControllerUIDLabel = "controller-uid"
)

// Kubernetes' limits on Indexed Jobs.
const (
	maxParallelismForIndexedJob   = 100000
	maxFailedIndexesForIndexedJob = 100000
	completionsSoftLimit          = 100000
	maxPodFailurePolicyRules      = 20
	maxManagedByLength            = 63
)

// defaultJobSpec is SetDefaults_Job on a spec (the labels aside).
func defaultJobSpec(s *batchv1.JobSpec) {
	if s.Completions == nil && s.Parallelism == nil {
		s.Completions = proto.Int32(1)
	}
	if s.Parallelism == nil {
		s.Parallelism = proto.Int32(1)
	}
	if s.BackoffLimit == nil {
		if s.BackoffLimitPerIndex != nil {
			s.BackoffLimit = proto.Int32(math.MaxInt32)
		} else {
			s.BackoffLimit = proto.Int32(6)
		}
	}
	if s.CompletionMode == nil {
		s.CompletionMode = proto.String("NonIndexed")
	}
	if s.Suspend == nil {
		s.Suspend = proto.Bool(false)
	}
	for _, r := range s.GetPodFailurePolicy().GetRules() {
		for _, c := range r.OnPodConditions {
			if c.Status == "" {
				c.Status = "True"
			}
		}
	}
	if s.PodReplacementPolicy == nil {
		if s.PodFailurePolicy != nil {
			s.PodReplacementPolicy = proto.String("Failed")
		} else {
			s.PodReplacementPolicy = proto.String("TerminatingOrFailed")
		}
	}
	if s.ManualSelector == nil {
		s.ManualSelector = proto.Bool(false)
	}
	defaultTemplate(&s.Template)
}

// defaultJob is SetDefaults_Job: the spec's defaults, and a Job without
// labels takes its template's (Kubernetes does this on every decode, so a
// Job created without labels shows its template's generated ones).
func defaultJob(o *batchv1.Job) {
	if o.Spec == nil {
		o.Spec = &batchv1.JobSpec{}
	}
	defaultJobSpec(o.Spec)
	if tl := o.Spec.GetTemplate().GetMetadata().GetLabels(); tl != nil && len(meta(o).GetLabels()) == 0 {
		m := meta(o)
		m.Labels = make(map[string]string, len(tl))
		for k, v := range tl {
			m.Labels[k] = v
		}
	}
}

// defaultCronJob is SetDefaults_CronJob: the CronJob's own fields and the
// pod template's; the job template's spec keeps what the client sent.
func defaultCronJob(o *batchv1.CronJob) {
	if o.Spec == nil {
		o.Spec = &batchv1.CronJobSpec{}
	}
	s := o.Spec
	if s.ConcurrencyPolicy == "" {
		s.ConcurrencyPolicy = "Allow"
	}
	if s.Suspend == nil {
		s.Suspend = proto.Bool(false)
	}
	if s.SuccessfulJobsHistoryLimit == nil {
		s.SuccessfulJobsHistoryLimit = proto.Int32(3)
	}
	if s.FailedJobsHistoryLimit == nil {
		s.FailedJobsHistoryLimit = proto.Int32(1)
	}
	if s.JobTemplate == nil {
		s.JobTemplate = &batchv1.JobTemplateSpec{}
	}
	if s.JobTemplate.Spec == nil {
		s.JobTemplate.Spec = &batchv1.JobSpec{}
	}
	defaultTemplate(&s.JobTemplate.Spec.Template)
}

// generateJobSelector is the Job strategy's create step (after mutating
// admission, as Kubernetes' PrepareForCreate): unless manualSelector is
// set, the template gets the job-name and controller-uid labels (both the
// batch.kubernetes.io ones and the legacy ones; a label the client set is
// kept, and validation refuses it if it is wrong) and the selector matches
// the controller-uid. The Job's status starts empty.
func generateJobSelector(o *batchv1.Job) {
	o.Status = nil
	s := o.GetSpec()
	if s == nil || s.GetManualSelector() {
		return
	}
	if s.Template == nil {
		s.Template = &corev1.PodTemplateSpec{}
	}
	if s.Template.Metadata == nil {
		s.Template.Metadata = &metav1.ObjectMeta{}
	}
	tm := s.Template.Metadata
	if tm.Labels == nil {
		tm.Labels = map[string]string{}
	}
	m := meta(o)
	for _, k := range []string{legacyJobNameLabel, jobNameLabel} {
		if _, ok := tm.Labels[k]; !ok {
			tm.Labels[k] = m.GetName()
		}
	}
	for _, k := range []string{legacyControllerUIDLabel, jobControllerUIDLabel} {
		if _, ok := tm.Labels[k]; !ok {
			tm.Labels[k] = m.GetUid()
		}
	}
	if s.Selector == nil {
		s.Selector = &metav1.LabelSelector{}
	}
	if s.Selector.MatchLabels == nil {
		s.Selector.MatchLabels = map[string]string{}
	}
	if _, ok := s.Selector.MatchLabels[jobControllerUIDLabel]; !ok {
		s.Selector.MatchLabels[jobControllerUIDLabel] = m.GetUid()
	}
	// As on Kubernetes' next decode: a Job without labels takes the
	// template's, now with the generated ones.
	defaultJob(o)
}

// kubeValue converts a kplane message to its k8s.io/api Go type, so that an
// Invalid error prints the value as Kubernetes does; on failure it returns
// the message's JSON.
func kubeValue[T any](m proto.Message) any {
	b, err := kubejson.Marshal(m)
	if err != nil {
		return string(b)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return string(b)
	}
	return v
}

// nonNegative is ValidateNonnegativeField for an optional int32.
func nonNegative(v *int32, p *field.Path) field.ErrorList {
	if v != nil && *v < 0 {
		return field.ErrorList{field.Invalid(p, int64(*v), "must be greater than or equal to 0")}
	}
	return nil
}

// validateJob is ValidateJob (and, with old, ValidateJobUpdate).
func validateJob(o, old *batchv1.Job) field.ErrorList {
	var errs field.ErrorList
	s, p := o.GetSpec(), field.NewPath("spec")
	m := meta(o)
	requirePrefixed := true
	if old != nil {
		ol := old.GetSpec().GetTemplate().GetMetadata().GetLabels()
		_, a := ol[jobNameLabel]
		_, b := ol[jobControllerUIDLabel]
		requirePrefixed = a && b
	}
	errs = append(errs, validateGeneratedJobSelector(o, requirePrefixed)...)
	errs = append(errs, validateJobSpec(s, p)...)
	if s.GetSelector() == nil {
		errs = append(errs, field.Required(p.Child("selector"), ""))
	} else {
		errs = append(errs, validateLabels(s.GetSelector().GetMatchLabels(), p.Child("selector", "matchLabels"))...)
		sel, err := kubeconv.Selector(s.GetSelector())
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p.Child("selector"), labelSelectorString(s.GetSelector()), err.Error()))
		case !sel.Matches(labels.Set(s.GetTemplate().GetMetadata().GetLabels())):
			errs = append(errs, field.Invalid(p.Child("template", "metadata", "labels"), s.GetTemplate().GetMetadata().GetLabels(), "`selector` does not match template `labels`"))
		}
	}
	if s.GetCompletionMode() == "Indexed" && s.Completions != nil && *s.Completions > 0 {
		host := fmt.Sprintf("%s-%d", m.GetName(), *s.Completions-1)
		if len(validation.IsDNS1123Label(host)) > 0 {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), m.GetName(), "will not able to create pod with invalid DNS label: "+host))
		}
	}
	if old == nil {
		return errs
	}
	os := old.GetSpec()
	// completions: immutable, but an Indexed Job may change it together
	// with parallelism.
	if s.GetCompletionMode() != "Indexed" {
		if !proto.Equal(wrapInt32(s.Completions), wrapInt32(os.Completions)) {
			errs = append(errs, immutable(p.Child("completions"), s.Completions))
		}
	} else if !proto.Equal(wrapInt32(s.Completions), wrapInt32(os.Completions)) && s.Completions != nil && s.GetCompletions() != s.GetParallelism() {
		errs = append(errs, field.Invalid(p.Child("completions"), s.GetCompletions(), "can only be modified in tandem with spec.parallelism"))
	}
	if !proto.Equal(s.GetSelector(), os.GetSelector()) {
		errs = append(errs, immutable(p.Child("selector"), kubeValue[k8smetav1.LabelSelector](s.GetSelector())))
	}
	// The template is immutable, but a suspended Job that never started
	// may change its scheduling directives, labels and annotations.
	nt, ot := proto.Clone(s.GetTemplate()).(*corev1.PodTemplateSpec), proto.Clone(os.GetTemplate()).(*corev1.PodTemplateSpec)
	if os.GetSuspend() && old.GetStatus().GetStartTime() == nil {
		for _, t := range []*corev1.PodTemplateSpec{nt, ot} {
			if t.Metadata != nil {
				t.Metadata.Labels, t.Metadata.Annotations = nil, nil
			}
			if t.Spec != nil {
				t.Spec.NodeSelector, t.Spec.Tolerations, t.Spec.SchedulingGates = nil, nil, nil
				if t.Spec.Affinity != nil {
					t.Spec.Affinity.NodeAffinity = nil
					if proto.Equal(t.Spec.Affinity, &corev1.Affinity{}) {
						t.Spec.Affinity = nil
					}
				}
			}
		}
	}
	if !proto.Equal(nt, ot) {
		errs = append(errs, immutable(p.Child("template"), kubeValue[k8scorev1.PodTemplateSpec](s.GetTemplate())))
	}
	if s.GetCompletionMode() != os.GetCompletionMode() {
		errs = append(errs, immutable(p.Child("completionMode"), s.GetCompletionMode()))
	}
	if !proto.Equal(s.GetPodFailurePolicy(), os.GetPodFailurePolicy()) {
		errs = append(errs, immutable(p.Child("podFailurePolicy"), "podFailurePolicy"))
	}
	if !proto.Equal(wrapInt32(s.BackoffLimitPerIndex), wrapInt32(os.BackoffLimitPerIndex)) {
		errs = append(errs, immutable(p.Child("backoffLimitPerIndex"), s.BackoffLimitPerIndex))
	}
	if s.GetManagedBy() != os.GetManagedBy() || (s.ManagedBy == nil) != (os.ManagedBy == nil) {
		errs = append(errs, immutable(p.Child("managedBy"), s.ManagedBy))
	}
	if !proto.Equal(s.GetSuccessPolicy(), os.GetSuccessPolicy()) {
		errs = append(errs, immutable(p.Child("successPolicy"), "successPolicy"))
	}
	return errs
}

// wrapInt32 makes an optional int32 comparable with proto.Equal.
func wrapInt32(v *int32) proto.Message {
	if v == nil {
		return &metav1.IntOrString{}
	}
	return &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: *v}}
}

// immutable is ValidateImmutableField's error.
func immutable(p *field.Path, v any) *field.Error {
	return field.Invalid(p, v, "field is immutable")
}

// validateGeneratedJobSelector is Kubernetes' check that a generated
// selector and the template's labels name this Job.
func validateGeneratedJobSelector(o *batchv1.Job, requirePrefixed bool) field.ErrorList {
	s := o.GetSpec()
	if s.GetManualSelector() || s.GetSelector() == nil {
		return nil
	}
	var errs field.ErrorList
	m := meta(o)
	if m.GetUid() == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "uid"), ""))
	}
	tl := s.GetTemplate().GetMetadata().GetLabels()
	tp := field.NewPath("spec", "template", "metadata")
	has := func(k, v string) {
		got, ok := tl[k]
		switch {
		case !ok:
			errs = append(errs, field.Required(tp.Child("labels").Key(k), fmt.Sprintf("must be '%s'", v)))
		case got != v:
			errs = append(errs, field.Invalid(tp.Child("labels").Key(k), tl, fmt.Sprintf("must be '%s'", v)))
		}
	}
	has(legacyControllerUIDLabel, m.GetUid())
	has(legacyJobNameLabel, m.GetName())
	want := labels.Set{legacyControllerUIDLabel: m.GetUid(), legacyJobNameLabel: m.GetName()}
	if requirePrefixed {
		has(jobControllerUIDLabel, m.GetUid())
		has(jobNameLabel, m.GetName())
		want[jobControllerUIDLabel], want[jobNameLabel] = m.GetUid(), m.GetName()
	}
	if sel, err := kubeconv.Selector(s.GetSelector()); err == nil && !sel.Matches(want) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "selector"), kubeValue[k8smetav1.LabelSelector](s.GetSelector()), "`selector` not auto-generated"))
	}
	return errs
}

// validateJobSpec is Kubernetes' validateJobSpec: the checks a Job's spec
// and a CronJob's job template share.
func validateJobSpec(s *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s == nil {
		return field.ErrorList{field.Required(p, "")}
	}
	errs = append(errs, nonNegative(s.Parallelism, p.Child("parallelism"))...)
	errs = append(errs, nonNegative(s.Completions, p.Child("completions"))...)
	if v := s.ActiveDeadlineSeconds; v != nil && *v < 0 {
		errs = append(errs, field.Invalid(p.Child("activeDeadlineSeconds"), *v, "must be greater than or equal to 0"))
	}
	errs = append(errs, nonNegative(s.BackoffLimit, p.Child("backoffLimit"))...)
	errs = append(errs, nonNegative(s.TtlSecondsAfterFinished, p.Child("ttlSecondsAfterFinished"))...)
	errs = append(errs, nonNegative(s.BackoffLimitPerIndex, p.Child("backoffLimitPerIndex"))...)
	if s.MaxFailedIndexes != nil {
		errs = append(errs, nonNegative(s.MaxFailedIndexes, p.Child("maxFailedIndexes"))...)
		if s.BackoffLimitPerIndex == nil {
			errs = append(errs, field.Required(p.Child("backoffLimitPerIndex"), "when maxFailedIndexes is specified"))
		}
	}
	if s.ManagedBy != nil {
		errs = append(errs, validateDomainPrefixedPath(*s.ManagedBy, p.Child("managedBy"))...)
		if len(*s.ManagedBy) > maxManagedByLength {
			errs = append(errs, field.TooLong(p.Child("managedBy"), "", maxManagedByLength))
		}
	}
	indexed := s.GetCompletionMode() == "Indexed"
	if s.CompletionMode != nil {
		if !indexed && s.GetCompletionMode() != "NonIndexed" {
			errs = append(errs, field.NotSupported(p.Child("completionMode"), s.GetCompletionMode(), []string{"NonIndexed", "Indexed"}))
		}
		if indexed {
			if s.Completions == nil {
				errs = append(errs, field.Required(p.Child("completions"), "when completion mode is Indexed"))
			}
			if s.Parallelism != nil && *s.Parallelism > maxParallelismForIndexedJob {
				errs = append(errs, field.Invalid(p.Child("parallelism"), *s.Parallelism, fmt.Sprintf("must be less than or equal to %d when completion mode is Indexed", maxParallelismForIndexedJob)))
			}
			if s.Completions != nil && s.MaxFailedIndexes != nil && *s.MaxFailedIndexes > *s.Completions {
				errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *s.MaxFailedIndexes, "must be less than or equal to completions"))
			}
			if s.MaxFailedIndexes != nil && *s.MaxFailedIndexes > maxFailedIndexesForIndexedJob {
				errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *s.MaxFailedIndexes, fmt.Sprintf("must be less than or equal to %d", maxFailedIndexesForIndexedJob)))
			}
			if s.Completions != nil && *s.Completions > completionsSoftLimit && s.BackoffLimitPerIndex != nil && s.MaxFailedIndexes == nil {
				errs = append(errs, field.Required(p.Child("maxFailedIndexes"), fmt.Sprintf("must be specified when completions is above %d", completionsSoftLimit)))
			}
		}
	}
	if !indexed {
		if s.BackoffLimitPerIndex != nil {
			errs = append(errs, field.Invalid(p.Child("backoffLimitPerIndex"), *s.BackoffLimitPerIndex, "requires indexed completion mode"))
		}
		if s.MaxFailedIndexes != nil {
			errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *s.MaxFailedIndexes, "requires indexed completion mode"))
		}
	}
	if s.PodFailurePolicy != nil {
		errs = append(errs, validatePodFailurePolicy(s, p.Child("podFailurePolicy"))...)
	}
	if s.SuccessPolicy != nil {
		if !indexed {
			errs = append(errs, field.Invalid(p.Child("successPolicy"), kubeValue[k8sbatchv1.SuccessPolicy](s.SuccessPolicy), "requires indexed completion mode"))
		} else if len(s.SuccessPolicy.GetRules()) == 0 {
			errs = append(errs, field.Required(p.Child("successPolicy", "rules"), "at least one rules must be specified when the successPolicy is specified"))
		}
		for i, r := range s.SuccessPolicy.GetRules() {
			if indexed && r.SucceededIndexes == nil && r.SucceededCount == nil {
				errs = append(errs, field.Required(p.Child("successPolicy", "rules").Index(i), "at least one of succeededCount or succeededIndexes must be specified"))
			}
		}
	}
	if rp := s.PodReplacementPolicy; rp != nil {
		switch {
		case s.PodFailurePolicy != nil && *rp != "Failed":
			errs = append(errs, field.NotSupported(p.Child("podReplacementPolicy"), *rp, []string{"Failed"}))
		case *rp != "Failed" && *rp != "TerminatingOrFailed":
			errs = append(errs, field.NotSupported(p.Child("podReplacementPolicy"), *rp, []string{"Failed", "TerminatingOrFailed"}))
		}
	}
	t := s.GetTemplate()
	if t == nil {
		return append(errs, field.Required(p.Child("template"), ""))
	}
	errs = append(errs, validateLabels(t.GetMetadata().GetLabels(), p.Child("template", "metadata", "labels"))...)
	errs = append(errs, validatePodSpec(t.GetSpec(), p.Child("template", "spec"))...)
	switch rp := t.GetSpec().GetRestartPolicy(); {
	case rp == "Always" || rp == "":
		errs = append(errs, field.Required(p.Child("template", "spec", "restartPolicy"), `valid values: "OnFailure", "Never"`))
	case rp != "OnFailure" && rp != "Never":
		errs = append(errs, field.NotSupported(p.Child("template", "spec", "restartPolicy"), rp, []string{"OnFailure", "Never"}))
	case s.PodFailurePolicy != nil && rp != "Never":
		errs = append(errs, field.Invalid(p.Child("template", "spec", "restartPolicy"), rp, `only "Never" is supported when podFailurePolicy is specified`))
	}
	return errs
}

// validateDomainPrefixedPath is apimachinery's IsDomainPrefixedPath: a DNS
// subdomain, then a path.
func validateDomainPrefixedPath(v string, p *field.Path) field.ErrorList {
	parts := strings.SplitN(v, "/", 2)
	if len(parts) < 2 {
		return field.ErrorList{field.Invalid(p, v, "must be a domain-prefixed path (such as \"acme.io/foo\")")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(parts[0]) {
		errs = append(errs, field.Invalid(p, parts[0], msg))
	}
	return errs
}

// validatePodFailurePolicy checks a pod failure policy's rules as
// Kubernetes does (it is stored; the Job controller does not act on it).
func validatePodFailurePolicy(s *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	rules := s.GetPodFailurePolicy().GetRules()
	rp := p.Child("rules")
	if len(rules) > maxPodFailurePolicyRules {
		errs = append(errs, field.TooMany(rp, len(rules), maxPodFailurePolicyRules))
	}
	names := map[string]bool{}
	for _, c := range s.GetTemplate().GetSpec().GetContainers() {
		names[c.GetName()] = true
	}
	for _, c := range s.GetTemplate().GetSpec().GetInitContainers() {
		names[c.GetName()] = true
	}
	actions := []string{"Count", "FailIndex", "FailJob", "Ignore"}
	for i, r := range rules {
		ip := rp.Index(i)
		switch r.GetAction() {
		case "":
			errs = append(errs, field.Required(ip.Child("action"), fmt.Sprintf("valid values: %q", actions)))
		case "FailIndex":
			if s.BackoffLimitPerIndex == nil {
				errs = append(errs, field.Invalid(ip.Child("action"), r.GetAction(), "requires the backoffLimitPerIndex to be set"))
			}
		case "Count", "FailJob", "Ignore":
		default:
			errs = append(errs, field.NotSupported(ip.Child("action"), r.GetAction(), actions))
		}
		switch {
		case r.OnExitCodes != nil && len(r.OnPodConditions) > 0:
			errs = append(errs, field.Invalid(ip, field.OmitValueType{}, "specifying both OnExitCodes and OnPodConditions is not supported"))
		case r.OnExitCodes == nil && len(r.OnPodConditions) == 0:
			errs = append(errs, field.Invalid(ip, field.OmitValueType{}, "specifying one of OnExitCodes and OnPodConditions is required"))
		}
		if ec := r.OnExitCodes; ec != nil {
			ep := ip.Child("onExitCodes")
			switch ec.GetOperator() {
			case "In", "NotIn":
			case "":
				errs = append(errs, field.Required(ep.Child("operator"), `valid values: ["In" "NotIn"]`))
			default:
				errs = append(errs, field.NotSupported(ep.Child("operator"), ec.GetOperator(), []string{"In", "NotIn"}))
			}
			if ec.ContainerName != nil && !names[*ec.ContainerName] {
				errs = append(errs, field.Invalid(ep.Child("containerName"), *ec.ContainerName, "must be one of the container or initContainer names in the pod template"))
			}
			if len(ec.Values) == 0 {
				errs = append(errs, field.Invalid(ep.Child("values"), ec.Values, "at least one value is required"))
			}
			for j, v := range ec.Values {
				if ec.GetOperator() == "In" && v == 0 {
					errs = append(errs, field.Invalid(ep.Child("values").Index(j), v, "must not be 0 for the In operator"))
				}
				if j > 0 && ec.Values[j-1] == v {
					errs = append(errs, field.Duplicate(ep.Child("values").Index(j), v))
				} else if j > 0 && ec.Values[j-1] > v {
					errs = append(errs, field.Invalid(ep.Child("values"), ec.Values, "must be ordered"))
					break
				}
			}
		}
		for j, c := range r.OnPodConditions {
			cp := ip.Child("onPodConditions").Index(j)
			for _, msg := range validation.IsQualifiedName(c.GetType()) {
				errs = append(errs, field.Invalid(cp.Child("type"), c.GetType(), msg))
			}
			switch c.GetStatus() {
			case "True", "False", "Unknown":
			case "":
				errs = append(errs, field.Required(cp.Child("status"), `valid values: ["False" "True" "Unknown"]`))
			default:
				errs = append(errs, field.NotSupported(cp.Child("status"), c.GetStatus(), []string{"False", "True", "Unknown"}))
			}
		}
	}
	return errs
}
