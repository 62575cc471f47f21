// This file tests the flowcontrol.apiserver.k8s.io kinds against a real API
// service: Kubernetes' bootstrap configuration created and kept in place
// (the mandatory objects restored, a suggested one left alone once its
// autoupdate-spec annotation says false), Kubernetes' defaults and
// refusals, and the Dangling condition.
package apiserver

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	flowcontrolv1 "github.com/kplane/kplane/proto/kplane/flowcontrol/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func TestFlowControlBootstrapConfiguration(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	fsc := flowcontrolv1.NewFlowSchemaServiceClient(e.conn)
	plc := flowcontrolv1.NewPriorityLevelConfigurationServiceClient(e.conn)

	getFS := func(name string) *flowcontrolv1.FlowSchema {
		r, err := fsc.GetFlowSchema(ctx, &flowcontrolv1.GetFlowSchemaRequest{Name: name})
		if err != nil {
			return nil
		}
		return r.GetFlowSchema()
	}
	getPL := func(name string) *flowcontrolv1.PriorityLevelConfiguration {
		r, err := plc.GetPriorityLevelConfiguration(ctx, &flowcontrolv1.GetPriorityLevelConfigurationRequest{Name: name})
		if err != nil {
			return nil
		}
		return r.GetPriorityLevelConfiguration()
	}
	for _, name := range []string{"exempt", "catch-all", "system-leader-election", "kube-controller-manager", "global-default", "system-nodes", "probes"} {
		testutil.EventuallyWithin(t, 10*time.Second, "FlowSchema "+name, func() bool { return getFS(name) != nil })
	}
	for _, name := range []string{"exempt", "catch-all", "node-high", "system", "leader-election", "workload-high", "workload-low", "global-default"} {
		testutil.EventuallyWithin(t, 10*time.Second, "priority level "+name, func() bool { return getPL(name) != nil })
	}
	gd := getPL("global-default")
	if got := gd.GetMetadata().GetAnnotations()[autoUpdateAnnotation]; got != "true" {
		t.Errorf("global-default's %s = %q, want true", autoUpdateAnnotation, got)
	}
	if q := gd.GetSpec().GetLimited().GetLimitResponse().GetQueuing(); q.GetQueues() != 128 || q.GetHandSize() != 6 || q.GetQueueLengthLimit() != 50 {
		t.Errorf("global-default's queuing = %v, want Kubernetes' 128/6/50", q)
	}

	// The mandatory catch-all's spec is fixed: a change is refused.
	ca := getPL("catch-all")
	changed := proto.Clone(ca).(*flowcontrolv1.PriorityLevelConfiguration)
	changed.Spec.Limited.NominalConcurrencyShares = proto.Int32(99)
	_, err := plc.UpdatePriorityLevelConfiguration(ctx, &flowcontrolv1.UpdatePriorityLevelConfigurationRequest{Name: "catch-all", PriorityLevelConfiguration: changed})
	se := wantReason(t, err, apierrors.ReasonInvalid)
	if c := se.Causes; len(c) != 1 || c[0].Field != "spec" || c[0].Message == "" {
		t.Errorf("causes = %+v, want one on spec", c)
	}

	// A deleted mandatory object comes back.
	if _, err := fsc.DeleteFlowSchema(ctx, &flowcontrolv1.DeleteFlowSchemaRequest{Name: "catch-all"}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "catch-all FlowSchema restored", func() bool { return getFS("catch-all") != nil })

	// A suggested object whose annotation says false keeps its changed
	// spec; one changed with the annotation still true is put back.
	wh := getPL("workload-high")
	wh.Metadata.Annotations[autoUpdateAnnotation] = "false"
	wh.Spec.Limited.NominalConcurrencyShares = proto.Int32(77)
	if _, err := plc.UpdatePriorityLevelConfiguration(ctx, &flowcontrolv1.UpdatePriorityLevelConfigurationRequest{Name: "workload-high", PriorityLevelConfiguration: wh}); err != nil {
		t.Fatal(err)
	}
	lo := getPL("workload-low")
	lo.Spec.Limited.NominalConcurrencyShares = proto.Int32(66)
	if _, err := plc.UpdatePriorityLevelConfiguration(ctx, &flowcontrolv1.UpdatePriorityLevelConfigurationRequest{Name: "workload-low", PriorityLevelConfiguration: lo}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "workload-low's spec put back", func() bool {
		return getPL("workload-low").GetSpec().GetLimited().GetNominalConcurrencyShares() == 100
	})
	if got := getPL("workload-high").GetSpec().GetLimited().GetNominalConcurrencyShares(); got != 77 {
		t.Errorf("workload-high's shares = %d, want the operator's 77 (autoupdate-spec false)", got)
	}

	// Defaults, and the Dangling condition both ways.
	fs := &flowcontrolv1.FlowSchema{Metadata: &metav1.ObjectMeta{Name: "mine"}, Spec: &flowcontrolv1.FlowSchemaSpec{
		PriorityLevelConfiguration: &flowcontrolv1.PriorityLevelConfigurationReference{Name: "mine"},
		Rules: []*flowcontrolv1.PolicyRulesWithSubjects{{
			Subjects:         []*flowcontrolv1.Subject{{Kind: "User", User: &flowcontrolv1.UserSubject{Name: "alice"}}},
			NonResourceRules: []*flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceUrls: []string{"/healthz"}}},
		}}}}
	cr, err := fsc.CreateFlowSchema(ctx, &flowcontrolv1.CreateFlowSchemaRequest{FlowSchema: fs})
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.GetFlowSchema().GetSpec().GetMatchingPrecedence(); got != 1000 {
		t.Errorf("matchingPrecedence = %d, want the default 1000", got)
	}
	dangling := func(status string) func() bool {
		return func() bool {
			for _, c := range getFS("mine").GetStatus().GetConditions() {
				if c.GetType() == "Dangling" {
					return c.GetStatus() == status
				}
			}
			return false
		}
	}
	testutil.EventuallyWithin(t, 10*time.Second, "Dangling True", dangling("True"))
	pl := &flowcontrolv1.PriorityLevelConfiguration{Metadata: &metav1.ObjectMeta{Name: "mine"}, Spec: &flowcontrolv1.PriorityLevelConfigurationSpec{
		Type: "Limited", Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{LimitResponse: &flowcontrolv1.LimitResponse{
			Type: "Queue", Queuing: &flowcontrolv1.QueuingConfiguration{}}}}}
	pr, err := plc.CreatePriorityLevelConfiguration(ctx, &flowcontrolv1.CreatePriorityLevelConfigurationRequest{PriorityLevelConfiguration: pl})
	if err != nil {
		t.Fatal(err)
	}
	l := pr.GetPriorityLevelConfiguration().GetSpec().GetLimited()
	if l.GetNominalConcurrencyShares() != 30 || l.LendablePercent == nil || l.GetLimitResponse().GetQueuing().GetQueues() != 64 ||
		l.GetLimitResponse().GetQueuing().GetHandSize() != 8 || l.GetLimitResponse().GetQueuing().GetQueueLengthLimit() != 50 {
		t.Errorf("limited = %v, want Kubernetes' defaults 30 shares, 0%% lendable, 64 queues, hand 8, length 50", l)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "Dangling False", dangling("False"))

	// Kubernetes' refusals.
	bad := proto.Clone(fs).(*flowcontrolv1.FlowSchema)
	bad.Metadata.Name = "bad"
	bad.Spec.MatchingPrecedence = 1
	bad.Spec.DistinguisherMethod = &flowcontrolv1.FlowDistinguisherMethod{Type: "ByGroup"}
	bad.Spec.Rules[0].NonResourceRules[0].NonResourceUrls = []string{"healthz/*/x"}
	_, err = fsc.CreateFlowSchema(ctx, &flowcontrolv1.CreateFlowSchemaRequest{FlowSchema: bad})
	se = wantReason(t, err, apierrors.ReasonInvalid)
	want := map[string]string{
		"spec.matchingPrecedence":                              "Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1",
		"spec.distinguisherMethod.type":                        `Unsupported value: flowcontrol.FlowDistinguisherMethod{Type:"ByGroup"}: supported values: "ByNamespace", "ByUser"`,
		"spec.rules[0].nonResourceRules[0].nonResourceURLs[0]": `Invalid value: "healthz/*/x": must start with slash`,
	}
	for _, c := range se.Causes {
		if w, ok := want[c.Field]; ok && w != c.Message {
			t.Errorf("%s: %q, want %q", c.Field, c.Message, w)
		}
		delete(want, c.Field)
	}
	if len(want) > 0 {
		t.Errorf("missing causes %v in %+v", want, se.Causes)
	}
}
