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
	"time"

	"github.com/robfig/cron/v3"
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
		sel, err := labelSelectorAsSelector(s.GetSelector())
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
	if sel, err := labelSelectorAsSelector(s.GetSelector()); err == nil && !sel.Matches(want) {
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

// jobCondition reports whether conds has condition t with status True.
func jobCondition(conds []*batchv1.JobCondition, t string) bool {
	for _, c := range conds {
		if c.GetType() == t {
			return c.GetStatus() == "True"
		}
	}
	return false
}

// validateJobStatus is ValidateJobStatusUpdate with the options Kubernetes
// v1.33 turns on (JobManagedBy): a rule about a field is checked only when
// the write changes what the rule is about, so that a status broken before
// does not block unrelated writes.
func validateJobStatus(o, old *batchv1.Job) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("status")
	st, ost := o.GetStatus(), old.GetStatus()
	if st == nil {
		st = &batchv1.JobStatus{}
	}
	if ost == nil {
		ost = &batchv1.JobStatus{}
	}
	for _, c := range []struct {
		v    int32
		name string
	}{{st.GetActive(), "active"}, {st.GetSucceeded(), "succeeded"}, {st.GetFailed(), "failed"}} {
		if c.v < 0 {
			errs = append(errs, field.Invalid(p.Child(c.name), int64(c.v), "must be greater than or equal to 0"))
		}
	}
	errs = append(errs, nonNegative(st.Ready, p.Child("ready"))...)
	errs = append(errs, nonNegative(st.Terminating, p.Child("terminating"))...)
	conds, oconds := st.GetConditions(), ost.GetConditions()
	complete, failed := jobCondition(conds, "Complete"), jobCondition(conds, "Failed")
	finished := complete || failed
	wasFinished := jobCondition(oconds, "Complete") || jobCondition(oconds, "Failed")
	completeChanged := complete != jobCondition(oconds, "Complete")
	failedChanged := failed != jobCondition(oconds, "Failed")
	completionTimeChanged := !proto.Equal(st.GetCompletionTime(), ost.GetCompletionTime())
	startTimeChanged := !proto.Equal(st.GetStartTime(), ost.GetStartTime())
	cp := p.Child("conditions")
	if (completeChanged || failedChanged) && complete && failed {
		errs = append(errs, field.Invalid(cp, field.OmitValueType{}, "cannot set Complete=True and Failed=true conditions"))
	}
	if (completeChanged || jobCondition(conds, "FailureTarget") != jobCondition(oconds, "FailureTarget")) && complete && jobCondition(conds, "FailureTarget") {
		errs = append(errs, field.Invalid(cp, field.OmitValueType{}, "cannot set Complete=True and FailureTarget=true conditions"))
	}
	if (completeChanged || completionTimeChanged) && !complete && st.GetCompletionTime() != nil {
		errs = append(errs, field.Invalid(p.Child("completionTime"), kubeTime(st.GetCompletionTime()), "cannot set completionTime when there is no Complete=True condition"))
	}
	if (completeChanged || completionTimeChanged) && complete && st.GetCompletionTime() == nil {
		errs = append(errs, field.Required(p.Child("completionTime"), "completionTime is required for Complete jobs"))
	}
	if (startTimeChanged || completionTimeChanged) && st.GetCompletionTime() != nil && st.GetStartTime() != nil &&
		st.GetCompletionTime().AsTime().Before(st.GetStartTime().AsTime()) {
		errs = append(errs, field.Invalid(p.Child("completionTime"), kubeTime(st.GetCompletionTime()), "completionTime cannot be set before startTime"))
	}
	if failedChanged && failed && !jobCondition(conds, "FailureTarget") {
		errs = append(errs, field.Invalid(cp, field.OmitValueType{}, "cannot set Failed=True condition without the FailureTarget=true condition"))
	}
	if (completeChanged || jobCondition(conds, "SuccessCriteriaMet") != jobCondition(oconds, "SuccessCriteriaMet")) && complete && !jobCondition(conds, "SuccessCriteriaMet") {
		errs = append(errs, field.Invalid(cp, field.OmitValueType{}, "cannot set Complete=True condition without the SuccessCriteriaMet=true condition"))
	}
	if (finished != wasFinished || st.GetActive() != ost.GetActive()) && finished && st.GetActive() > 0 {
		errs = append(errs, field.Invalid(p.Child("active"), st.GetActive(), "active>0 is invalid for finished job"))
	}
	zeroSuspended := o.GetSpec().GetSuspend() && o.GetSpec().Completions != nil && o.GetSpec().GetCompletions() == 0
	if (finished != wasFinished || startTimeChanged) && !zeroSuspended && finished && st.GetStartTime() == nil {
		errs = append(errs, field.Required(p.Child("startTime"), "startTime is required for finished job"))
	}
	u := st.GetUncountedTerminatedPods()
	if (finished != wasFinished || !proto.Equal(u, ost.GetUncountedTerminatedPods())) && finished && len(u.GetSucceeded())+len(u.GetFailed()) > 0 {
		errs = append(errs, field.Invalid(p.Child("uncountedTerminatedPods"), kubeValue[k8sbatchv1.UncountedTerminatedPods](u), "uncountedTerminatedPods needs to be empty for finished job"))
	}
	if st.GetCompletedIndexes() != ost.GetCompletedIndexes() && st.GetCompletedIndexes() != "" && o.GetSpec().GetCompletionMode() != "Indexed" {
		errs = append(errs, field.Invalid(p.Child("completedIndexes"), st.GetCompletedIndexes(), "cannot set non-empty completedIndexes when non-indexed completion mode"))
	}
	if (finished != wasFinished || !proto.Equal(wrapInt32(st.Terminating), wrapInt32(ost.Terminating))) && finished && st.GetTerminating() > 0 {
		errs = append(errs, field.Invalid(p.Child("terminating"), st.GetTerminating(), "terminating>0 is invalid for finished job"))
	}
	if (!proto.Equal(wrapInt32(st.Ready), wrapInt32(ost.Ready)) || st.GetActive() != ost.GetActive()) && st.GetReady() > st.GetActive() {
		errs = append(errs, field.Invalid(p.Child("ready"), st.GetReady(), "cannot set more ready pods than active"))
	}
	for _, t := range []string{"Failed", "Complete", "FailureTarget"} {
		if jobCondition(oconds, t) && !jobCondition(conds, t) {
			errs = append(errs, field.Invalid(cp, field.OmitValueType{}, fmt.Sprintf("cannot disable the terminal %s=True condition", t)))
		}
	}
	if st.GetFailed() < ost.GetFailed() {
		errs = append(errs, field.Invalid(p.Child("failed"), st.GetFailed(), "cannot decrease the failed counter"))
	}
	scaledDown := o.GetSpec().GetCompletionMode() == "Indexed" && proto.Equal(wrapInt32(o.GetSpec().Completions), wrapInt32(o.GetSpec().Parallelism))
	if !scaledDown && st.GetSucceeded() < ost.GetSucceeded() {
		errs = append(errs, field.Invalid(p.Child("succeeded"), st.GetSucceeded(), "cannot decrease the succeeded counter"))
	}
	if st.GetCompletionTime() != nil && ost.GetCompletionTime() != nil && completionTimeChanged {
		errs = append(errs, field.Invalid(p.Child("completionTime"), kubeTime(st.GetCompletionTime()), "completionTime cannot be mutated"))
	}
	resuming := jobCondition(oconds, "Suspended") && jobConditionFalse(conds, "Suspended")
	if startTimeChanged && !resuming && ost.GetStartTime() != nil && !o.GetSpec().GetSuspend() {
		errs = append(errs, field.Required(p.Child("startTime"), "startTime cannot be removed for unsuspended job"))
	}
	if jobCondition(oconds, "SuccessCriteriaMet") && !jobCondition(conds, "SuccessCriteriaMet") {
		errs = append(errs, field.Invalid(cp, field.OmitValueType{}, "cannot disable the SuccessCriteriaMet=True condition"))
	}
	return errs
}

// jobConditionFalse reports whether conds has condition t with status False.
func jobConditionFalse(conds []*batchv1.JobCondition, t string) bool {
	for _, c := range conds {
		if c.GetType() == t {
			return c.GetStatus() == "False"
		}
	}
	return false
}

// kubeTime is a timestamp as Kubernetes prints it in an Invalid error.
func kubeTime(t interface{ AsTime() time.Time }) k8smetav1.Time {
	return k8smetav1.NewTime(t.AsTime())
}

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
