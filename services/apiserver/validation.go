// This file holds validation: each kind's rules as Kubernetes checks them,
// on create, update and status writes, returned as a field.ErrorList in
// Kubernetes' words.

package apiserver

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kplane/kplane/proto/apierrors"
	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	coordinationv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	schedulingv1 "github.com/kplane/kplane/proto/kplane/scheduling/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
)

// validate checks obj (and, on update, what changed from old) as
// Kubernetes' validation does, and returns every violation with its field
// path as one Invalid error. old is nil on create.
func validateObject(r *resourceInfo, obj, old proto.Message) error {
	return invalid(r, meta(obj).GetName(), validateObjectErrs(r, obj, old))
}

// validateObjectErrs is validateObject's list of violations.
func validateObjectErrs(r *resourceInfo, obj, old proto.Message) field.ErrorList {
	errs := validateMeta(r, meta(obj), field.NewPath("metadata"))
	errs = append(errs, validateMoreKinds(obj, old)...)
	switch o := obj.(type) {
	case *corev1.Pod:
		errs = append(errs, validatePodSpec(o.GetSpec(), field.NewPath("spec"))...)
		if old != nil {
			errs = append(errs, validatePodUpdate(o, old.(*corev1.Pod))...)
		} else if len(o.GetSpec().GetEphemeralContainers()) > 0 {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "ephemeralContainers"), "cannot be set on create"))
		}
	case *appsv1.Deployment:
		s, p := o.GetSpec(), field.NewPath("spec")
		errs = append(errs, validateReplicas(s.Replicas, p.Child("replicas"))...)
		errs = append(errs, validateSelectorAndTemplate(s.GetSelector(), s.GetTemplate(), p)...)
		errs = append(errs, validateStrategy(s.GetStrategy(), p.Child("strategy"))...)
		if s.RevisionHistoryLimit != nil && *s.RevisionHistoryLimit < 0 {
			errs = append(errs, field.Invalid(p.Child("revisionHistoryLimit"), *s.RevisionHistoryLimit, "must be greater than or equal to 0"))
		}
		if s.ProgressDeadlineSeconds != nil && *s.ProgressDeadlineSeconds <= s.MinReadySeconds {
			errs = append(errs, field.Invalid(p.Child("progressDeadlineSeconds"), *s.ProgressDeadlineSeconds, "must be greater than minReadySeconds"))
		}
		if old != nil && !proto.Equal(s.GetSelector(), old.(*appsv1.Deployment).GetSpec().GetSelector()) {
			errs = append(errs, field.Invalid(p.Child("selector"), labelSelectorString(s.GetSelector()), "field is immutable"))
		}
	case *appsv1.ReplicaSet:
		s, p := o.GetSpec(), field.NewPath("spec")
		errs = append(errs, validateReplicas(s.Replicas, p.Child("replicas"))...)
		errs = append(errs, validateSelectorAndTemplate(s.GetSelector(), s.GetTemplate(), p)...)
		if old != nil && !proto.Equal(s.GetSelector(), old.(*appsv1.ReplicaSet).GetSpec().GetSelector()) {
			errs = append(errs, field.Invalid(p.Child("selector"), labelSelectorString(s.GetSelector()), "field is immutable"))
		}
	case *corev1.ReplicationController:
		errs = append(errs, validateReplicationController(o)...)
	case *appsv1.DaemonSet:
		oldDS, _ := old.(*appsv1.DaemonSet)
		errs = append(errs, validateDaemonSet(o, oldDS)...)
	case *appsv1.StatefulSet:
		oldSS, _ := old.(*appsv1.StatefulSet)
		errs = append(errs, validateStatefulSet(o, oldSS)...)
	case *corev1.PersistentVolumeClaim:
		oldPVC, _ := old.(*corev1.PersistentVolumeClaim)
		errs = append(errs, validatePersistentVolumeClaim(o, oldPVC)...)
	case *corev1.PersistentVolume:
		oldPV, _ := old.(*corev1.PersistentVolume)
		errs = append(errs, validatePersistentVolume(o, oldPV)...)
	case *storagev1.StorageClass:
		oldSC, _ := old.(*storagev1.StorageClass)
		errs = append(errs, validateStorageClass(o, oldSC)...)
	case *appsv1.ControllerRevision:
		oldCR, _ := old.(*appsv1.ControllerRevision)
		errs = append(errs, validateControllerRevision(o, oldCR)...)
	case *corev1.Service:
		// Addresses (clusterIPs, families, node ports) are validated with
		// the cluster's ranges: serviceAddressing.validateServiceAddresses.
		errs = append(errs, validateService(o.GetSpec(), field.NewPath("spec"))...)
	case *corev1.Namespace:
		for i, f := range o.GetSpec().GetFinalizers() {
			errs = append(errs, validateNamespaceFinalizer(f, field.NewPath("spec", "finalizers").Index(i))...)
		}
	case *corev1.ConfigMap:
		for k := range o.Data {
			errs = append(errs, validateConfigKey(k, field.NewPath("data").Key(k))...)
		}
		for k := range o.BinaryData {
			errs = append(errs, validateConfigKey(k, field.NewPath("binaryData").Key(k))...)
			if _, dup := o.Data[k]; dup {
				errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(k), k, "duplicate of key present in data"))
			}
		}
		if old != nil {
			oc := old.(*corev1.ConfigMap)
			if oc.GetImmutable() && (!proto.Equal(&corev1.ConfigMap{Data: o.Data, BinaryData: o.BinaryData}, &corev1.ConfigMap{Data: oc.Data, BinaryData: oc.BinaryData}) || !o.GetImmutable()) {
				errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
			}
		}
	case *corev1.Secret:
		for k := range o.Data {
			errs = append(errs, validateConfigKey(k, field.NewPath("data").Key(k))...)
		}
		if old != nil {
			os := old.(*corev1.Secret)
			if o.GetType() != os.GetType() {
				errs = append(errs, field.Invalid(field.NewPath("type"), o.GetType(), "field is immutable"))
			}
			if os.GetImmutable() && (!proto.Equal(&corev1.Secret{Data: o.Data}, &corev1.Secret{Data: os.Data}) || !o.GetImmutable()) {
				errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
			}
		}
	case *discoveryv1.EndpointSlice:
		oes, _ := old.(*discoveryv1.EndpointSlice)
		errs = append(errs, validateEndpointSlice(o, oes)...)
	case *policyv1.PodDisruptionBudget:
		errs = append(errs, validatePDBSpec(o.GetSpec(), field.NewPath("spec"))...)
	case *batchv1.Job:
		oj, _ := old.(*batchv1.Job)
		errs = append(errs, validateJob(o, oj)...)
	case *batchv1.CronJob:
		oc, _ := old.(*batchv1.CronJob)
		errs = append(errs, validateCronJob(o, oc)...)
	case *schedulingv1.PriorityClass:
		opc, _ := old.(*schedulingv1.PriorityClass)
		errs = append(errs, validatePriorityClass(o, opc)...)
	case *corev1.ResourceQuota:
		oq, _ := old.(*corev1.ResourceQuota)
		errs = append(errs, validateResourceQuota(o, oq)...)
	case *corev1.LimitRange:
		errs = append(errs, validateLimitRange(o)...)
	case *corev1.ServiceAccount:
		// As Kubernetes: only the metadata is checked (validateMeta: the
		// name is a DNS subdomain); the secrets and imagePullSecrets
		// references are not, and a referenced Secret need not exist.
	case *corev1.Node:
		for i, t := range o.GetSpec().GetTaints() {
			p := field.NewPath("spec", "taints").Index(i)
			errs = append(errs, validateLabelKey(t.GetKey(), p.Child("key"))...)
			errs = append(errs, validateEnum(t.GetEffect(), p.Child("effect"), true, "NoSchedule", "PreferNoSchedule", "NoExecute")...)
		}
		for k, v := range o.GetStatus().GetCapacity() {
			errs = append(errs, validateQuantity(v, field.NewPath("status", "capacity").Key(k))...)
		}
		for k, v := range o.GetStatus().GetAllocatable() {
			errs = append(errs, validateQuantity(v, field.NewPath("status", "allocatable").Key(k))...)
		}
	case *corev1.Event:
		oe, _ := old.(*corev1.Event)
		errs = append(errs, validateEvent(r, o, oe)...)
	case *coordinationv1.Lease:
		// A Lease may come without a spec (Kubernetes takes one).
		if sp := o.GetSpec(); sp != nil {
			if d := sp.LeaseDurationSeconds; d != nil && *d <= 0 {
				errs = append(errs, field.Invalid(field.NewPath("spec", "leaseDurationSeconds"), *d, "must be greater than 0"))
			}
			if t := sp.LeaseTransitions; t != nil && *t < 0 {
				errs = append(errs, field.Invalid(field.NewPath("spec", "leaseTransitions"), *t, "must be greater than or equal to 0"))
			}
		}
	case *rbacv1.Role:
		errs = append(errs, validateRules(o.GetRules())...)
	case *rbacv1.ClusterRole:
		errs = append(errs, validateRules(o.GetRules())...)
	case *rbacv1.RoleBinding:
		errs = append(errs, validateBinding(o.GetRoleRef(), o.GetSubjects(), true)...)
		if old != nil && !proto.Equal(o.GetRoleRef(), old.(*rbacv1.RoleBinding).GetRoleRef()) {
			errs = append(errs, field.Invalid(field.NewPath("roleRef"), o.GetRoleRef().GetName(), "cannot change roleRef"))
		}
	case *rbacv1.ClusterRoleBinding:
		errs = append(errs, validateBinding(o.GetRoleRef(), o.GetSubjects(), false)...)
		if old != nil && !proto.Equal(o.GetRoleRef(), old.(*rbacv1.ClusterRoleBinding).GetRoleRef()) {
			errs = append(errs, field.Invalid(field.NewPath("roleRef"), o.GetRoleRef().GetName(), "cannot change roleRef"))
		}
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		names := sets.New[string]()
		for i, w := range o.GetWebhooks() {
			errs = append(errs, validateWebhook(field.NewPath("webhooks").Index(i), names, w.GetName(), w.GetClientConfig(), w.GetRules(), w.FailurePolicy, w.SideEffects, w.TimeoutSeconds, w.GetAdmissionReviewVersions())...)
			errs = append(errs, validateEnum(w.GetReinvocationPolicy(), field.NewPath("webhooks").Index(i).Child("reinvocationPolicy"), false, "Never", "IfNeeded")...)
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		names := sets.New[string]()
		for i, w := range o.GetWebhooks() {
			errs = append(errs, validateWebhook(field.NewPath("webhooks").Index(i), names, w.GetName(), w.GetClientConfig(), w.GetRules(), w.FailurePolicy, w.SideEffects, w.TimeoutSeconds, w.GetAdmissionReviewVersions())...)
		}
	}
	if old != nil {
		errs = append(errs, validateMetaUpdate(meta(obj), meta(old), field.NewPath("metadata"))...)
	}
	return errs
}

// validateStatusUpdate is validateObject for a write through the status
// subresource. There a pod's spec is the stored one (updateStatus starts
// from the stored pod and takes only status, labels and annotations from
// the request), so, as Kubernetes' ValidatePodStatusUpdate, the spec is not
// validated again: two copies of it, a comparison and the whole spec's
// validation on every status write a node agent makes. Should admission
// have changed the spec after all, everything is validated.
func validateStatusUpdate(r *resourceInfo, obj, old proto.Message) error {
	errs := validateStatus(obj)
	errs = append(errs, validateMoreStatus(obj)...)
	if ds, ok := obj.(*appsv1.DaemonSet); ok {
		errs = append(errs, validateDaemonSetStatus(ds, old)...)
	}
	if ss, ok := obj.(*appsv1.StatefulSet); ok {
		errs = append(errs, validateStatefulSetStatus(ss, old)...)
	}
	if j, ok := obj.(*batchv1.Job); ok {
		errs = append(errs, validateJobStatus(j, old.(*batchv1.Job))...)
	}
	if len(errs) > 0 {
		return invalid(r, meta(obj).GetName(), errs)
	}
	p, ok := obj.(*corev1.Pod)
	op, okOld := old.(*corev1.Pod)
	if !ok || !okOld || !proto.Equal(p.GetSpec(), op.GetSpec()) {
		return validateObject(r, obj, old)
	}
	errs = validateMeta(r, meta(obj), field.NewPath("metadata"))
	errs = append(errs, validateMetaUpdate(meta(obj), meta(old), field.NewPath("metadata"))...)
	return invalid(r, meta(obj).GetName(), errs)
}

// validateStatus checks a status written through the status subresource
// as Kubernetes' status validation does: a Deployment's and a ReplicaSet's
// counts are not negative and not above status.replicas (available not
// above ready); a Namespace's phase is Active, or Terminating once it is
// being deleted.
func validateStatus(obj proto.Message) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("status")
	nonNegative := func(v int64, name string) {
		if v < 0 {
			errs = append(errs, field.Invalid(p.Child(name), v, "must be greater than or equal to 0"))
		}
	}
	notAbove := func(v, limit int32, name, msg string) {
		if v > limit {
			errs = append(errs, field.Invalid(p.Child(name), v, msg))
		}
	}
	const aboveReplicas = "cannot be greater than status.replicas"
	switch o := obj.(type) {
	case *corev1.ResourceQuota:
		errs = append(errs, validateResourceQuotaStatus(o)...)
	case *appsv1.Deployment:
		st := o.GetStatus()
		nonNegative(st.GetObservedGeneration(), "observedGeneration")
		nonNegative(int64(st.GetReplicas()), "replicas")
		nonNegative(int64(st.GetUpdatedReplicas()), "updatedReplicas")
		nonNegative(int64(st.GetReadyReplicas()), "readyReplicas")
		nonNegative(int64(st.GetAvailableReplicas()), "availableReplicas")
		nonNegative(int64(st.GetUnavailableReplicas()), "unavailableReplicas")
		nonNegative(int64(st.GetCollisionCount()), "collisionCount")
		notAbove(st.GetUpdatedReplicas(), st.GetReplicas(), "updatedReplicas", aboveReplicas)
		notAbove(st.GetReadyReplicas(), st.GetReplicas(), "readyReplicas", aboveReplicas)
		notAbove(st.GetAvailableReplicas(), st.GetReplicas(), "availableReplicas", aboveReplicas)
		notAbove(st.GetAvailableReplicas(), st.GetReadyReplicas(), "availableReplicas", "cannot be greater than readyReplicas")
	case *appsv1.ReplicaSet:
		st := o.GetStatus()
		nonNegative(int64(st.GetReplicas()), "replicas")
		nonNegative(int64(st.GetFullyLabeledReplicas()), "fullyLabeledReplicas")
		nonNegative(int64(st.GetReadyReplicas()), "readyReplicas")
		nonNegative(int64(st.GetAvailableReplicas()), "availableReplicas")
		nonNegative(st.GetObservedGeneration(), "observedGeneration")
		notAbove(st.GetFullyLabeledReplicas(), st.GetReplicas(), "fullyLabeledReplicas", aboveReplicas)
		notAbove(st.GetReadyReplicas(), st.GetReplicas(), "readyReplicas", aboveReplicas)
		notAbove(st.GetAvailableReplicas(), st.GetReplicas(), "availableReplicas", aboveReplicas)
		notAbove(st.GetAvailableReplicas(), st.GetReadyReplicas(), "availableReplicas", "cannot be greater than readyReplicas")
	case *corev1.ReplicationController:
		errs = append(errs, validateReplicationControllerStatus(o.GetStatus(), p)...)
	case *policyv1.PodDisruptionBudget:
		errs = append(errs, validatePDBStatus(o.GetStatus(), p)...)
	case *corev1.Namespace:
		phase := o.GetStatus().GetPhase()
		switch deleting := meta(o).GetDeletionTimestamp() != nil; {
		case !deleting && phase != "Active":
			errs = append(errs, field.Invalid(p.Child("Phase"), phase, "may only be 'Active' if `deletionTimestamp` is empty"))
		case deleting && phase != "Terminating":
			errs = append(errs, field.Invalid(p.Child("Phase"), phase, "may only be 'Terminating' if `deletionTimestamp` is not empty"))
		}
	}
	return errs
}

// invalid turns a field.ErrorList into apierrors' Invalid (nil if empty).
func invalid(r *resourceInfo, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	causes := make([]apierrors.Cause, 0, len(errs))
	for _, e := range errs {
		causes = append(causes, apierrors.Cause{Type: string(e.Type), Message: e.ErrorBody(), Field: e.Field})
	}
	// Kubernetes names the kind of the stored object (a view's requests
	// too: "Event", not "Event.events.k8s.io").
	return apierrors.NewInvalid(r.storedAs().Group, r.storedAs().Kind, name, causes)
}

// nameValidator is the rule for an object's name: DNS-1123 labels for
// namespaces, DNS-1035 labels for services, DNS-1123 subdomains otherwise;
// RBAC objects only forbid path segments.
func nameValidator(r *resourceInfo) func(string) []string {
	if r.custom != nil {
		return validation.IsDNS1123Subdomain // a custom resource's plural may be a built-in's
	}
	if (r.Resource == "events" && r.Group == "") || r.Resource == "certificatesigningrequests" {
		// Through core/v1 an Event's name, and a CertificateSigningRequest's,
		// is only a path segment.
		return pathSegmentName
	}
	switch r.Resource {
	case "namespaces", "statefulsets":
		return validation.IsDNS1123Label
	case "services":
		return validation.IsDNS1035Label
	case "roles", "clusterroles", "rolebindings", "clusterrolebindings":
		return pathSegmentName
	}
	return validation.IsDNS1123Subdomain
}

// pathSegmentName is the rule for a name that need only be a path segment.
func pathSegmentName(s string) []string {
	if s == "." || s == ".." {
		return []string{fmt.Sprintf("may not be '%s'", s)}
	}
	if strings.ContainsAny(s, "/%") {
		return []string{`may not contain '/' or '%'`}
	}
	return nil
}

func validateMeta(r *resourceInfo, m *metav1.ObjectMeta, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.GetName() == "" {
		errs = append(errs, field.Required(p.Child("name"), "name or generateName is required"))
	} else {
		for _, msg := range nameValidator(r)(m.GetName()) {
			errs = append(errs, field.Invalid(p.Child("name"), m.GetName(), msg))
		}
	}
	if r.Namespaced {
		if m.GetNamespace() == "" {
			errs = append(errs, field.Required(p.Child("namespace"), ""))
		} else {
			for _, msg := range validation.IsDNS1123Label(m.GetNamespace()) {
				errs = append(errs, field.Invalid(p.Child("namespace"), m.GetNamespace(), msg))
			}
		}
	} else if m.GetNamespace() != "" {
		errs = append(errs, field.Forbidden(p.Child("namespace"), "not allowed on this type"))
	}
	errs = append(errs, validateLabels(m.GetLabels(), p.Child("labels"))...)
	total := 0
	for k, v := range m.GetAnnotations() {
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(p.Child("annotations"), k, msg))
		}
		total += len(k) + len(v)
	}
	if total > 256*1024 {
		errs = append(errs, field.TooLong(p.Child("annotations"), "", 256*1024))
	}
	if m.GetGeneration() < 0 {
		errs = append(errs, field.Invalid(p.Child("generation"), m.GetGeneration(), "must be greater than or equal to 0"))
	}
	for i, f := range m.GetFinalizers() {
		for _, msg := range validation.IsQualifiedName(f) {
			errs = append(errs, field.Invalid(p.Child("finalizers").Index(i), f, msg))
		}
	}
	for i, o := range m.GetOwnerReferences() {
		op := p.Child("ownerReferences").Index(i)
		if o.GetApiVersion() == "" {
			errs = append(errs, field.Invalid(op.Child("apiVersion"), "", "version must not be empty"))
		}
		if o.GetKind() == "" {
			errs = append(errs, field.Invalid(op.Child("kind"), "", "kind must not be empty"))
		}
		if o.GetName() == "" {
			errs = append(errs, field.Invalid(op.Child("name"), "", "name must not be empty"))
		}
		if o.GetUid() == "" {
			errs = append(errs, field.Invalid(op.Child("uid"), "", "uid must not be empty"))
		}
	}
	return errs
}

func validateMetaUpdate(m, old *metav1.ObjectMeta, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.GetName() != old.GetName() {
		errs = append(errs, field.Invalid(p.Child("name"), m.GetName(), "field is immutable"))
	}
	if m.GetNamespace() != old.GetNamespace() {
		errs = append(errs, field.Invalid(p.Child("namespace"), m.GetNamespace(), "field is immutable"))
	}
	if m.GetUid() != old.GetUid() {
		errs = append(errs, field.Invalid(p.Child("uid"), m.GetUid(), "field is immutable"))
	}
	return errs
}

func validateLabels(l map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for k, v := range l {
		errs = append(errs, validateLabelKey(k, p)...)
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(p, v, msg))
		}
	}
	return errs
}

func validateLabelKey(k string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(k) {
		errs = append(errs, field.Invalid(p, k, msg))
	}
	return errs
}

func validateEnum(v string, p *field.Path, required bool, allowed ...string) field.ErrorList {
	if v == "" {
		if required {
			return field.ErrorList{field.Required(p, "")}
		}
		return nil
	}
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return field.ErrorList{field.NotSupported(p, v, allowed)}
}

func validateQuantity(v string, p *field.Path) field.ErrorList {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return field.ErrorList{field.Invalid(p, v, "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")}
	}
	if q.Sign() < 0 {
		return field.ErrorList{field.Invalid(p, v, "must be greater than or equal to 0")}
	}
	return nil
}

// quantityEqual compares two quantities by value ("1" == "1000m").
func quantityEqual(a, b string) bool {
	qa, err1 := resource.ParseQuantity(a)
	qb, err2 := resource.ParseQuantity(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	return qa.Cmp(qb) == 0
}

func validateConfigKey(k string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsConfigMapKey(k) {
		errs = append(errs, field.Invalid(p, k, msg))
	}
	return errs
}

func validateReplicas(r *int32, p *field.Path) field.ErrorList {
	if r != nil && *r < 0 {
		return field.ErrorList{field.Invalid(p, *r, "must be greater than or equal to 0")}
	}
	return nil
}

func validateService(s *corev1.ServiceSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateEnum(s.GetType(), p.Child("type"), true, "ClusterIP", "NodePort", "LoadBalancer", "ExternalName")...)
	if s.GetType() != "ExternalName" && len(s.GetPorts()) == 0 && s.GetClusterIp() != "None" {
		errs = append(errs, field.Required(p.Child("ports"), ""))
	}
	names := sets.New[string]()
	for i, port := range s.GetPorts() {
		pp := p.Child("ports").Index(i)
		if len(s.GetPorts()) > 1 && port.GetName() == "" {
			errs = append(errs, field.Required(pp.Child("name"), ""))
		}
		if port.GetName() != "" {
			for _, msg := range validation.IsDNS1123Label(port.GetName()) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.GetName(), msg))
			}
			if names.Has(port.GetName()) {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.GetName()))
			}
			names.Insert(port.GetName())
		}
		for _, msg := range validation.IsValidPortNum(int(port.GetPort())) {
			errs = append(errs, field.Invalid(pp.Child("port"), port.GetPort(), msg))
		}
		errs = append(errs, validateEnum(port.GetProtocol(), pp.Child("protocol"), true, "TCP", "UDP", "SCTP")...)
		if port.GetTargetPort() != nil {
			errs = append(errs, validatePortRef(port.GetTargetPort(), pp.Child("targetPort"))...)
		}
	}
	errs = append(errs, validateLabels(s.GetSelector(), p.Child("selector"))...)
	errs = append(errs, validateEnum(s.GetSessionAffinity(), p.Child("sessionAffinity"), false, "None", "ClientIP")...)
	return errs
}

// validateNamespaceFinalizer: a qualified name, and one without a prefix
// must be Kubernetes' standard "kubernetes".
func validateNamespaceFinalizer(f string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(f) {
		errs = append(errs, field.Invalid(p, f, msg))
	}
	if len(errs) == 0 && !strings.Contains(f, "/") && f != namespaceFinalizer {
		errs = append(errs, field.Invalid(p, f, "name is neither a standard finalizer name nor is it fully qualified"))
	}
	return errs
}
