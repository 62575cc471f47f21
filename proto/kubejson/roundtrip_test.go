// This file holds the proof that the generated messages drop no field: for
// every served kind, objects of k8s.io/api's Go types filled by a fuzzer
// (sigs.k8s.io/randfill, as Kubernetes' own round-trip tests) are written
// as Kubernetes JSON, read into the kplane message with Unmarshal, written
// back with Marshal and read into the k8s.io/api type again: the result
// must equal the original after Kubernetes' own JSON round trip (which
// normalises time precision, nil vs empty).

package kubejson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	admissionregistrationk8s "k8s.io/api/admissionregistration/v1"
	appsk8s "k8s.io/api/apps/v1"
	authorizationk8s "k8s.io/api/authorization/v1"
	autoscalingk8s "k8s.io/api/autoscaling/v1"
	certificatesk8s "k8s.io/api/certificates/v1"
	coordinationk8s "k8s.io/api/coordination/v1"
	corek8s "k8s.io/api/core/v1"
	discoveryk8s "k8s.io/api/discovery/v1"
	eventsk8s "k8s.io/api/events/v1"
	networkingk8s "k8s.io/api/networking/v1"
	nodek8s "k8s.io/api/node/v1"
	rback8s "k8s.io/api/rbac/v1"
	schedulingk8s "k8s.io/api/scheduling/v1"
	storagek8s "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metak8s "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/randfill"

	"google.golang.org/protobuf/proto"

	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	certificatesv1 "github.com/kplane/kplane/proto/kplane/certificates/v1"
	coordinationv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	eventsv1 "github.com/kplane/kplane/proto/kplane/events/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	networkingv1 "github.com/kplane/kplane/proto/kplane/networking/v1"
	nodev1 "github.com/kplane/kplane/proto/kplane/node/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	schedulingv1 "github.com/kplane/kplane/proto/kplane/scheduling/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
)

// servedKinds pairs every served kind (and list, and review) with its
// kplane message.
func servedKinds() []struct {
	k8s    any
	kplane proto.Message
} {
	type pair = struct {
		k8s    any
		kplane proto.Message
	}
	return []pair{
		{&corek8s.Namespace{}, &corev1.Namespace{}}, {&corek8s.NamespaceList{}, &corev1.NamespaceList{}},
		{&corek8s.Pod{}, &corev1.Pod{}}, {&corek8s.PodList{}, &corev1.PodList{}},
		{&corek8s.Binding{}, &corev1.Binding{}},
		{&corek8s.Node{}, &corev1.Node{}}, {&corek8s.NodeList{}, &corev1.NodeList{}},
		{&corek8s.Event{}, &corev1.Event{}}, {&corek8s.EventList{}, &corev1.EventList{}},
		{&corek8s.Service{}, &corev1.Service{}}, {&corek8s.ServiceList{}, &corev1.ServiceList{}},
		{&corek8s.Endpoints{}, &corev1.Endpoints{}}, {&corek8s.EndpointsList{}, &corev1.EndpointsList{}},
		{&corek8s.ConfigMap{}, &corev1.ConfigMap{}}, {&corek8s.ConfigMapList{}, &corev1.ConfigMapList{}},
		{&corek8s.Secret{}, &corev1.Secret{}}, {&corek8s.SecretList{}, &corev1.SecretList{}},
		{&corek8s.ServiceAccount{}, &corev1.ServiceAccount{}}, {&corek8s.ServiceAccountList{}, &corev1.ServiceAccountList{}},
		{&corek8s.ResourceQuota{}, &corev1.ResourceQuota{}}, {&corek8s.ResourceQuotaList{}, &corev1.ResourceQuotaList{}},
		{&corek8s.LimitRange{}, &corev1.LimitRange{}}, {&corek8s.LimitRangeList{}, &corev1.LimitRangeList{}},
		{&schedulingk8s.PriorityClass{}, &schedulingv1.PriorityClass{}}, {&schedulingk8s.PriorityClassList{}, &schedulingv1.PriorityClassList{}},
		{&appsk8s.Deployment{}, &appsv1.Deployment{}}, {&appsk8s.DeploymentList{}, &appsv1.DeploymentList{}},
		{&appsk8s.ReplicaSet{}, &appsv1.ReplicaSet{}}, {&appsk8s.ReplicaSetList{}, &appsv1.ReplicaSetList{}},
		{&coordinationk8s.Lease{}, &coordinationv1.Lease{}}, {&coordinationk8s.LeaseList{}, &coordinationv1.LeaseList{}},
		{&rback8s.Role{}, &rbacv1.Role{}}, {&rback8s.RoleList{}, &rbacv1.RoleList{}},
		{&rback8s.ClusterRole{}, &rbacv1.ClusterRole{}}, {&rback8s.ClusterRoleList{}, &rbacv1.ClusterRoleList{}},
		{&rback8s.RoleBinding{}, &rbacv1.RoleBinding{}}, {&rback8s.RoleBindingList{}, &rbacv1.RoleBindingList{}},
		{&rback8s.ClusterRoleBinding{}, &rbacv1.ClusterRoleBinding{}}, {&rback8s.ClusterRoleBindingList{}, &rbacv1.ClusterRoleBindingList{}},
		{&admissionregistrationk8s.MutatingWebhookConfiguration{}, &admissionregistrationv1.MutatingWebhookConfiguration{}},
		{&admissionregistrationk8s.MutatingWebhookConfigurationList{}, &admissionregistrationv1.MutatingWebhookConfigurationList{}},
		{&admissionregistrationk8s.ValidatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}},
		{&admissionregistrationk8s.ValidatingWebhookConfigurationList{}, &admissionregistrationv1.ValidatingWebhookConfigurationList{}},
		{&authorizationk8s.SubjectAccessReview{}, &authorizationv1.SubjectAccessReview{}},
		{&authorizationk8s.SelfSubjectAccessReview{}, &authorizationv1.SelfSubjectAccessReview{}},
		{&authorizationk8s.LocalSubjectAccessReview{}, &authorizationv1.LocalSubjectAccessReview{}},
		{&authorizationk8s.SelfSubjectRulesReview{}, &authorizationv1.SelfSubjectRulesReview{}},
		{&autoscalingk8s.Scale{}, &autoscalingv1.Scale{}},
		{&autoscalingk8s.HorizontalPodAutoscaler{}, &autoscalingv1.HorizontalPodAutoscaler{}},
		{&autoscalingk8s.HorizontalPodAutoscalerList{}, &autoscalingv1.HorizontalPodAutoscalerList{}},
		{&metak8s.Status{}, &metav1.Status{}},
		{&discoveryk8s.EndpointSlice{}, &discoveryv1.EndpointSlice{}}, {&discoveryk8s.EndpointSliceList{}, &discoveryv1.EndpointSliceList{}},
		{&corek8s.PodTemplate{}, &corev1.PodTemplate{}}, {&corek8s.PodTemplateList{}, &corev1.PodTemplateList{}},
		{&networkingk8s.Ingress{}, &networkingv1.Ingress{}}, {&networkingk8s.IngressList{}, &networkingv1.IngressList{}},
		{&networkingk8s.IngressClass{}, &networkingv1.IngressClass{}}, {&networkingk8s.IngressClassList{}, &networkingv1.IngressClassList{}},
		{&networkingk8s.NetworkPolicy{}, &networkingv1.NetworkPolicy{}}, {&networkingk8s.NetworkPolicyList{}, &networkingv1.NetworkPolicyList{}},
		{&nodek8s.RuntimeClass{}, &nodev1.RuntimeClass{}}, {&nodek8s.RuntimeClassList{}, &nodev1.RuntimeClassList{}},
		{&storagek8s.CSIDriver{}, &storagev1.CSIDriver{}}, {&storagek8s.CSIDriverList{}, &storagev1.CSIDriverList{}},
		{&storagek8s.CSINode{}, &storagev1.CSINode{}}, {&storagek8s.CSINodeList{}, &storagev1.CSINodeList{}},
		{&storagek8s.VolumeAttachment{}, &storagev1.VolumeAttachment{}}, {&storagek8s.VolumeAttachmentList{}, &storagev1.VolumeAttachmentList{}},
		{&eventsk8s.Event{}, &eventsv1.Event{}}, {&eventsk8s.EventList{}, &eventsv1.EventList{}},
		{&certificatesk8s.CertificateSigningRequest{}, &certificatesv1.CertificateSigningRequest{}},
		{&certificatesk8s.CertificateSigningRequestList{}, &certificatesv1.CertificateSigningRequestList{}},
	}
}

// filler fills k8s.io/api objects with random values that Kubernetes' JSON
// can carry (valid quantities, times at the precision Kubernetes writes,
// IntOrString whose type matches its value, JSON in FieldsV1).
func filler(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.2).NumElements(1, 2).Funcs(
		func(tm *metak8s.TypeMeta, c randfill.Continue) {},
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(c.Int63n(1e12), resource.DecimalSI)
		},
		func(t *metak8s.Time, c randfill.Continue) {
			*t = metak8s.Unix(c.Int63n(4e9), 0)
		},
		func(t *metak8s.MicroTime, c randfill.Continue) {
			*t = metak8s.NewMicroTime(time.Unix(c.Int63n(4e9), c.Int63n(1e6)*1000))
		},
		func(d *metak8s.Duration, c randfill.Continue) {
			d.Duration = time.Duration(c.Int63n(1e12))
		},
		func(v *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*v = intstr.FromInt32(c.Int31())
			} else {
				*v = intstr.FromString(c.String(0))
			}
		},
		func(f *metak8s.FieldsV1, c randfill.Continue) {
			k, _ := json.Marshal("f:" + c.String(0))
			f.Raw = []byte(fmt.Sprintf(`{%s:{}}`, k))
		},
	)
}

// normalize zeroes every TypeMeta in v (Marshal fills in apiVersion and
// kind, which the fuzzer leaves empty) and rewrites every FieldsV1 in
// compact JSON without HTML escapes (its value, not its spelling, is what
// Kubernetes keeps).
func normalize(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			normalize(v.Elem())
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(metak8s.TypeMeta{}) {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		if f, ok := v.Addr().Interface().(*metak8s.FieldsV1); ok {
			var val any
			if json.Unmarshal(f.Raw, &val) == nil {
				var b bytes.Buffer
				enc := json.NewEncoder(&b)
				enc.SetEscapeHTML(false)
				_ = enc.Encode(val)
				f.Raw = bytes.TrimSpace(b.Bytes())
			}
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				normalize(v.Field(i))
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			normalize(v.Index(i))
		}
	}
}

func TestRoundTripEveryServedKind(t *testing.T) {
	const rounds = 40
	for _, kind := range servedKinds() {
		name := reflect.TypeOf(kind.k8s).Elem().String()
		t.Run(name, func(t *testing.T) {
			for i := 0; i < rounds; i++ {
				orig := reflect.New(reflect.TypeOf(kind.k8s).Elem()).Interface()
				filler(int64(i)).Fill(orig)
				in, err := json.Marshal(orig)
				if err != nil {
					t.Fatal(err)
				}
				// What Kubernetes' own JSON round trip makes of the object.
				want := reflect.New(reflect.TypeOf(kind.k8s).Elem()).Interface()
				if err := json.Unmarshal(in, want); err != nil {
					t.Fatal(err)
				}
				m := kind.kplane.ProtoReflect().New().Interface()
				if err := Unmarshal(in, m, Options{}); err != nil {
					t.Fatalf("Unmarshal of %s: %v", in, err)
				}
				// Through the wire format, as the object is stored.
				wire, err := proto.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				m = kind.kplane.ProtoReflect().New().Interface()
				if err := proto.Unmarshal(wire, m); err != nil {
					t.Fatal(err)
				}
				out, err := Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				got := reflect.New(reflect.TypeOf(kind.k8s).Elem()).Interface()
				if err := json.Unmarshal(out, got); err != nil {
					t.Fatalf("Kubernetes cannot read kubejson's %s: %v", out, err)
				}
				normalize(reflect.ValueOf(got))
				normalize(reflect.ValueOf(want))
				if !apiequality.Semantic.DeepEqual(want, got) {
					wj, _ := json.Marshal(want)
					gj, _ := json.Marshal(got)
					n := 0
					for n < len(wj) && n < len(gj) && wj[n] == gj[n] {
						n++
					}
					from := max(0, n-300)
					t.Fatalf("round trip changed the object (%s), from byte %d:\n in: %s\nout: %s", firstDiff(reflect.ValueOf(want), reflect.ValueOf(got), ""), n, wj[from:min(len(wj), n+200)], gj[from:min(len(gj), n+200)])
				}
			}
		})
	}
}

// firstDiff names the first field where a and b differ semantically.
func firstDiff(a, b reflect.Value, path string) string {
	if a.CanInterface() && apiequality.Semantic.DeepEqual(a.Interface(), b.Interface()) {
		return ""
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return fmt.Sprintf("%s: nil %v vs %v", path, a.IsNil(), b.IsNil())
		}
		return firstDiff(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !a.Type().Field(i).IsExported() {
				continue
			}
			if d := firstDiff(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); d != "" {
				return d
			}
		}
	case reflect.Slice:
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: len %d vs %d", path, a.Len(), b.Len())
		}
		for i := 0; i < a.Len(); i++ {
			if d := firstDiff(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
	case reflect.Map:
		return fmt.Sprintf("%s: %v vs %v", path, a.Interface(), b.Interface())
	}
	return fmt.Sprintf("%s: %#v vs %#v", path, a.Interface(), b.Interface())
}
