// This file holds the API service's tests of the pods/eviction subresource
// against a real store: an eviction a budget allows (taken from its status
// in the same request), one it refuses (429 with Kubernetes' message and
// cause), two budgets (500), dryRun, preconditions, grace period, pods that
// need no budget and unhealthy pods under AlwaysAllow.
package apiserver

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
)

// evictionEnv is an API service with pods and budgets to evict against.
type evictionEnv struct {
	*env
	pdbs policyv1.PodDisruptionBudgetServiceClient
}

// runningPod creates a pod labelled app=web, bound to node-1 (so its
// deletion is graceful) and Running, Ready as asked.
func (e *evictionEnv) runningPod(t *testing.T, name string, ready bool) *corev1.Pod {
	t.Helper()
	p := testPod("default", name)
	p.Metadata.Labels = map[string]string{"app": "web"}
	p.Spec.NodeName = "node-1"
	p.Spec.TerminationGracePeriodSeconds = proto.Int64(30)
	created := mustCreatePod(t, e.env, p)
	st := "False"
	if ready {
		st = "True"
	}
	created.Status = &corev1.PodStatus{Phase: "Running", Conditions: []*corev1.PodCondition{{Type: "Ready", Status: st}}}
	r, err := e.pods.UpdatePodStatus(admin(t), &corev1.UpdatePodStatusRequest{Namespace: "default", Name: name, Pod: created})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetPod()
}

// budget creates a budget selecting app=web with the status a disruption
// controller would have written.
func (e *evictionEnv) budget(t *testing.T, name string, spec *policyv1.PodDisruptionBudgetSpec, st *policyv1.PodDisruptionBudgetStatus) *policyv1.PodDisruptionBudget {
	t.Helper()
	if spec.Selector == nil {
		spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	}
	cr, err := e.pdbs.CreatePodDisruptionBudget(admin(t), &policyv1.CreatePodDisruptionBudgetRequest{Namespace: "default",
		PodDisruptionBudget: &policyv1.PodDisruptionBudget{Metadata: om("default", name), Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	pdb := cr.GetPodDisruptionBudget()
	pdb.Status = st
	sr, err := e.pdbs.UpdatePodDisruptionBudgetStatus(admin(t), &policyv1.UpdatePodDisruptionBudgetStatusRequest{Namespace: "default", Name: name, PodDisruptionBudget: pdb})
	if err != nil {
		t.Fatal(err)
	}
	return sr.GetPodDisruptionBudget()
}

func (e *evictionEnv) getBudget(t *testing.T, name string) *policyv1.PodDisruptionBudget {
	t.Helper()
	r, err := e.pdbs.GetPodDisruptionBudget(admin(t), &policyv1.GetPodDisruptionBudgetRequest{Namespace: "default", Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetPodDisruptionBudget()
}

// resetBudget writes st as the budget's status.
func (e *evictionEnv) resetBudget(t *testing.T, name string, st *policyv1.PodDisruptionBudgetStatus) {
	t.Helper()
	pdb := e.getBudget(t, name)
	pdb.Status = st
	if _, err := e.pdbs.UpdatePodDisruptionBudgetStatus(admin(t), &policyv1.UpdatePodDisruptionBudgetStatusRequest{Namespace: "default", Name: name, PodDisruptionBudget: pdb}); err != nil {
		t.Fatal(err)
	}
}

func (e *evictionEnv) getPod(t *testing.T, name string) (*corev1.Pod, error) {
	t.Helper()
	r, err := e.pods.GetPod(admin(t), &corev1.GetPodRequest{Namespace: "default", Name: name})
	return r.GetPod(), err
}

func (e *evictionEnv) evict(t *testing.T, name string, do *metav1.DeleteOptions, dryRun ...string) (*metav1.Status, error) {
	t.Helper()
	r, err := e.pods.EvictPod(admin(t), &corev1.EvictPodRequest{Namespace: "default", Name: name, DryRun: dryRun,
		Eviction: &policyv1.Eviction{ApiVersion: "policy/v1", Kind: "Eviction", Metadata: om("default", name), DeleteOptions: do}})
	return r.GetStatus(), err
}

func newEvictionEnv(t *testing.T) *evictionEnv {
	e := newEnv(t, nil)
	return &evictionEnv{env: e, pdbs: policyv1.NewPodDisruptionBudgetServiceClient(e.conn)}
}

func healthy(allowed, current, desired int32) *policyv1.PodDisruptionBudgetStatus {
	return &policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: allowed,
		CurrentHealthy: current, DesiredHealthy: desired, ExpectedPods: current}
}

func TestEvictionAllowedThenBlocked(t *testing.T) {
	e := newEvictionEnv(t)
	e.runningPod(t, "a", true)
	e.runningPod(t, "b", true)
	e.runningPod(t, "c", true)
	e.budget(t, "web", &policyv1.PodDisruptionBudgetSpec{MinAvailable: intVal(2)}, healthy(1, 3, 2))

	st, err := e.evict(t, "a", &metav1.DeleteOptions{GracePeriodSeconds: proto.Int64(5)})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStatus() != "Success" || st.GetCode() != 201 {
		t.Errorf("eviction: got %v, want Success 201", st)
	}
	// The budget's status took the disruption in the same request.
	pdb := e.getBudget(t, "web")
	if pdb.GetStatus().GetDisruptionsAllowed() != 0 || pdb.GetStatus().GetDisruptedPods()["a"] == nil {
		t.Errorf("budget after eviction: got %v, want disruptionsAllowed 0 and a in disruptedPods", pdb.GetStatus())
	}
	if cs := pdb.GetStatus().GetConditions(); len(cs) != 1 || cs[0].GetType() != "DisruptionAllowed" || cs[0].GetStatus() != "False" || cs[0].GetReason() != "InsufficientPods" {
		t.Errorf("budget condition: got %v, want DisruptionAllowed False InsufficientPods", cs)
	}
	// The pod is marked DisruptionTarget and deleted with the Eviction's
	// grace period.
	a, err := e.getPod(t, "a")
	if err != nil {
		t.Fatal(err)
	}
	if a.GetMetadata().GetDeletionTimestamp() == nil || a.GetMetadata().GetDeletionGracePeriodSeconds() != 5 {
		t.Errorf("evicted pod: got deletionTimestamp %v grace %d, want set and 5", a.GetMetadata().GetDeletionTimestamp(), a.GetMetadata().GetDeletionGracePeriodSeconds())
	}
	var target *corev1.PodCondition
	for _, c := range a.GetStatus().GetConditions() {
		if c.GetType() == "DisruptionTarget" {
			target = c
		}
	}
	if target.GetStatus() != "True" || target.GetReason() != "EvictionByEvictionAPI" || target.GetMessage() != "Eviction API: evicting" {
		t.Errorf("DisruptionTarget: got %v, want True EvictionByEvictionAPI", target)
	}

	// The next one would break the budget: 429 with Kubernetes' message
	// and the DisruptionBudget cause.
	_, err = e.evict(t, "b", nil)
	se := wantReason(t, err, apierrors.ReasonTooManyRequests)
	if se.Message != "Cannot evict pod as it would violate the pod's disruption budget." {
		t.Errorf("message: got %q", se.Message)
	}
	want := []apierrors.Cause{{Type: "DisruptionBudget", Message: "The disruption budget web needs 2 healthy pods and has 3 currently"}}
	if len(se.Causes) != 1 || se.Causes[0] != want[0] {
		t.Errorf("causes: got %v, want %v", se.Causes, want)
	}
	if b, err := e.getPod(t, "b"); err != nil || b.GetMetadata().GetDeletionTimestamp() != nil {
		t.Errorf("pod b after a refused eviction: got %v, %v; want it untouched", b.GetMetadata(), err)
	}
}

func TestEvictionTwoBudgets(t *testing.T) {
	e := newEvictionEnv(t)
	e.runningPod(t, "a", true)
	e.budget(t, "one", &policyv1.PodDisruptionBudgetSpec{MaxUnavailable: intVal(1)}, healthy(1, 1, 0))
	e.budget(t, "two", &policyv1.PodDisruptionBudgetSpec{MaxUnavailable: intVal(1)}, healthy(1, 1, 0))
	_, err := e.evict(t, "a", nil)
	se := apierrors.FromError(err)
	if se == nil || se.Code != 500 || se.Message != "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support." {
		t.Fatalf("got %v, want 500 with Kubernetes' message", err)
	}
}

func TestEvictionDryRunAndPreconditions(t *testing.T) {
	e := newEvictionEnv(t)
	a := e.runningPod(t, "a", true)
	e.budget(t, "web", &policyv1.PodDisruptionBudgetSpec{MaxUnavailable: intVal(1)}, healthy(1, 1, 0))

	// dryRun (on the request, or in the Eviction's deleteOptions): the
	// answer of a real eviction, nothing written.
	for _, tc := range []struct {
		name   string
		do     *metav1.DeleteOptions
		dryRun []string
	}{
		{name: "request", dryRun: []string{"All"}},
		{name: "deleteOptions", do: &metav1.DeleteOptions{DryRun: []string{"All"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.evict(t, "a", tc.do, tc.dryRun...); err != nil {
				t.Fatal(err)
			}
			if p, err := e.getPod(t, "a"); err != nil || p.GetMetadata().GetDeletionTimestamp() != nil || len(p.GetStatus().GetConditions()) != 1 {
				t.Errorf("pod after a dry run: got %v, %v; want it untouched", p, err)
			}
			if st := e.getBudget(t, "web").GetStatus(); st.GetDisruptionsAllowed() != 1 || len(st.GetDisruptedPods()) != 0 {
				t.Errorf("budget after a dry run: got %v, want it untouched", st)
			}
		})
	}
	_, err := e.evict(t, "a", &metav1.DeleteOptions{DryRun: []string{"All"}}, "Other")
	if se := apierrors.FromError(err); se == nil || se.Code != 500 {
		t.Errorf("non-matching dry runs: got %v, want 500", err)
	}

	// Preconditions: a wrong uid or resourceVersion is a Conflict.
	_, err = e.evict(t, "a", &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{Uid: proto.String("other")}})
	se := wantReason(t, err, apierrors.ReasonConflict)
	if want := `Operation cannot be fulfilled on Pod "a": the UID in the precondition (other) does not match the UID in record (` + a.GetMetadata().GetUid() + `). The object might have been deleted and then recreated`; se.Message != want {
		t.Errorf("uid precondition: got %q, want %q", se.Message, want)
	}
	// As in Kubernetes, the budget was charged before the pod's
	// preconditions were checked (the disruption controller gives it back
	// once the entry expires); give it back for the next one.
	if st := e.getBudget(t, "web").GetStatus(); st.GetDisruptedPods()["a"] == nil {
		t.Errorf("budget after a refused precondition: got %v, want a recorded in disruptedPods", st)
	}
	e.resetBudget(t, "web", healthy(1, 1, 0))
	_, err = e.evict(t, "a", &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: proto.String("1")}})
	wantReason(t, err, apierrors.ReasonConflict)
	e.resetBudget(t, "web", healthy(1, 1, 0))

	cur, _ := e.getPod(t, "a")
	if _, err := e.evict(t, "a", &metav1.DeleteOptions{GracePeriodSeconds: proto.Int64(0),
		Preconditions: &metav1.Preconditions{Uid: proto.String(a.GetMetadata().GetUid()), ResourceVersion: proto.String(cur.GetMetadata().GetResourceVersion())}}); err != nil {
		t.Fatalf("eviction with matching preconditions: %v", err)
	}
	if _, err := e.getPod(t, "a"); !apierrors.IsNotFound(err) {
		t.Errorf("pod after an eviction with grace period 0: got %v, want NotFound", err)
	}
}

func TestEvictionWithoutBudgetCheck(t *testing.T) {
	e := newEvictionEnv(t)
	e.budget(t, "web", &policyv1.PodDisruptionBudgetSpec{MinAvailable: intVal(5)}, healthy(0, 1, 5))

	// A Pending pod disrupts nothing: evicted whatever the budget says.
	mustCreatePod(t, e.env, &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "pending", Labels: map[string]string{"app": "web"}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1.27"}}}})
	if _, err := e.evict(t, "pending", nil); err != nil {
		t.Fatalf("pending pod: %v", err)
	}
	// A running but unready pod under IfHealthyBudget, with the budget
	// not met: refused.
	e.runningPod(t, "unready", false)
	_, err := e.evict(t, "unready", nil)
	wantReason(t, err, apierrors.ReasonTooManyRequests)
	// Under AlwaysAllow: evicted, and the budget is not charged.
	pdb := e.getBudget(t, "web")
	pdb.Spec.UnhealthyPodEvictionPolicy = proto.String("AlwaysAllow")
	ur, err := e.pdbs.UpdatePodDisruptionBudget(admin(t), &policyv1.UpdatePodDisruptionBudgetRequest{Namespace: "default", Name: "web", PodDisruptionBudget: pdb})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.evict(t, "unready", nil); err != nil {
		t.Fatalf("unready pod under AlwaysAllow: %v", err)
	}
	if got := e.getBudget(t, "web"); got.GetMetadata().GetResourceVersion() != ur.GetPodDisruptionBudget().GetMetadata().GetResourceVersion() {
		t.Errorf("budget changed by an unready pod's eviction: %v", got.GetStatus())
	}
	// A healthy pod while the budget's status is behind its spec
	// (generation 2, observed 1): 429, still being processed.
	e.runningPod(t, "ready", true)
	_, err = e.evict(t, "ready", nil)
	se := wantReason(t, err, apierrors.ReasonTooManyRequests)
	if len(se.Causes) != 1 || se.Causes[0].Message != "The disruption budget web is still being processed by the server." || se.RetryAfterSeconds != 10 {
		t.Errorf("got causes %v retry after %d, want still being processed, 10", se.Causes, se.RetryAfterSeconds)
	}
	// No such pod.
	_, err = e.evict(t, "missing", nil)
	wantReason(t, err, apierrors.ReasonNotFound)
	// An Eviction for another namespace than the URL's.
	_, err = e.pods.EvictPod(admin(t), &corev1.EvictPodRequest{Namespace: "default", Name: "ready",
		Eviction: &policyv1.Eviction{ApiVersion: "policy/v1", Kind: "Eviction", Metadata: om("other", "ready")}})
	if se := wantReason(t, err, apierrors.ReasonBadRequest); se.Message != "the namespace of the provided object does not match the namespace sent on the request" {
		t.Errorf("namespace mismatch: got %q", se.Message)
	}
}
