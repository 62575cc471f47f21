// This file holds the disruption controller's tests on a real in-process
// API service: a budget's status from a Deployment's scale (maxUnavailable
// and a percentage minAvailable), an eviction taken from it and given back
// once the ReplicaSet has replaced the pod, disruptedPods entries kept while
// fresh and dropped once older than two minutes, pods without a controller
// and controllers kplane does not know (the fail-safe); a DisruptionTarget
// condition older than two minutes on a pod not being deleted set back to
// False.
package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

func pdbFor(ns, name, app string, minAvailable, maxUnavailable *metav1.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: &policyv1.PodDisruptionBudgetSpec{MinAvailable: minAvailable, MaxUnavailable: maxUnavailable,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
}

func intOr(v int32) *metav1.IntOrString {
	return &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: v}}
}
func pctOr(v string) *metav1.IntOrString {
	return &metav1.IntOrString{Value: &metav1.IntOrString_StrVal{StrVal: v}}
}

// budgetIs waits until the budget's status has these counts, is observed
// at its generation, and carries the matching DisruptionAllowed condition.
func budgetIs(t *testing.T, c *cluster, pdbs *client.Client[*policyv1.PodDisruptionBudget], ns, name string, expected, healthy, desired, allowed int32) *policyv1.PodDisruptionBudget {
	t.Helper()
	var got *policyv1.PodDisruptionBudget
	testutil.EventuallyWithin(t, waitLimit, fmt.Sprintf("budget %s: expected %d healthy %d desired %d allowed %d", name, expected, healthy, desired, allowed), func() (bool, string) {
		p, err := pdbs.Get(c.ctx, ns, name)
		if err != nil {
			return false, err.Error()
		}
		got = p
		st := p.GetStatus()
		want := "InsufficientPods"
		if allowed > 0 {
			want = "SufficientPods"
		}
		cond := false
		for _, x := range st.GetConditions() {
			cond = cond || (x.GetType() == "DisruptionAllowed" && x.GetReason() == want && x.GetStatus() == map[bool]string{true: "True", false: "False"}[allowed > 0])
		}
		return st.GetExpectedPods() == expected && st.GetCurrentHealthy() == healthy && st.GetDesiredHealthy() == desired &&
			st.GetDisruptionsAllowed() == allowed && st.GetObservedGeneration() == p.GetMetadata().GetGeneration() && cond, fmt.Sprint(st)
	})
	return got
}

func TestDisruptionBudgetStatusAndEviction(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.Controllers = []string{controllers.Deployment, controllers.ReplicaSet, controllers.Disruption}
	})
	pdbs := client.Must[*policyv1.PodDisruptionBudget](c.conn)
	const ns = "default"
	if _, err := c.ds.Create(c.ctx, newDeployment(ns, "web", 3, "nginx:1.27")); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "web rolled out", func() (bool, string) { return c.rolledOut(t, ns, "web", 3) })

	// maxUnavailable 1 of the Deployment's 3: 2 must stay healthy.
	if _, err := pdbs.Create(c.ctx, pdbFor(ns, "web", "web", nil, intOr(1))); err != nil {
		t.Fatal(err)
	}
	budgetIs(t, c, pdbs, ns, "web", 3, 3, 2, 1)

	// An eviction takes the one disruption allowed; the next is refused.
	pods := c.podsOf(t, ns, "web")
	victim := pods[0].GetMetadata().GetName()
	if err := c.pods.Evict(c.ctx, ns, victim, nil); err != nil {
		t.Fatalf("evict %s: %v", victim, err)
	}
	err := c.pods.Evict(c.ctx, ns, pods[1].GetMetadata().GetName(), nil)
	if apierrors.ReasonOf(err) != apierrors.ReasonTooManyRequests {
		t.Fatalf("second eviction: got %v, want TooManyRequests", err)
	}
	// The ReplicaSet replaces the pod; once it is ready the budget allows
	// one again, and the evicted pod, gone, is no longer in disruptedPods.
	p := budgetIs(t, c, pdbs, ns, "web", 3, 3, 2, 1)
	if len(p.GetStatus().GetDisruptedPods()) != 0 {
		t.Errorf("disruptedPods after the pod went: %v", p.GetStatus().GetDisruptedPods())
	}

	// A percentage minAvailable is scaled against the controllers' scale,
	// rounding up: 50% of 3 is 2.
	p.Spec.MaxUnavailable = nil
	p.Spec.MinAvailable = pctOr("50%")
	if _, err := pdbs.Update(c.ctx, p); err != nil {
		t.Fatal(err)
	}
	budgetIs(t, c, pdbs, ns, "web", 3, 3, 2, 1)
	// Scaled to 5: 50% is 3. (The deployment controller writes the
	// Deployment's status meanwhile: a Conflict is read again.)
	for attempt := 0; ; attempt++ {
		d, err := c.ds.Get(c.ctx, ns, "web")
		if err != nil {
			t.Fatal(err)
		}
		d.Spec.Replicas = proto.Int32(5)
		_, err = c.ds.Update(c.ctx, d)
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt == 10 {
			t.Fatal(err)
		}
	}
	budgetIs(t, c, pdbs, ns, "web", 5, 5, 3, 2)

	// disruptedPods: a fresh entry keeps its pod out of the healthy count;
	// one older than two minutes is dropped.
	pods = c.podsOf(t, ns, "web")
	fresh, stale := pods[0].GetMetadata().GetName(), pods[1].GetMetadata().GetName()
	p, err = pdbs.Get(c.ctx, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	p.Status.DisruptedPods = map[string]*timestamppb.Timestamp{
		fresh: timestamppb.New(time.Now().Truncate(time.Second)),
		stale: timestamppb.New(time.Now().Add(-3 * time.Minute).Truncate(time.Second)),
	}
	if _, err := pdbs.UpdateStatus(c.ctx, p); err != nil {
		t.Fatal(err)
	}
	p = budgetIs(t, c, pdbs, ns, "web", 5, 4, 3, 1)
	if dp := p.GetStatus().GetDisruptedPods(); len(dp) != 1 || dp[fresh] == nil {
		t.Errorf("disruptedPods: got %v, want only %s", dp, fresh)
	}
}

func TestDisruptionBudgetWithoutControllers(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.Controllers = []string{controllers.Disruption}
	})
	pdbs := client.Must[*policyv1.PodDisruptionBudget](c.conn)
	const ns = "default"
	bare := func(name, app string, owner *metav1.OwnerReference) {
		p := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1.27"}}}}
		if owner != nil {
			p.Metadata.OwnerReferences = []*metav1.OwnerReference{owner}
		}
		if _, err := c.pods.Create(c.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	bare("solo-1", "solo", nil)
	bare("solo-2", "solo", nil)
	// An integer minAvailable counts the pods there are.
	if _, err := pdbs.Create(c.ctx, pdbFor(ns, "solo-min", "solo", intOr(1), nil)); err != nil {
		t.Fatal(err)
	}
	budgetIs(t, c, pdbs, ns, "solo-min", 2, 2, 1, 1)
	// maxUnavailable needs the controllers' scale: unmanaged pods expect
	// none, and so allow nothing.
	if _, err := pdbs.Create(c.ctx, pdbFor(ns, "solo-max", "solo", nil, intOr(1))); err != nil {
		t.Fatal(err)
	}
	budgetIs(t, c, pdbs, ns, "solo-max", 0, 2, 0, 0)
	// Both select a new solo pod: Kubernetes' Warning on it.
	bare("solo-3", "solo", nil)
	events := client.Must[*corev1.Event](c.conn)
	testutil.EventuallyWithin(t, waitLimit, "MultiplePodDisruptionBudgets event", func() (bool, string) {
		l, _, err := events.List(c.ctx, ns, client.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range l {
			seen = append(seen, ev.GetReason())
			if ev.GetReason() == "MultiplePodDisruptionBudgets" && ev.GetType() == "Warning" && ev.GetInvolvedObject().GetKind() == "Pod" &&
				strings.HasPrefix(ev.GetMessage(), `Pod "default"/"solo-3" matches multiple PodDisruptionBudgets.  Chose "solo-`) {
				return true, ""
			}
		}
		return false, fmt.Sprint(seen)
	})

	// A pod whose controller is read through the scale subresource (here
	// a Deployment owning pods directly, as no finder of its own covers):
	// the expected pods are its spec.replicas.
	d, err := c.ds.Create(c.ctx, newDeployment(ns, "direct", 4, "nginx:1.27"))
	if err != nil {
		t.Fatal(err)
	}
	bare("direct-1", "direct", &metav1.OwnerReference{ApiVersion: "apps/v1", Kind: "Deployment", Name: "direct",
		Uid: d.GetMetadata().GetUid(), Controller: proto.Bool(true)})
	if _, err := pdbs.Create(c.ctx, pdbFor(ns, "direct", "direct", nil, pctOr("50%"))); err != nil {
		t.Fatal(err)
	}
	budgetIs(t, c, pdbs, ns, "direct", 4, 1, 2, 0)

	// A controller of a kind kplane does not serve: the fail-safe.
	bare("odd-1", "odd", &metav1.OwnerReference{ApiVersion: "example.com/v1", Kind: "Widget", Name: "w", Uid: "u1", Controller: proto.Bool(true)})
	if _, err := pdbs.Create(c.ctx, pdbFor(ns, "odd", "odd", pctOr("50%"), nil)); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "fail-safe condition", func() (bool, string) {
		p, err := pdbs.Get(c.ctx, ns, "odd")
		if err != nil {
			return false, err.Error()
		}
		for _, x := range p.GetStatus().GetConditions() {
			if x.GetType() == "DisruptionAllowed" && x.GetStatus() == "False" && x.GetReason() == "SyncFailed" &&
				x.GetMessage() == `no matches for kind "Widget" in version "example.com/v1"` {
				return p.GetStatus().GetDisruptionsAllowed() == 0, ""
			}
		}
		return false, fmt.Sprint(p.GetStatus())
	})
}

func TestStaleDisruptionTargetReset(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.Controllers = []string{controllers.Disruption}
	})
	const ns = "default"
	if _, err := c.pods.Create(c.ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "marked"},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1.27"}}}}); err != nil {
		t.Fatal(err)
	}
	var p *corev1.Pod
	testutil.EventuallyWithin(t, waitLimit, "the pod running", func() (bool, string) {
		var err error
		p, err = c.pods.Get(c.ctx, ns, "marked")
		return err == nil && p.GetStatus().GetPhase() == "Running", fmt.Sprint(p.GetStatus(), err)
	})
	// Marked by an eviction three minutes ago, and still not deleted.
	p.Status.Conditions = append(p.Status.Conditions, &corev1.PodCondition{Type: "DisruptionTarget", Status: "True",
		Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting", LastTransitionTime: timestamppb.New(time.Now().Add(-3 * time.Minute).Truncate(time.Second))})
	if _, err := c.pods.UpdateStatus(c.ctx, p); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "the stale DisruptionTarget condition False", func() (bool, string) {
		p, err := c.pods.Get(c.ctx, ns, "marked")
		if err != nil {
			return false, err.Error()
		}
		for _, x := range p.GetStatus().GetConditions() {
			if x.GetType() == "DisruptionTarget" {
				return x.GetStatus() == "False" && x.GetReason() == "", fmt.Sprint(x)
			}
		}
		return false, "no DisruptionTarget condition"
	})
}
