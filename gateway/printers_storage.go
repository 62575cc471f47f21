// This file holds the Table cells kube-apiserver prints for StatefulSets,
// PersistentVolumeClaims, PersistentVolumes and StorageClasses.
package gateway

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// betaStorageClass is the annotation that, where set, names the class of
// a claim or a volume ahead of its spec.
const betaStorageClass = "volume.beta.kubernetes.io/storage-class"

func printStatefulSet(obj *appsv1.StatefulSet, since string) printedRow {
	names, images := containerCells(obj.Spec.Template.Spec.Containers)
	return row(obj.Name, fmt.Sprintf("%d/%d", obj.Status.ReadyReplicas, replicas(obj.Spec.Replicas)), since, names, images)
}

func printPersistentVolumeClaim(obj *corev1.PersistentVolumeClaim, since string) printedRow {
	phase := string(obj.Status.Phase)
	if obj.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	var capacity, modes string
	if obj.Spec.VolumeName != "" {
		modes = accessModesString(obj.Status.AccessModes)
		q := obj.Status.Capacity[corev1.ResourceStorage]
		capacity = q.String()
	}
	class, ok := obj.Annotations[betaStorageClass]
	if !ok && obj.Spec.StorageClassName != nil {
		class = *obj.Spec.StorageClassName
	}
	return row(obj.Name, phase, obj.Spec.VolumeName, capacity, modes, class, orUnset(obj.Spec.VolumeAttributesClassName),
		since, orUnset((*string)(obj.Spec.VolumeMode)))
}

func printPersistentVolume(obj *corev1.PersistentVolume, since string) printedRow {
	var claim string
	if ref := obj.Spec.ClaimRef; ref != nil {
		claim = ref.Namespace + "/" + ref.Name
	}
	phase := string(obj.Status.Phase)
	if obj.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	class, ok := obj.Annotations[betaStorageClass]
	if !ok {
		class = obj.Spec.StorageClassName
	}
	q := obj.Spec.Capacity[corev1.ResourceStorage]
	return row(obj.Name, q.String(), accessModesString(obj.Spec.AccessModes), string(obj.Spec.PersistentVolumeReclaimPolicy),
		phase, claim, class, orUnset(obj.Spec.VolumeAttributesClassName), obj.Status.Reason, since,
		orUnset((*string)(obj.Spec.VolumeMode)))
}

func printStorageClass(obj *storagev1.StorageClass, since string) printedRow {
	name := obj.Name
	if obj.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" ||
		obj.Annotations["storageclass.beta.kubernetes.io/is-default-class"] == "true" {
		name += " (default)"
	}
	reclaim := "Delete"
	if obj.ReclaimPolicy != nil {
		reclaim = string(*obj.ReclaimPolicy)
	}
	binding := "Immediate"
	if obj.VolumeBindingMode != nil {
		binding = string(*obj.VolumeBindingMode)
	}
	expand := obj.AllowVolumeExpansion != nil && *obj.AllowVolumeExpansion
	return row(name, obj.Provisioner, reclaim, binding, expand, since)
}

// accessModesString abbreviates access modes as kubectl shows them, in
// Kubernetes' order: RWO,ROX,RWX,RWOP.
func accessModesString(modes []corev1.PersistentVolumeAccessMode) string {
	var out []string
	for _, m := range []struct {
		mode corev1.PersistentVolumeAccessMode
		abbr string
	}{{corev1.ReadWriteOnce, "RWO"}, {corev1.ReadOnlyMany, "ROX"}, {corev1.ReadWriteMany, "RWX"}, {corev1.ReadWriteOncePod, "RWOP"}} {
		for _, have := range modes {
			if have == m.mode {
				out = append(out, m.abbr)
				break
			}
		}
	}
	return strings.Join(out, ",")
}

func orUnset(s *string) string {
	if s == nil {
		return "<unset>"
	}
	return *s
}
