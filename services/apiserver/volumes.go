// This file holds what the API service does with PersistentVolumeClaims,
// PersistentVolumes (core/v1) and StorageClasses (storage.k8s.io/v1)
// beyond the generic registry: Kubernetes' defaults and strategies, its
// validation (paths and messages of kube-apiserver v1.33.13), and the two
// admission plugins that concern claims: DefaultStorageClass (a claim
// without a class gets the default one) and PersistentVolumeClaimResize (a
// claim grows only when bound and its class allows expansion).
package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	stdmaps "maps"
	"path"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
	"github.com/kplane/kplane/proto/kubeconv"
	"github.com/kplane/kplane/services/apiserver/request"
)

// Annotations Kubernetes' storage code reads.
const (
	defaultClassAnnotation     = "storageclass.kubernetes.io/is-default-class"
	betaStorageClassAnnotation = "volume.beta.kubernetes.io/storage-class"
)

var (
	accessModes    = []string{"ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"}
	reclaimPolicys = []string{"Delete", "Recycle", "Retain"}
	volumeModes    = []string{"Block", "Filesystem"}
)

// defaultPersistentVolumeClaim is SetDefaults_PersistentVolumeClaim: a
// Filesystem volume, phase Pending (kept in a StatefulSet's claim
// templates; a created claim's status is reset by its strategy).
func defaultPersistentVolumeClaim(o *corev1.PersistentVolumeClaim) {
	if o.Spec == nil {
		o.Spec = &corev1.PersistentVolumeClaimSpec{}
	}
	if o.Spec.VolumeMode == nil {
		o.Spec.VolumeMode = proto.String("Filesystem")
	}
	if o.Status == nil {
		o.Status = &corev1.PersistentVolumeClaimStatus{}
	}
	if o.Status.Phase == "" {
		o.Status.Phase = "Pending"
	}
}

// defaultPersistentVolume is SetDefaults_PersistentVolume: Retain,
// Filesystem, phase Pending.
func defaultPersistentVolume(o *corev1.PersistentVolume) {
	if o.Spec == nil {
		o.Spec = &corev1.PersistentVolumeSpec{}
	}
	if o.Spec.PersistentVolumeReclaimPolicy == "" {
		o.Spec.PersistentVolumeReclaimPolicy = "Retain"
	}
	if o.Spec.VolumeMode == nil {
		o.Spec.VolumeMode = proto.String("Filesystem")
	}
	if hp := o.Spec.GetPersistentVolumeSource().GetHostPath(); hp != nil && hp.Type == nil {
		hp.Type = proto.String("")
	}
}

// defaultStorageClass is SetDefaults_StorageClass: Delete, Immediate.
func defaultStorageClass(o *storagev1.StorageClass) {
	if o.ReclaimPolicy == nil {
		o.ReclaimPolicy = proto.String("Delete")
	}
	if o.VolumeBindingMode == nil {
		o.VolumeBindingMode = proto.String("Immediate")
	}
}

// prepareVolumeCreate is the strategies' PrepareForCreate: a claim's
// status starts empty (the binder writes Pending), a volume's Pending with
// the transition time; both get their protection finalizer; volumeAttributesClassName is dropped, its gate
// (VolumeAttributesClass, beta) being off by default in v1.33.
func prepareVolumeCreate(obj proto.Message) {
	switch o := obj.(type) {
	case *corev1.PersistentVolumeClaim:
		o.Status = &corev1.PersistentVolumeClaimStatus{}
		o.GetSpec().VolumeAttributesClassName = nil
		addFinalizer(meta(o), "kubernetes.io/pvc-protection")
	case *corev1.PersistentVolume:
		o.Status = &corev1.PersistentVolumeStatus{Phase: "Pending", LastPhaseTransitionTime: now()}
		o.GetSpec().VolumeAttributesClassName = nil
		addFinalizer(meta(o), "kubernetes.io/pv-protection")
	}
}

// preparePersistentVolumeStatus is the volume status strategy's
// transition time: a new phase stamps it unless the writer did.
func preparePersistentVolumeStatus(o, old *corev1.PersistentVolume) {
	st, ost := o.GetStatus(), old.GetStatus()
	if st == nil {
		return
	}
	switch {
	case st.GetPhase() == ost.GetPhase() && st.LastPhaseTransitionTime == nil:
		st.LastPhaseTransitionTime = ost.GetLastPhaseTransitionTime()
	case st.GetPhase() != ost.GetPhase() && (st.LastPhaseTransitionTime == nil || proto.Equal(st.LastPhaseTransitionTime, ost.GetLastPhaseTransitionTime())):
		st.LastPhaseTransitionTime = now()
	}
}

// validateAccessModes is the access-mode part of ValidatePersistentVolumeSpec
// and ValidatePersistentVolumeClaimSpec.
func validateAccessModes(modes []string, p *field.Path, requiredMsg string) field.ErrorList {
	var errs field.ErrorList
	if len(modes) == 0 {
		errs = append(errs, field.Required(p, requiredMsg))
	}
	once, other := false, false
	for _, m := range modes {
		if !slices.Contains(accessModes, m) {
			errs = append(errs, field.NotSupported(p, m, accessModes))
			continue
		}
		if m == "ReadWriteOncePod" {
			once = true
		} else {
			other = true
		}
	}
	if once && other {
		errs = append(errs, field.Forbidden(p, "may not use ReadWriteOncePod with other access modes"))
	}
	return errs
}

// validateClaimSpec is ValidatePersistentVolumeClaimSpec.
func validateClaimSpec(s *corev1.PersistentVolumeClaimSpec, p *field.Path) field.ErrorList {
	errs := validateAccessModes(s.GetAccessModes(), p.Child("accessModes"), "at least 1 access mode is required")
	if sel := s.GetSelector(); sel != nil {
		errs = append(errs, validateLabels(sel.GetMatchLabels(), p.Child("selector", "matchLabels"))...)
		if _, err := kubeconv.Selector(sel); err != nil {
			errs = append(errs, field.Invalid(p.Child("selector"), labelSelectorString(sel), err.Error()))
		}
	}
	sp := p.Child("resources").Key("storage")
	if v, ok := s.GetResources().GetRequests()["storage"]; !ok {
		errs = append(errs, field.Required(sp, ""))
	} else if q, err := resource.ParseQuantity(v); err != nil {
		errs = append(errs, validateQuantity(v, sp)...)
	} else if q.Sign() <= 0 {
		errs = append(errs, field.Invalid(sp, q.String(), "must be greater than zero"))
	}
	if n := s.GetStorageClassName(); n != "" {
		for _, msg := range validation.IsDNS1123Subdomain(n) {
			errs = append(errs, field.Invalid(p.Child("storageClassName"), n, msg))
		}
	}
	if s.VolumeMode != nil && !slices.Contains(volumeModes, s.GetVolumeMode()) {
		errs = append(errs, field.NotSupported(p.Child("volumeMode"), s.GetVolumeMode(), volumeModes))
	}
	if ds := s.GetDataSource(); ds != nil {
		dp := p.Child("dataSource")
		if ds.GetName() == "" {
			errs = append(errs, field.Required(dp.Child("name"), ""))
		}
		if ds.GetKind() == "" {
			errs = append(errs, field.Required(dp.Child("kind"), ""))
		}
		if ds.GetApiGroup() == "" && ds.GetKind() != "PersistentVolumeClaim" {
			errs = append(errs, field.Invalid(dp, ds.GetKind(), "must be 'PersistentVolumeClaim' when referencing the default apiGroup"))
		}
	}
	return errs
}

// validatePersistentVolumeClaim is ValidatePersistentVolumeClaim and, on
// update, ValidatePersistentVolumeClaimUpdate: the spec is fixed but for a
// volumeName set once, a storage class set where there was none, and a
// bound claim's storage request (which may not shrink below its capacity).
func validatePersistentVolumeClaim(o, old *corev1.PersistentVolumeClaim) field.ErrorList {
	errs := validateClaimSpec(o.GetSpec(), field.NewPath("spec"))
	if old == nil {
		return errs
	}
	a, b := proto.Clone(o.GetSpec()).(*corev1.PersistentVolumeClaimSpec), proto.Clone(old.GetSpec()).(*corev1.PersistentVolumeClaimSpec)
	if a == nil {
		a = &corev1.PersistentVolumeClaimSpec{}
	}
	if b == nil {
		b = &corev1.PersistentVolumeClaimSpec{}
	}
	if b.GetVolumeName() == "" {
		b.VolumeName = a.GetVolumeName()
	}
	oldAnn, oldHasAnn := meta(old).GetAnnotations()[betaStorageClassAnnotation]
	if b.StorageClassName == nil && a.StorageClassName != nil && (!oldHasAnn || a.GetStorageClassName() == oldAnn) {
		b.StorageClassName = a.StorageClassName
	}
	if meta(o).GetAnnotations()[betaStorageClassAnnotation] != oldAnn {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations").Key(betaStorageClassAnnotation), "field is immutable"))
	}
	if old.GetStatus().GetPhase() == "Bound" {
		if a.Resources == nil {
			a.Resources = &corev1.VolumeResourceRequirements{}
		}
		if a.Resources.Requests != nil {
			a.Resources.Requests["storage"] = b.GetResources().GetRequests()["storage"]
		}
	}
	if !proto.Equal(a, b) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"))
	}
	newSize := quantity(o.GetSpec().GetResources().GetRequests()["storage"])
	oldSize := quantity(old.GetSpec().GetResources().GetRequests()["storage"])
	capacity := quantity(old.GetStatus().GetCapacity()["storage"])
	// RecoverVolumeExpansionFailure is on in v1.33: a request may come back
	// down, though not to the capacity the volume has.
	if newSize.Cmp(oldSize) < 0 && newSize.Cmp(capacity) <= 0 {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "resources", "requests", "storage"), "field can not be less than status.capacity"))
	}
	if !optEqual(o.GetSpec().VolumeMode, old.GetSpec().VolumeMode) {
		errs = append(errs, field.Invalid(field.NewPath("volumeMode"), o.GetSpec().GetVolumeMode(), "field is immutable"))
	}
	if o.GetSpec().GetVolumeAttributesClassName() != old.GetSpec().GetVolumeAttributesClassName() {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "volumeAttributesClassName"), "update is forbidden when the VolumeAttributesClass feature gate is disabled"))
	}
	return errs
}

// validatePersistentVolume is ValidatePersistentVolume and, on update,
// ValidatePersistentVolumeUpdate: the source, volume mode and a set node
// affinity are fixed.
func validatePersistentVolume(o, old *corev1.PersistentVolume) field.ErrorList {
	s, p := o.GetSpec(), field.NewPath("spec")
	errs := validateAccessModes(s.GetAccessModes(), p.Child("accessModes"), "")
	capacity := s.GetCapacity()
	if len(capacity) == 0 {
		errs = append(errs, field.Required(p.Child("capacity"), ""))
	}
	if _, ok := capacity["storage"]; !ok || len(capacity) > 1 {
		errs = append(errs, field.NotSupported(p.Child("capacity"), capacityValue(capacity), []string{"storage"}))
	}
	for k, v := range capacity {
		cp := p.Child("capacity").Key(k)
		if q, err := resource.ParseQuantity(v); err != nil {
			errs = append(errs, validateQuantity(v, cp)...)
		} else if q.Sign() <= 0 {
			errs = append(errs, field.Invalid(cp, q.String(), "must be greater than zero"))
		}
	}
	if rp := s.GetPersistentVolumeReclaimPolicy(); rp != "" && !slices.Contains(reclaimPolicys, rp) {
		errs = append(errs, field.NotSupported(p.Child("persistentVolumeReclaimPolicy"), rp, reclaimPolicys))
	}
	affinity := len(s.GetNodeAffinity().GetRequired().GetNodeSelectorTerms()) > 0
	if na := s.GetNodeAffinity(); na != nil {
		if na.GetRequired() == nil {
			errs = append(errs, field.Required(p.Child("nodeAffinity", "required"), "must specify required node constraints"))
		}
		for i, t := range na.GetRequired().GetNodeSelectorTerms() {
			errs = append(errs, validateNodeSelectorTerm(t, p.Child("nodeAffinity", "required", "nodeSelectorTerms").Index(i))...)
		}
	}
	// Exactly one volume source; kube-apiserver names every source after
	// the first, in its order (the order of the Go struct).
	n := 0
	src := s.GetPersistentVolumeSource()
	if src != nil {
		src.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
			if n > 0 {
				errs = append(errs, field.Forbidden(p.Child(fd.JSONName()), "may not specify more than 1 volume type"))
			}
			n++
			return true
		})
	}
	if n == 0 {
		errs = append(errs, field.Required(p, "must specify a volume type"))
	}
	if hp := src.GetHostPath(); hp != nil {
		if hp.GetPath() == "" {
			errs = append(errs, field.Required(p.Child("hostPath", "path"), ""))
		} else if slices.Contains(strings.Split(hp.GetPath(), "/"), "..") {
			errs = append(errs, field.Invalid(p.Child("hostPath", "path"), hp.GetPath(), "must not contain '..'"))
		}
		if path.Clean(hp.GetPath()) == "/" && s.GetPersistentVolumeReclaimPolicy() == "Recycle" {
			errs = append(errs, field.Forbidden(p.Child("persistentVolumeReclaimPolicy"), "may not be 'recycle' for a hostPath mount of '/'"))
		}
	}
	if l := src.GetLocal(); l != nil {
		if l.GetPath() == "" {
			errs = append(errs, field.Required(p.Child("local", "path"), ""))
		}
		if !affinity {
			errs = append(errs, field.Required(p.Child("nodeAffinity"), "Local volume requires node affinity"))
		}
	}
	if n := s.GetStorageClassName(); n != "" {
		for _, msg := range validation.IsDNS1123Subdomain(n) {
			errs = append(errs, field.Invalid(p.Child("storageClassName"), n, msg))
		}
	}
	if s.VolumeMode != nil && !slices.Contains(volumeModes, s.GetVolumeMode()) {
		errs = append(errs, field.NotSupported(p.Child("volumeMode"), s.GetVolumeMode(), volumeModes))
	}
	if old == nil {
		return errs
	}
	if !proto.Equal(src, old.GetSpec().GetPersistentVolumeSource()) {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "persistentvolumesource"), "spec.persistentvolumesource is immutable after creation"))
	}
	if !optEqual(s.VolumeMode, old.GetSpec().VolumeMode) {
		errs = append(errs, field.Invalid(field.NewPath("volumeMode"), s.GetVolumeMode(), "field is immutable"))
	}
	if old.GetSpec().GetNodeAffinity() != nil && !proto.Equal(s.GetNodeAffinity(), old.GetSpec().GetNodeAffinity()) {
		errs = append(errs, field.Invalid(field.NewPath("nodeAffinity"), "<value omitted>", "field is immutable"))
	}
	return errs
}

// validateStorageClass is ValidateStorageClass and, on update,
// ValidateStorageClassUpdate.
func validateStorageClass(o, old *storagev1.StorageClass) field.ErrorList {
	var errs field.ErrorList
	if pr := o.GetProvisioner(); pr == "" {
		errs = append(errs, field.Required(field.NewPath("provisioner"), ""))
	} else {
		for _, msg := range validation.IsQualifiedName(strings.ToLower(pr)) {
			errs = append(errs, field.Invalid(field.NewPath("provisioner"), strings.ToLower(pr), msg))
		}
	}
	for k := range o.GetParameters() {
		if k == "" {
			errs = append(errs, field.Invalid(field.NewPath("parameters"), k, "field can not be empty."))
		}
	}
	// A class may not ask for Recycle.
	if rp := o.GetReclaimPolicy(); rp != "" && rp != "Delete" && rp != "Retain" {
		errs = append(errs, field.NotSupported(field.NewPath("reclaimPolicy"), rp, []string{"Delete", "Retain"}))
	}
	if o.VolumeBindingMode == nil {
		errs = append(errs, field.Required(field.NewPath("volumeBindingMode"), ""))
	} else if m := o.GetVolumeBindingMode(); m != "Immediate" && m != "WaitForFirstConsumer" {
		errs = append(errs, field.NotSupported(field.NewPath("volumeBindingMode"), m, []string{"Immediate", "WaitForFirstConsumer"}))
	}
	if old == nil {
		return errs
	}
	if !stdmaps.Equal(o.GetParameters(), old.GetParameters()) {
		errs = append(errs, field.Forbidden(field.NewPath("parameters"), "updates to parameters are forbidden."))
	}
	if o.GetProvisioner() != old.GetProvisioner() {
		errs = append(errs, field.Forbidden(field.NewPath("provisioner"), "updates to provisioner are forbidden."))
	}
	if o.GetReclaimPolicy() != old.GetReclaimPolicy() {
		errs = append(errs, field.Forbidden(field.NewPath("reclaimPolicy"), "updates to reclaimPolicy are forbidden."))
	}
	if o.GetVolumeBindingMode() != old.GetVolumeBindingMode() {
		errs = append(errs, field.Invalid(field.NewPath("volumeBindingMode"), o.GetVolumeBindingMode(), "field is immutable"))
	}
	return errs
}

// admitClaim runs the two claim admission plugins Kubernetes enables by
// default: DefaultStorageClass on create (mutating) and
// PersistentVolumeClaimResize on update (validating).
func (s *Server) admitClaim(ctx context.Context, a *request.Admission, mutating bool) error {
	pvc, ok := a.Object.(*corev1.PersistentVolumeClaim)
	if !ok || a.Subresource != "" {
		return nil
	}
	if mutating {
		if a.Operation != request.Create || pvc.GetSpec().StorageClassName != nil || meta(pvc).GetAnnotations()[betaStorageClassAnnotation] != "" {
			return nil
		}
		if sc := s.defaultClass(); sc != nil {
			pvc.Spec.StorageClassName = proto.String(meta(sc).GetName())
		}
		return nil
	}
	old, ok := a.OldObject.(*corev1.PersistentVolumeClaim)
	if a.Operation != request.Update || !ok {
		return nil
	}
	newSize := quantity(pvc.GetSpec().GetResources().GetRequests()["storage"])
	if newSize.Cmp(quantity(old.GetSpec().GetResources().GetRequests()["storage"])) <= 0 {
		return nil
	}
	if old.GetStatus().GetPhase() != "Bound" {
		return apierrors.NewForbidden("", "persistentvolumeclaims", a.Name, "Only bound persistent volume claims can be expanded")
	}
	class := pvc.GetSpec().GetStorageClassName()
	if v, ok := meta(pvc).GetAnnotations()[betaStorageClassAnnotation]; ok {
		class = v
	}
	var allowed bool
	if class != "" {
		if obj, err := s.store.get(ctx, s.resources["storageclasses"], "", class); err == nil {
			allowed = obj.(*storagev1.StorageClass).GetAllowVolumeExpansion()
		}
	}
	if !allowed {
		return apierrors.NewForbidden("", "persistentvolumeclaims", a.Name,
			"only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize")
	}
	return nil
}

// defaultClass is the default StorageClass as the DefaultStorageClass
// plugin picks it from its cache: annotated default, the newest if several
// (then by name).
func (s *Server) defaultClass() *storagev1.StorageClass {
	c := s.cachers["storageclasses"]
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *storagev1.StorageClass
	for _, obj := range c.state {
		sc := obj.(*storagev1.StorageClass)
		if meta(sc).GetAnnotations()[defaultClassAnnotation] != "true" {
			continue
		}
		if best == nil {
			best = sc
			continue
		}
		t, bt := meta(sc).GetCreationTimestamp().AsTime(), meta(best).GetCreationTimestamp().AsTime()
		if t.After(bt) || (t.Equal(bt) && meta(sc).GetName() < meta(best).GetName()) {
			best = sc
		}
	}
	return best
}

// quantity parses v, zero if it does not parse (validation reports that).
func quantity(v string) resource.Quantity {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return resource.Quantity{}
	}
	return q
}

// capacityValue prints a refused capacity as kube-apiserver does: the Go
// syntax of its ResourceList, each Quantity as decoded from the request.
type capacityValue map[string]string

func (c capacityValue) String() string {
	if len(c) == 0 {
		return "core.ResourceList(nil)"
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		var q resource.Quantity
		b, _ := json.Marshal(c[k])
		_ = json.Unmarshal(b, &q)
		parts = append(parts, fmt.Sprintf("%q:%#v", k, q))
	}
	return "core.ResourceList{" + strings.Join(parts, ", ") + "}"
}

// optEqual compares two optional strings.
func optEqual(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
