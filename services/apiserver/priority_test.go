// This file holds the API service's tests of PriorityClasses and the
// Priority admission plugin: the built-in system classes, validation as
// kube-apiserver v1.33.13 words it, a pod's priority resolved from its
// class or the global default, and Kubernetes' refusals.
package apiserver

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	schedulingv1 "github.com/kplane/kplane/proto/kplane/scheduling/v1"
)

func TestSystemPriorityClasses(t *testing.T) {
	e := newEnv(t, nil)
	pcs := schedulingv1.NewPriorityClassServiceClient(e.conn)
	for name, value := range map[string]int32{"system-cluster-critical": 2000000000, "system-node-critical": 2000001000} {
		got, err := pcs.GetPriorityClass(admin(t), &schedulingv1.GetPriorityClassRequest{Name: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if pc := got.GetPriorityClass(); pc.GetValue() != value || pc.GetPreemptionPolicy() != "PreemptLowerPriority" {
			t.Errorf("%s: got value %d policy %q, want %d PreemptLowerPriority", name, pc.GetValue(), pc.GetPreemptionPolicy(), value)
		}
		_, err = pcs.DeletePriorityClass(admin(t), &schedulingv1.DeletePriorityClassRequest{Name: name})
		se := wantReason(t, err, apierrors.ReasonForbidden)
		if want := `priorityclasses.scheduling.k8s.io "` + name + `" is forbidden: this is a system priority class and cannot be deleted`; se.Message != want {
			t.Errorf("delete: got %q, want %q", se.Message, want)
		}
	}
}

func TestPriorityClassValidation(t *testing.T) {
	e := newEnv(t, nil)
	pcs := schedulingv1.NewPriorityClassServiceClient(e.conn)
	for _, tc := range []struct {
		name string
		pc   *schedulingv1.PriorityClass
		want string
	}{
		{name: "too high", pc: &schedulingv1.PriorityClass{Metadata: &metav1.ObjectMeta{Name: "high"}, Value: 1000000001},
			want: `PriorityClass.scheduling.k8s.io "high" is invalid: value: Forbidden: maximum allowed value of a user defined priority is 1000000000`},
		{name: "system prefix", pc: &schedulingv1.PriorityClass{Metadata: &metav1.ObjectMeta{Name: "system-mine"}, Value: 10},
			want: `PriorityClass.scheduling.k8s.io "system-mine" is invalid: metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class`},
		{name: "policy", pc: &schedulingv1.PriorityClass{Metadata: &metav1.ObjectMeta{Name: "p"}, Value: 1, PreemptionPolicy: proto.String("Sometimes")},
			want: `PriorityClass.scheduling.k8s.io "p" is invalid: preemptionPolicy: Unsupported value: "Sometimes": supported values: "PreemptLowerPriority", "Never"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pcs.CreatePriorityClass(admin(t), &schedulingv1.CreatePriorityClassRequest{PriorityClass: tc.pc})
			if se := wantReason(t, err, apierrors.ReasonInvalid); se.Message != tc.want {
				t.Errorf("got %q,\nwant %q", se.Message, tc.want)
			}
		})
	}
	// The value is immutable; one global default at most.
	cr, err := pcs.CreatePriorityClass(admin(t), &schedulingv1.CreatePriorityClassRequest{PriorityClass: &schedulingv1.PriorityClass{
		Metadata: &metav1.ObjectMeta{Name: "default-low"}, Value: 100, GlobalDefault: true}})
	if err != nil {
		t.Fatal(err)
	}
	pc := cr.GetPriorityClass()
	pc.Value = 200
	_, err = pcs.UpdatePriorityClass(admin(t), &schedulingv1.UpdatePriorityClassRequest{Name: "default-low", PriorityClass: pc})
	if se := wantReason(t, err, apierrors.ReasonInvalid); se.Message != `PriorityClass.scheduling.k8s.io "default-low" is invalid: value: Forbidden: may not be changed in an update.` {
		t.Errorf("update value: got %q", se.Message)
	}
	waitCached(t, e, "priorityclasses", "", "default-low")
	_, err = pcs.CreatePriorityClass(admin(t), &schedulingv1.CreatePriorityClassRequest{PriorityClass: &schedulingv1.PriorityClass{
		Metadata: &metav1.ObjectMeta{Name: "default-two"}, Value: 5, GlobalDefault: true}})
	if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != `priorityclasses.scheduling.k8s.io "default-two" is forbidden: PriorityClass default-low is already marked as default. Only one default can exist` {
		t.Errorf("second default: got %q", se.Message)
	}
}

func TestPriorityAdmission(t *testing.T) {
	e := newEnv(t, nil)
	pcs := schedulingv1.NewPriorityClassServiceClient(e.conn)
	// No class named and no default: priority 0, PreemptLowerPriority.
	p := mustCreatePod(t, e, testPod("default", "plain"))
	if p.GetSpec().Priority == nil || p.GetSpec().GetPriority() != 0 || p.GetSpec().GetPreemptionPolicy() != "PreemptLowerPriority" {
		t.Errorf("plain pod: got priority %v policy %q, want 0 PreemptLowerPriority", p.GetSpec().Priority, p.GetSpec().GetPreemptionPolicy())
	}
	// A pod may not choose its own priority.
	self := testPod("default", "self")
	self.Spec.Priority = proto.Int32(1000000000)
	_, err := e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default", Pod: self})
	if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != `pods "self" is forbidden: the integer value of priority (1000000000) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name` {
		t.Errorf("self-set priority: got %q", se.Message)
	}
	// An unknown class is refused.
	unknown := testPod("default", "unknown")
	unknown.Spec.PriorityClassName = "nope"
	_, err = e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default", Pod: unknown})
	if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != `pods "unknown" is forbidden: no PriorityClass with name nope was found` {
		t.Errorf("unknown class: got %q", se.Message)
	}
	// Refused before a generated name is chosen, as on Kubernetes.
	gen := testPod("default", "")
	gen.Metadata.GenerateName = "web-"
	gen.Spec.PriorityClassName = "nope"
	_, err = e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default", Pod: gen})
	if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != `pods "web-" is forbidden: no PriorityClass with name nope was found` {
		t.Errorf("generated name: got %q", se.Message)
	}
	// A class gives its value and policy.
	if _, err := pcs.CreatePriorityClass(admin(t), &schedulingv1.CreatePriorityClassRequest{PriorityClass: &schedulingv1.PriorityClass{
		Metadata: &metav1.ObjectMeta{Name: "batch"}, Value: 500, PreemptionPolicy: proto.String("Never")}}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, e, "priorityclasses", "", "batch")
	named := testPod("default", "named")
	named.Spec.PriorityClassName = "batch"
	p = mustCreatePod(t, e, named)
	if p.GetSpec().GetPriority() != 500 || p.GetSpec().GetPreemptionPolicy() != "Never" {
		t.Errorf("named class: got %d %q, want 500 Never", p.GetSpec().GetPriority(), p.GetSpec().GetPreemptionPolicy())
	}
	critical := testPod("default", "critical")
	critical.Spec.PriorityClassName = "system-cluster-critical"
	if p = mustCreatePod(t, e, critical); p.GetSpec().GetPriority() != 2000000000 {
		t.Errorf("system-cluster-critical: got %d", p.GetSpec().GetPriority())
	}
	// The global default applies to pods that name no class.
	if _, err := pcs.CreatePriorityClass(admin(t), &schedulingv1.CreatePriorityClassRequest{PriorityClass: &schedulingv1.PriorityClass{
		Metadata: &metav1.ObjectMeta{Name: "everyone"}, Value: 7, GlobalDefault: true}}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, e, "priorityclasses", "", "everyone")
	p = mustCreatePod(t, e, testPod("default", "defaulted"))
	if p.GetSpec().GetPriorityClassName() != "everyone" || p.GetSpec().GetPriority() != 7 {
		t.Errorf("global default: got class %q priority %d, want everyone 7", p.GetSpec().GetPriorityClassName(), p.GetSpec().GetPriority())
	}
}
