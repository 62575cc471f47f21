// This file holds the storage.k8s.io/v1 kinds served at the storage level
// (CSIDriver, CSINode, VolumeAttachment, CSIStorageCapacity): Kubernetes' defaults and
// validation with the field paths and messages of kube-apiserver v1.33.13.
// Nothing in kplane acts on them (there is no CSI attach/detach
// controller); they are stored and served as a bare Kubernetes without a
// CSI driver keeps them.
package apiserver

import (
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/proto"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
	"github.com/kplane/kplane/proto/kubeconv"
)

// Kubernetes' limits on the storage kinds.
const (
	maxAttachedVolumeMetadataSize = 256 * (1 << 10)
	maxVolumeErrorMessageSize     = 1024
	csiNodeIDMaxLength            = 192
	csiNodeIDLongerMaxLength      = 256
)

// defaultCSIDriver is SetDefaults_CSIDriver (SELinuxMountReadWriteOncePod
// is on by default in v1.33, so seLinuxMount defaults to false).
func defaultCSIDriver(o *storagev1.CSIDriver) {
	if o.Spec == nil {
		o.Spec = &storagev1.CSIDriverSpec{}
	}
	s := o.Spec
	if s.AttachRequired == nil {
		s.AttachRequired = proto.Bool(true)
	}
	if s.PodInfoOnMount == nil {
		s.PodInfoOnMount = proto.Bool(false)
	}
	if s.StorageCapacity == nil {
		s.StorageCapacity = proto.Bool(false)
	}
	if s.FsGroupPolicy == nil {
		s.FsGroupPolicy = proto.String("ReadWriteOnceWithFSType")
	}
	if len(s.VolumeLifecycleModes) == 0 {
		s.VolumeLifecycleModes = []string{"Persistent"}
	}
	if s.RequiresRepublish == nil {
		s.RequiresRepublish = proto.Bool(false)
	}
	if s.SeLinuxMount == nil {
		s.SeLinuxMount = proto.Bool(false)
	}
}

// validateCSIDriverName is core's ValidateCSIDriverName.
func validateCSIDriverName(name string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if name == "" {
		errs = append(errs, field.Required(p, ""))
	}
	if len(name) > 63 {
		errs = append(errs, field.TooLong(p, "", 63))
	}
	for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(name)) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

// validateCSIDriver is ValidateCSIDriver (and, with old,
// ValidateCSIDriverUpdate: attachRequired and volumeLifecycleModes are
// immutable; Kubernetes names the former spec.attachedRequired).
func validateCSIDriver(o, old *storagev1.CSIDriver) field.ErrorList {
	s, p := o.GetSpec(), field.NewPath("spec")
	var errs field.ErrorList
	required := func(set bool, name string) {
		if !set {
			errs = append(errs, field.Required(p.Child(name), ""))
		}
	}
	required(s.AttachRequired != nil, "attachedRequired")
	required(s.PodInfoOnMount != nil, "podInfoOnMount")
	required(s.StorageCapacity != nil, "storageCapacity")
	if s.FsGroupPolicy != nil {
		errs = append(errs, validateEnum(s.GetFsGroupPolicy(), p.Child("fsGroupPolicy"), false, "File", "None", "ReadWriteOnceWithFSType")...)
	}
	audiences := map[string]bool{}
	for i, tr := range s.GetTokenRequests() {
		tp := p.Child("tokenRequests").Index(i)
		if audiences[tr.GetAudience()] {
			errs = append(errs, field.Duplicate(tp.Child("audience"), tr.GetAudience()))
			continue
		}
		audiences[tr.GetAudience()] = true
		if tr.ExpirationSeconds == nil {
			continue
		}
		if tr.GetExpirationSeconds() < 600 {
			errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), tr.GetExpirationSeconds(), "may not specify a duration less than 10 minutes"))
		}
		if tr.GetExpirationSeconds() > 1<<32 {
			errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), tr.GetExpirationSeconds(), "may not specify a duration larger than 2^32 seconds"))
		}
	}
	for _, m := range s.GetVolumeLifecycleModes() {
		if m != "Persistent" && m != "Ephemeral" {
			errs = append(errs, field.NotSupported(p.Child("volumeLifecycleModes"), m, []string{"Persistent", "Ephemeral"}))
		}
	}
	required(s.SeLinuxMount != nil, "seLinuxMount")
	if v := s.NodeAllocatableUpdatePeriodSeconds; v != nil && *v < 10 {
		errs = append(errs, field.Invalid(p.Child("nodeAllocatableUpdatePeriodSeconds"), *v, "must be greater than or equal to 10 seconds"))
	}
	if old != nil {
		os := old.GetSpec()
		if s.GetAttachRequired() != os.GetAttachRequired() {
			errs = append(errs, field.Invalid(p.Child("attachedRequired"), s.GetAttachRequired(), "field is immutable"))
		}
		if strings.Join(s.GetVolumeLifecycleModes(), ",") != strings.Join(os.GetVolumeLifecycleModes(), ",") {
			errs = append(errs, field.Invalid(p.Child("volumeLifecycleModes"), goValue(fmt.Sprintf("%#v", lifecycleModes(s.GetVolumeLifecycleModes()))), "field is immutable"))
		}
	}
	return errs
}

// lifecycleModes prints as Kubernetes' []storage.VolumeLifecycleMode.
type lifecycleModes []string

func (m lifecycleModes) GoString() string {
	q := make([]string, len(m))
	for i, s := range m {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[]storage.VolumeLifecycleMode{" + strings.Join(q, ", ") + "}"
}

// validateCSINode is ValidateCSINode (and, with old, the rule that a
// driver already listed does not change; its allocatable count neither,
// MutableCSINodeAllocatableCount being off in v1.33). A node ID longer
// than 192 characters is kept only if the old object had one.
func validateCSINode(o, old *storagev1.CSINode) field.ErrorList {
	maxID := csiNodeIDMaxLength
	for _, d := range old.GetSpec().GetDrivers() {
		if len(d.GetNodeId()) > csiNodeIDMaxLength {
			maxID = csiNodeIDLongerMaxLength
		}
	}
	var errs field.ErrorList
	dp := field.NewPath("spec", "drivers")
	names := map[string]bool{}
	for i, d := range o.GetSpec().GetDrivers() {
		ip := dp.Index(i)
		errs = append(errs, validateCSIDriverName(d.GetName(), ip.Child("name"))...)
		np := ip.Child("nodeID")
		if d.GetNodeId() == "" {
			errs = append(errs, field.Required(np, ""))
		}
		if len(d.GetNodeId()) > maxID {
			errs = append(errs, field.Invalid(np, d.GetNodeId(), fmt.Sprintf("must be %d characters or less", maxID)))
		}
		if c := d.GetAllocatable(); c != nil && c.Count != nil && c.GetCount() < 0 {
			errs = append(errs, field.Invalid(ip.Child("allocatable", "count"), int64(c.GetCount()), "must be greater than or equal to 0"))
		}
		if names[d.GetName()] {
			errs = append(errs, field.Duplicate(ip.Child("name"), d.GetName()))
		}
		names[d.GetName()] = true
		keys := map[string]bool{}
		for _, k := range d.GetTopologyKeys() {
			if k == "" {
				errs = append(errs, field.Required(ip, ""))
			}
			if keys[k] {
				errs = append(errs, field.Duplicate(ip, k))
			}
			keys[k] = true
			for _, msg := range validation.IsQualifiedName(k) {
				errs = append(errs, field.Invalid(ip, k, msg))
			}
		}
	}
	for _, od := range old.GetSpec().GetDrivers() {
		for _, nd := range o.GetSpec().GetDrivers() {
			if od.GetName() == nd.GetName() && !proto.Equal(od, nd) {
				errs = append(errs, field.Invalid(dp, goValue(fmt.Sprintf("%v", nd)), "field is immutable"))
			}
		}
	}
	return errs
}

// validateVolumeAttachment is ValidateVolumeAttachment and its v1 checks
// (and, with old, the immutable spec). An inline volume spec is stored
// without the PersistentVolume spec checks Kubernetes makes of it.
func validateVolumeAttachment(o, old *storagev1.VolumeAttachment) field.ErrorList {
	s, p := o.GetSpec(), field.NewPath("spec")
	var errs field.ErrorList
	if s.GetAttacher() == "" {
		errs = append(errs, field.Required(p.Child("attacher"), ""))
	}
	src, sp := s.GetSource(), p.Child("source")
	switch {
	case src.GetInlineVolumeSpec() == nil && src.PersistentVolumeName == nil:
		errs = append(errs, field.Required(sp, "must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
	case src.GetInlineVolumeSpec() != nil && src.PersistentVolumeName != nil:
		errs = append(errs, field.Forbidden(sp, "must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
	case src.PersistentVolumeName != nil && src.GetPersistentVolumeName() == "":
		errs = append(errs, field.Required(sp.Child("persistentVolumeName"), "must specify non empty persistentVolumeName"))
	}
	for _, msg := range validation.IsDNS1123Subdomain(s.GetNodeName()) {
		errs = append(errs, field.Invalid(p.Child("nodeName"), s.GetNodeName(), msg))
	}
	errs = append(errs, validateVolumeAttachmentStatus(o)...)
	if old != nil && !proto.Equal(s, old.GetSpec()) {
		errs = append(errs, field.Invalid(p, goValue(fmt.Sprintf("%v", s)), "field is immutable"))
	}
	// The v1 checks.
	errs = append(errs, validateCSIDriverName(s.GetAttacher(), field.NewPath("spec.attacher"))...)
	if src.PersistentVolumeName != nil {
		for _, msg := range validation.IsDNS1123Subdomain(src.GetPersistentVolumeName()) {
			errs = append(errs, field.Invalid(field.NewPath("spec.source.persistentVolumeName"), src.GetPersistentVolumeName(), msg))
		}
	}
	return errs
}

// validateVolumeAttachmentStatus: attachment metadata at most 256 KiB, the
// errors' messages at most 1024 bytes and codes not negative.
func validateVolumeAttachmentStatus(o *storagev1.VolumeAttachment) field.ErrorList {
	st, p := o.GetStatus(), field.NewPath("status")
	var errs field.ErrorList
	size := 0
	for k, v := range st.GetAttachmentMetadata() {
		size += len(k) + len(v)
	}
	if size > maxAttachedVolumeMetadataSize {
		errs = append(errs, field.TooLong(p.Child("attachmentMetadata"), "", maxAttachedVolumeMetadataSize))
	}
	for _, ve := range []struct {
		name string
		e    *storagev1.VolumeError
	}{{"attachError", st.GetAttachError()}, {"detachError", st.GetDetachError()}} {
		if ve.e == nil {
			continue
		}
		ep := p.Child(ve.name)
		if len(ve.e.GetMessage()) > maxVolumeErrorMessageSize {
			// Kubernetes reports the metadata limit here.
			errs = append(errs, field.TooLong(ep.Child("message"), "", maxAttachedVolumeMetadataSize))
		}
		if ve.e.ErrorCode != nil && ve.e.GetErrorCode() < 0 {
			errs = append(errs, field.Invalid(ep.Child("errorCode"), ve.e.GetErrorCode(), validation.InclusiveRangeError(0, math.MaxInt32)))
		}
	}
	return errs
}

// validateCSIStorageCapacity is ValidateCSIStorageCapacity (and, with old,
// ValidateCSIStorageCapacityUpdate: nodeTopology and storageClassName are
// the inputs of the driver's GetCapacity call and immutable). As
// Kubernetes' strategy, a selector with a label value that is no longer
// valid is allowed on update when the stored object already had one.
func validateCSIStorageCapacity(o, old *storagev1.CSIStorageCapacity) field.ErrorList {
	opts := metav1validation.LabelSelectorValidationOptions{
		AllowInvalidLabelValueInSelector: old != nil && invalidLabelValueInSelector(old.GetNodeTopology()),
	}
	errs := metav1validation.ValidateLabelSelector(kubeconv.LabelSelector(o.GetNodeTopology()), opts, field.NewPath("nodeTopology"))
	for _, msg := range validation.IsDNS1123Subdomain(o.GetStorageClassName()) {
		errs = append(errs, field.Invalid(field.NewPath("storageClassName"), o.GetStorageClassName(), msg))
	}
	if o.Capacity != nil {
		errs = append(errs, validateQuantity(o.GetCapacity(), field.NewPath("capacity"))...)
	}
	if old == nil {
		return errs
	}
	if !proto.Equal(o.GetNodeTopology(), old.GetNodeTopology()) {
		errs = append(errs, field.Invalid(field.NewPath("nodeTopology"), kubeconv.LabelSelector(o.GetNodeTopology()), "field is immutable"))
	}
	if o.GetStorageClassName() != old.GetStorageClassName() {
		errs = append(errs, field.Invalid(field.NewPath("storageClassName"), o.GetStorageClassName(), "field is immutable"))
	}
	return errs
}

// invalidLabelValueInSelector reports whether a selector fails the strict
// check (Kubernetes once let selectors with invalid label values be stored).
func invalidLabelValueInSelector(sel *metav1.LabelSelector) bool {
	return len(metav1validation.ValidateLabelSelector(kubeconv.LabelSelector(sel), metav1validation.LabelSelectorValidationOptions{}, nil)) > 0
}
