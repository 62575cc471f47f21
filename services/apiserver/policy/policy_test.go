// This file holds the policy package's own tests: the admission.policy span
// and the decisions on requests built in memory (the API service's tests
// run the policies end to end).

package policy

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/proto"
	arv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	kmetav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

func deploymentCreate(name string, replicas int32) *request.Admission {
	return &request.Admission{
		Attributes: request.Attributes{User: request.User{Name: "alice"}, Verb: "create", APIGroup: "apps", APIVersion: "v1",
			Resource: "deployments", Namespace: "default", Name: name},
		Operation: request.Create,
		Object: &appsv1.Deployment{ApiVersion: "apps/v1", Kind: "Deployment", Metadata: &kmetav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: &appsv1.DeploymentSpec{Replicas: proto.Int32(replicas)}},
	}
}

func TestPolicySpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	p := New(Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
		Namespace: func(_ context.Context, name string) (proto.Message, error) {
			return &corev1.Namespace{Metadata: &kmetav1.ObjectMeta{Name: name}}, nil
		}})
	fail := arv1.Fail
	p.Upsert(&arv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "max"}, Spec: arv1.ValidatingAdmissionPolicySpec{
		FailurePolicy: &fail,
		MatchConstraints: &arv1.MatchResources{
			NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
			ResourceRules: []arv1.NamedRuleWithOperations{{RuleWithOperations: arv1.RuleWithOperations{
				Operations: []arv1.OperationType{arv1.Create},
				Rule:       arv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}}}},
		Validations: []arv1.Validation{{Expression: "object.spec.replicas <= 3", Message: "too many"}},
	}})
	p.Upsert(&arv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "max"},
		Spec: arv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "max", ValidationActions: []arv1.ValidationAction{arv1.Deny}}})

	tests := []struct {
		name      string
		replicas  int32
		wantError string
	}{
		{name: "allowed", replicas: 3},
		{name: "refused", replicas: 4,
			wantError: `deployments.apps "d" is forbidden: ValidatingAdmissionPolicy 'max' with binding 'max' denied request: too many`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec.Reset()
			_, err := p.Validate(context.Background(), deploymentCreate("d", tt.replicas))
			if got := errString(err); got != tt.wantError {
				t.Fatalf("got error %q, want %q", got, tt.wantError)
			}
			if se := apierrors.FromError(err); err != nil && (se.Code != 422 || se.Reason != apierrors.ReasonInvalid) {
				t.Errorf("got %d %s, want 422 Invalid", se.Code, se.Reason)
			}
			var spans int
			for _, s := range rec.Ended() {
				if s.Name() != "admission.policy" {
					continue
				}
				spans++
				for _, kv := range s.Attributes() {
					if kv.Key == "policy.refusals" && (kv.Value.AsInt64() == 1) != (tt.wantError != "") {
						t.Errorf("policy.refusals: got %d", kv.Value.AsInt64())
					}
				}
			}
			if spans != 1 {
				t.Errorf("got %d admission.policy spans, want 1", spans)
			}
		})
	}

	// A request no policy matches records no span.
	rec.Reset()
	a := deploymentCreate("d", 9)
	a.Operation = request.Delete
	if _, err := p.Validate(context.Background(), a); err != nil {
		t.Fatalf("a delete the policy does not match: %v", err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("got %d spans for an unmatched request, want 0", n)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
