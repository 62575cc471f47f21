// This file holds the API service's tests of policy/v1 PodDisruptionBudget:
// validation messages as kube-apiserver v1.33.13 words them (recorded from
// it), the empty status a new budget gets, the status subresource and the
// generation a spec change bumps.
package apiserver

import (
	"regexp"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
)

func TestPodDisruptionBudgetValidation(t *testing.T) {
	e := newEnv(t, nil)
	pdbs := policyv1.NewPodDisruptionBudgetServiceClient(e.conn)
	// The messages kube-apiserver v1.33.13 answered for the same specs
	// (kubectl create -f); the pointers it prints differ per process.
	for _, tc := range []struct {
		name string
		spec *policyv1.PodDisruptionBudgetSpec
		want string
	}{
		{name: "both", spec: &policyv1.PodDisruptionBudgetSpec{MinAvailable: intVal(1), MaxUnavailable: intVal(1), Selector: &metav1.LabelSelector{}},
			want: `^PodDisruptionBudget\.policy "x" is invalid: spec: Invalid value: policy\.PodDisruptionBudgetSpec\{MinAvailable:\(\*intstr\.IntOrString\)\(0x[0-9a-f]+\), Selector:\(\*v1\.LabelSelector\)\(0x[0-9a-f]+\), MaxUnavailable:\(\*intstr\.IntOrString\)\(0x[0-9a-f]+\), UnhealthyPodEvictionPolicy:\(\*policy\.UnhealthyPodEvictionPolicyType\)\(nil\)\}: minAvailable and maxUnavailable cannot be both set$`},
		{name: "negative", spec: &policyv1.PodDisruptionBudgetSpec{MinAvailable: intVal(-1)},
			want: `^PodDisruptionBudget\.policy "x" is invalid: spec\.minAvailable: Invalid value: -1: must be greater than or equal to 0$`},
		{name: "over 100%", spec: &policyv1.PodDisruptionBudgetSpec{MaxUnavailable: strVal("120%")},
			want: regexp.QuoteMeta(`PodDisruptionBudget.policy "x" is invalid: spec.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"120%"}: must not be greater than 100%`)},
		{name: "not a percent", spec: &policyv1.PodDisruptionBudgetSpec{MinAvailable: strVal("10")},
			want: regexp.QuoteMeta(`PodDisruptionBudget.policy "x" is invalid: spec.minAvailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"10"}: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')`)},
		{name: "policy", spec: &policyv1.PodDisruptionBudgetSpec{MinAvailable: intVal(1), UnhealthyPodEvictionPolicy: proto.String("Never")},
			want: regexp.QuoteMeta(`PodDisruptionBudget.policy "x" is invalid: spec.unhealthyPodEvictionPolicy: Unsupported value: "Never": supported values: "AlwaysAllow", "IfHealthyBudget"`)},
		{name: "selector", spec: &policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b c"}}},
			want: regexp.QuoteMeta(`PodDisruptionBudget.policy "x" is invalid: spec.selector.matchLabels: Invalid value: "b c": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pdbs.CreatePodDisruptionBudget(admin(t), &policyv1.CreatePodDisruptionBudgetRequest{Namespace: "default",
				PodDisruptionBudget: &policyv1.PodDisruptionBudget{Metadata: om("default", "x"), Spec: tc.spec}})
			se := wantReason(t, err, apierrors.ReasonInvalid)
			if !regexp.MustCompile(tc.want).MatchString(se.Message) {
				t.Errorf("got %q, want %q", se.Message, tc.want)
			}
		})
	}
}

func TestPodDisruptionBudgetStatusAndGeneration(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	pdbs := policyv1.NewPodDisruptionBudgetServiceClient(e.conn)
	// A status sent on create is dropped, as Kubernetes' strategy does.
	cr, err := pdbs.CreatePodDisruptionBudget(ctx, &policyv1.CreatePodDisruptionBudgetRequest{Namespace: "default",
		PodDisruptionBudget: &policyv1.PodDisruptionBudget{Metadata: om("default", "web"),
			Spec:   &policyv1.PodDisruptionBudgetSpec{MinAvailable: intVal(1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			Status: &policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	got := cr.GetPodDisruptionBudget()
	if got.GetStatus() == nil || got.GetStatus().GetDisruptionsAllowed() != 0 || got.GetMetadata().GetGeneration() != 1 {
		t.Fatalf("created: got status %v generation %d, want an empty status and generation 1", got.GetStatus(), got.GetMetadata().GetGeneration())
	}
	// The status subresource writes the status only; a negative count is refused.
	st := proto.Clone(got).(*policyv1.PodDisruptionBudget)
	st.Status = &policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: -1}
	_, err = pdbs.UpdatePodDisruptionBudgetStatus(ctx, &policyv1.UpdatePodDisruptionBudgetStatusRequest{Namespace: "default", Name: "web", PodDisruptionBudget: st})
	if se := wantReason(t, err, apierrors.ReasonInvalid); se.Message != `PodDisruptionBudget.policy "web" is invalid: status.disruptionsAllowed: Invalid value: -1: must be greater than or equal to 0` {
		t.Errorf("got %q", se.Message)
	}
	st.Status = &policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 2, ObservedGeneration: 1}
	st.Spec.MinAvailable = intVal(3)
	sr, err := pdbs.UpdatePodDisruptionBudgetStatus(ctx, &policyv1.UpdatePodDisruptionBudgetStatusRequest{Namespace: "default", Name: "web", PodDisruptionBudget: st})
	if err != nil {
		t.Fatal(err)
	}
	if sr.GetPodDisruptionBudget().GetStatus().GetDisruptionsAllowed() != 2 || sr.GetPodDisruptionBudget().GetSpec().GetMinAvailable().GetIntVal() != 1 {
		t.Errorf("status update: got %v, want disruptionsAllowed 2 and the spec unchanged", sr.GetPodDisruptionBudget())
	}
	// A spec change bumps the generation and keeps the status.
	up := proto.Clone(sr.GetPodDisruptionBudget()).(*policyv1.PodDisruptionBudget)
	up.Spec.MinAvailable = nil
	up.Spec.MaxUnavailable = strVal("50%")
	up.Status = nil
	ur, err := pdbs.UpdatePodDisruptionBudget(ctx, &policyv1.UpdatePodDisruptionBudgetRequest{Namespace: "default", Name: "web", PodDisruptionBudget: up})
	if err != nil {
		t.Fatal(err)
	}
	if g := ur.GetPodDisruptionBudget().GetMetadata().GetGeneration(); g != 2 {
		t.Errorf("generation: got %d, want 2", g)
	}
	if ur.GetPodDisruptionBudget().GetStatus().GetDisruptionsAllowed() != 2 {
		t.Errorf("status after update: got %v, want it kept", ur.GetPodDisruptionBudget().GetStatus())
	}
}
