// This file holds the cells of the server-side Table rows kube-apiserver
// prints for each kind the gateway serves (its printers in
// k8s.io/kubernetes/pkg/printers/internalversion), computed on the
// object decoded into its k8s.io/api Go type. Every column is printed, the
// wide ones (priority 1) included, as kube-apiserver does; kubectl hides
// the wide ones unless -o wide.
package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kplane/kplane/internal/hpaconv"
)

// rowCondition is a Table row's condition (a finished pod's Completed).
type rowCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// printedRow is one object's cells and row conditions.
type printedRow struct {
	cells      []any
	conditions []rowCondition
}

// printObject decodes a Kubernetes JSON object of the kind gvk into its
// k8s.io/api type and prints its row as kube-apiserver does at time now.
// Kinds without a printer of their own get kube-apiserver's default row:
// the name and the creation time.
func printObject(gvk schema.GroupVersionKind, o map[string]any, now time.Time) (printedRow, error) {
	typed, err := scheme.Scheme.New(gvk)
	if err != nil {
		return defaultRow(o), nil
	}
	b, err := json.Marshal(o)
	if err != nil {
		return printedRow{}, fmt.Errorf("gateway: table of %s: %w", gvk.Kind, err)
	}
	if err := json.Unmarshal(b, typed); err != nil {
		// kplane may write a MicroTime (an event's eventTime, a lease's
		// renewTime) with other than Kubernetes' six fractional digits,
		// which its Go type refuses: print with every timestamp in that
		// form (Time fields take it too). Whatever else the Go type
		// refuses leaves its field empty in the row: a Table is for
		// reading, and one odd field must not fail the whole list.
		b, merr := json.Marshal(microTimes(o))
		if merr != nil {
			return printedRow{}, fmt.Errorf("gateway: table of %s: %w", gvk.Kind, merr)
		}
		if typed, err = scheme.Scheme.New(gvk); err != nil {
			return printedRow{}, fmt.Errorf("gateway: table of %s: %w", gvk.Kind, err)
		}
		_ = json.Unmarshal(b, typed)
	}
	since := func(t metav1.Time) string { return sinceTime(t.Time, now) }
	switch obj := typed.(type) {
	case *corev1.Pod:
		return printPod(obj, now), nil
	case *corev1.Node:
		return row(obj.Name, nodeStatus(obj), orNone(strings.Join(nodeRoles(obj), ",")), since(obj.CreationTimestamp),
			obj.Status.NodeInfo.KubeletVersion, nodeAddress(obj, corev1.NodeInternalIP), nodeAddress(obj, corev1.NodeExternalIP),
			orUnknown(obj.Status.NodeInfo.OSImage), orUnknown(obj.Status.NodeInfo.KernelVersion), orUnknown(obj.Status.NodeInfo.ContainerRuntimeVersion)), nil
	case *corev1.Namespace:
		return row(obj.Name, string(obj.Status.Phase), since(obj.CreationTimestamp)), nil
	case *corev1.Event:
		return printEvent(obj, now), nil
	case *eventsv1.Event:
		return printEventsV1(obj, now), nil
	case *corev1.Service:
		return row(obj.Name, string(obj.Spec.Type), serviceClusterIP(obj), serviceExternalIP(obj), orNone(servicePorts(obj.Spec.Ports)),
			since(obj.CreationTimestamp), orNone(labels.FormatLabels(obj.Spec.Selector))), nil
	case *corev1.Endpoints:
		return row(obj.Name, endpointsString(obj), since(obj.CreationTimestamp)), nil
	case *corev1.ConfigMap:
		return row(obj.Name, int64(len(obj.Data)+len(obj.BinaryData)), since(obj.CreationTimestamp)), nil
	case *corev1.Secret:
		return row(obj.Name, string(obj.Type), int64(len(obj.Data)), since(obj.CreationTimestamp)), nil
	case *corev1.ServiceAccount:
		return row(obj.Name, int64(len(obj.Secrets)), since(obj.CreationTimestamp)), nil
	case *policyv1.PodDisruptionBudget:
		minAvailable, maxUnavailable := "N/A", "N/A"
		if obj.Spec.MinAvailable != nil {
			minAvailable = obj.Spec.MinAvailable.String()
		}
		if obj.Spec.MaxUnavailable != nil {
			maxUnavailable = obj.Spec.MaxUnavailable.String()
		}
		return row(obj.Name, minAvailable, maxUnavailable, int64(obj.Status.DisruptionsAllowed), since(obj.CreationTimestamp)), nil
	case *appsv1.Deployment:
		names, images := containerCells(obj.Spec.Template.Spec.Containers)
		return row(obj.Name, fmt.Sprintf("%d/%d", obj.Status.ReadyReplicas, replicas(obj.Spec.Replicas)),
			int64(obj.Status.UpdatedReplicas), int64(obj.Status.AvailableReplicas), since(obj.CreationTimestamp),
			names, images, selectorString(obj.Spec.Selector)), nil
	case *appsv1.ReplicaSet:
		names, images := containerCells(obj.Spec.Template.Spec.Containers)
		return row(obj.Name, int64(replicas(obj.Spec.Replicas)), int64(obj.Status.Replicas), int64(obj.Status.ReadyReplicas),
			since(obj.CreationTimestamp), names, images, selectorString(obj.Spec.Selector)), nil
	case *corev1.ReplicationController:
		var names, images string
		if obj.Spec.Template != nil {
			names, images = containerCells(obj.Spec.Template.Spec.Containers)
		}
		return row(obj.Name, int64(replicas(obj.Spec.Replicas)), int64(obj.Status.Replicas), int64(obj.Status.ReadyReplicas),
			since(obj.CreationTimestamp), names, images, labels.FormatLabels(obj.Spec.Selector)), nil
	case *appsv1.DaemonSet:
		names, images := containerCells(obj.Spec.Template.Spec.Containers)
		st := obj.Status
		return row(obj.Name, int64(st.DesiredNumberScheduled), int64(st.CurrentNumberScheduled), int64(st.NumberReady),
			int64(st.UpdatedNumberScheduled), int64(st.NumberAvailable), labels.FormatLabels(obj.Spec.Template.Spec.NodeSelector),
			since(obj.CreationTimestamp), names, images, metav1.FormatLabelSelector(obj.Spec.Selector)), nil
	case *appsv1.StatefulSet:
		return printStatefulSet(obj, since(obj.CreationTimestamp)), nil
	case *autoscalingv2.HorizontalPodAutoscaler:
		return printHPA(obj, since(obj.CreationTimestamp)), nil
	case *autoscalingv1.HorizontalPodAutoscaler:
		// kube-apiserver prints the internal object: v1's, annotations
		// and all, as v2.
		return printHPA(hpaconv.FromV1(obj), since(obj.CreationTimestamp)), nil
	case *corev1.PersistentVolumeClaim:
		return printPersistentVolumeClaim(obj, since(obj.CreationTimestamp)), nil
	case *corev1.PersistentVolume:
		return printPersistentVolume(obj, since(obj.CreationTimestamp)), nil
	case *storagev1.StorageClass:
		return printStorageClass(obj, since(obj.CreationTimestamp)), nil
	case *appsv1.ControllerRevision:
		controller := "<none>"
		if ref := metav1.GetControllerOf(obj); ref != nil {
			gv, err := schema.ParseGroupVersion(ref.APIVersion)
			if err != nil {
				return printedRow{}, fmt.Errorf("gateway: table of %s: %w", gvk.Kind, err)
			}
			controller = ref.Name
			if gk := gv.WithKind(ref.Kind).GroupKind(); !gk.Empty() {
				controller = strings.ToLower(gk.String()) + "/" + ref.Name
			}
		}
		return row(obj.Name, controller, obj.Revision, since(obj.CreationTimestamp)), nil
	case *batchv1.Job:
		return printJob(obj, now), nil
	case *batchv1.CronJob:
		return printCronJob(obj, now), nil
	case *certificatesv1.CertificateSigningRequest:
		return printCSR(obj, now), nil
	case *coordinationv1.Lease:
		holder := ""
		if obj.Spec.HolderIdentity != nil {
			holder = *obj.Spec.HolderIdentity
		}
		return row(obj.Name, holder, since(obj.CreationTimestamp)), nil
	case *rbacv1.RoleBinding:
		return bindingRow(obj.Name, obj.RoleRef, obj.Subjects, since(obj.CreationTimestamp)), nil
	case *rbacv1.ClusterRoleBinding:
		return bindingRow(obj.Name, obj.RoleRef, obj.Subjects, since(obj.CreationTimestamp)), nil
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		return row(obj.Name, int64(len(obj.Webhooks)), since(obj.CreationTimestamp)), nil
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		return row(obj.Name, int64(len(obj.Webhooks)), since(obj.CreationTimestamp)), nil
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		paramKind := "<unset>"
		if k := obj.Spec.ParamKind; k != nil {
			paramKind = k.APIVersion + "/" + k.Kind
		}
		return row(obj.Name, int64(len(obj.Spec.Validations)), paramKind, since(obj.CreationTimestamp)), nil
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		return row(obj.Name, obj.Spec.PolicyName, paramRefCell(obj.Spec.ParamRef), since(obj.CreationTimestamp)), nil
	case *autoscalingv1.Scale:
		return row(obj.Name, int64(obj.Spec.Replicas), int64(obj.Status.Replicas), since(obj.CreationTimestamp)), nil
	case *corev1.ResourceQuota:
		return printResourceQuota(obj, now), nil
	case *schedulingv1.PriorityClass:
		return printPriorityClass(obj, now), nil
	}
	if r, ok := printMoreKinds(typed, now); ok {
		return r, nil
	}
	if r, ok := printFlowControl(typed, now); ok {
		return r, nil
	}
	return defaultRow(o), nil
}

// paramRefCell is a binding's PARAMREF cell as kube-apiserver prints it: the
// param's namespace/name ("*" when the namespace is not given, as the scope is
// not known there), else its selector in the selector's Go string form.
func paramRefCell(ref *admissionregistrationv1.ParamRef) string {
	switch {
	case ref == nil:
		return "<unset>"
	case ref.Name != "" && ref.Namespace != "":
		return ref.Namespace + "/" + ref.Name
	case ref.Name != "":
		return "*/" + ref.Name
	case ref.Selector != nil:
		return ref.Selector.String()
	}
	return "<unset>"
}

// microTimes returns a copy of v with every RFC 3339 timestamp string
// rewritten with six fractional digits.
func microTimes(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = microTimes(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = microTimes(e)
		}
		return out
	case string:
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.Format("2006-01-02T15:04:05.000000Z07:00")
		}
	}
	return v
}

// defaultRow is kube-apiserver's row for kinds without a printer (roles,
// cluster roles): the name and the creation time in RFC 3339, UTC.
func defaultRow(o map[string]any) printedRow {
	created := ""
	if t, err := time.Parse(time.RFC3339, str(o, "metadata", "creationTimestamp")); err == nil {
		created = t.UTC().Format(time.RFC3339)
	}
	return row(str(o, "metadata", "name"), created)
}

func row(cells ...any) printedRow { return printedRow{cells: cells} }

// sinceTime is the age kubectl shows (2m3s, 5h, 12d), or <unknown> for the
// zero time.
func sinceTime(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

func replicas(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func containerCells(cs []corev1.Container) (names, images string) {
	n := make([]string, len(cs))
	im := make([]string, len(cs))
	for i, c := range cs {
		n[i], im[i] = c.Name, c.Image
	}
	return strings.Join(n, ","), strings.Join(im, ",")
}

func selectorString(ls *metav1.LabelSelector) string {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return "<invalid>"
	}
	return sel.String()
}

func bindingRow(name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, age string) printedRow {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		}
	}
	return row(name, ref.Kind+"/"+ref.Name, age, strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", "))
}

// rowObject is what a Table row carries as its object for includeObject
// (None, Object or Metadata, the default).
func rowObject(o map[string]any, includeObject string) (any, bool) {
	switch includeObject {
	case "None":
		return nil, false
	case "Object":
		return o, true
	}
	md, _ := o["metadata"].(map[string]any)
	return map[string]any{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md}, true
}

// printCSR prints a CertificateSigningRequest's SIGNERNAME, REQUESTOR,
// REQUESTEDDURATION and CONDITION (Denied, else Approved, else Pending;
// then ,Failed and ,Issued).
func printCSR(csr *certificatesv1.CertificateSigningRequest, now time.Time) printedRow {
	signer, requested := "<none>", "<none>"
	if csr.Spec.SignerName != "" {
		signer = csr.Spec.SignerName
	}
	if e := csr.Spec.ExpirationSeconds; e != nil {
		requested = duration.HumanDuration(time.Duration(*e) * time.Second)
	}
	var approved, denied, failed bool
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved:
			approved = true
		case certificatesv1.CertificateDenied:
			denied = true
		case certificatesv1.CertificateFailed:
			failed = true
		}
	}
	cond := "Pending"
	if denied {
		cond = "Denied"
	} else if approved {
		cond = "Approved"
	}
	if failed {
		cond += ",Failed"
	}
	if len(csr.Status.Certificate) > 0 {
		cond += ",Issued"
	}
	return row(csr.Name, sinceTime(csr.CreationTimestamp.Time, now), signer, csr.Spec.Username, requested, cond)
}
