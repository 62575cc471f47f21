// This file holds the test that every API service replica enforces the
// ValidatingAdmissionPolicies written through any of them.

package apiserver

import (
	"testing"
	"time"

	"github.com/kplane/kplane/proto/apierrors"
	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/internal/storetest"
)

func TestPoliciesOnEveryReplica(t *testing.T) {
	eps := storetest.Start(t)
	a, b := newEnvOn(t, eps, nil), newEnvOn(t, eps, nil)
	rule := &admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: &admissionregistrationv1.RuleWithOperations{
		Operations: []string{"CREATE"}, Rule: &admissionregistrationv1.Rule{ApiGroups: []string{""}, ApiVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}
	if _, err := admissionregistrationv1.NewValidatingAdmissionPolicyServiceClient(a.conn).CreateValidatingAdmissionPolicy(admin(t),
		&admissionregistrationv1.CreateValidatingAdmissionPolicyRequest{ValidatingAdmissionPolicy: &admissionregistrationv1.ValidatingAdmissionPolicy{
			Metadata: om("", "no-big-data"),
			Spec: &admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []*admissionregistrationv1.NamedRuleWithOperations{rule}},
				Validations:      []*admissionregistrationv1.Validation{{Expression: "!has(object.data) || object.data.size() < 2", Message: "at most one key"}},
			}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admissionregistrationv1.NewValidatingAdmissionPolicyBindingServiceClient(a.conn).CreateValidatingAdmissionPolicyBinding(admin(t),
		&admissionregistrationv1.CreateValidatingAdmissionPolicyBindingRequest{ValidatingAdmissionPolicyBinding: &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			Metadata: om("", "no-big-data"),
			Spec:     &admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "no-big-data", ValidationActions: []string{"Deny"}},
		}}); err != nil {
		t.Fatal(err)
	}
	big := &corev1.ConfigMap{Metadata: om("default", "big"), Data: map[string]string{"a": "1", "b": "2"}}
	for _, e := range []*env{a, b} {
		var err error
		for range 200 {
			if _, err = e.cms.CreateConfigMap(admin(t), &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: big, DryRun: []string{"All"}}); err != nil {
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
		want := `configmaps "big" is forbidden: ValidatingAdmissionPolicy 'no-big-data' with binding 'no-big-data' denied request: at most one key`
		if se := apierrors.FromError(err); se == nil || se.Message != want {
			t.Errorf("replica %s: got %v, want %q", e.srv.Addr(), err, want)
		}
	}
	if _, err := b.cms.CreateConfigMap(admin(t), &corev1.CreateConfigMapRequest{Namespace: "default",
		ConfigMap: &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: "small"}, Data: map[string]string{"a": "1"}}}); err != nil {
		t.Errorf("a ConfigMap the policy allows: %v", err)
	}
}
