// This file holds the scheduler's test of inter-pod affinity and topology
// spread against a real API service: placements, Kubernetes' messages in
// the PodScheduled condition and the FailedScheduling event, and a pod
// waiting for its affinity bound once a matching pod is placed.

package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/testutil"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler"
	"github.com/kplane/kplane/services/scheduler/queue"
)

const (
	hostnameLabel = "kubernetes.io/hostname"
	zoneLabel     = "topology.kubernetes.io/zone"
)

// labelled is pod name labelled lbl, changed by mut.
func labelled(name string, lbl map[string]string, mut func(*corev1.PodSpec)) *corev1.Pod {
	p := pod(name, "100m", mut)
	p.Metadata.Labels = lbl
	return p
}

func selects(key string, lbl map[string]string) *corev1.PodAffinityTerm {
	return &corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: lbl}}
}

// unschedulableMessage waits for name's PodScheduled=False condition and
// its FailedScheduling event and returns their messages.
func unschedulableMessage(t *testing.T, ctx context.Context, pods *client.Client[*corev1.Pod], events *client.Client[*corev1.Event], name string) (cond, event string) {
	t.Helper()
	testutil.EventuallyWithin(t, time.Minute, name+" PodScheduled=False", func() bool {
		p, err := pods.Get(ctx, "default", name)
		if err != nil {
			return false
		}
		for _, c := range p.GetStatus().GetConditions() {
			if c.GetType() == "PodScheduled" && c.GetStatus() == "False" && c.GetReason() == "Unschedulable" {
				cond = c.GetMessage()
				return true
			}
		}
		return false
	})
	testutil.EventuallyWithin(t, time.Minute, name+" FailedScheduling event", func() bool {
		items, _, err := events.List(ctx, "default", client.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false
		}
		for _, e := range items {
			if e.GetReason() == "FailedScheduling" && e.GetType() == "Warning" {
				event = e.GetMessage()
				return true
			}
		}
		return false
	})
	return cond, event
}

func boundNode(t *testing.T, ctx context.Context, pods *client.Client[*corev1.Pod], name string) string {
	t.Helper()
	var got string
	testutil.EventuallyWithin(t, time.Minute, name+" bound", func() bool {
		p, err := pods.Get(ctx, "default", name)
		got = p.GetSpec().GetNodeName()
		return err == nil && got != ""
	})
	return got
}

// TestInterPodAffinityAndSpread: three nodes in two zones. Replicas with
// anti-affinity by hostname take one node each and a fourth cannot be
// placed; a pod they repel cannot either; a pod that wants a zone with a
// cache waits until a cache pod is placed, then joins its zone; pods
// spread over zones with maxSkew 1 end up two per zone.
func TestInterPodAffinityAndSpread(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	admin := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := client.Must[*corev1.Node](admin)
	pods := client.Must[*corev1.Pod](admin)
	events := client.Must[*corev1.Event](admin)
	zoneOf := map[string]string{"a1": "a", "a2": "a", "b1": "b"}
	for name, zone := range zoneOf {
		createNode(t, ctx, nodes, nodeSpec{name: name, cpu: "4", mem: "8Gi", labels: map[string]string{hostnameLabel: name, zoneLabel: zone}})
	}
	startScheduler(t, scheduler.Config{Conn: env.Dial(t, apiservertest.SchedulerToken), Logger: testLogger(t),
		Queue: queue.Config{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}})

	web := map[string]string{"app": "web"}
	oneWebPerNode := func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{selects(hostnameLabel, web)}}}
	}
	t.Run("anti-affinity by hostname: one replica per node", func(t *testing.T) {
		for i := range 3 {
			if _, err := pods.Create(ctx, labelled(fmt.Sprintf("web-%d", i), web, oneWebPerNode)); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]string{}
		for i := range 3 {
			name := fmt.Sprintf("web-%d", i)
			n := boundNode(t, ctx, pods, name)
			if other, ok := seen[n]; ok {
				t.Errorf("%s and %s both on %s", name, other, n)
			}
			seen[n] = name
		}
	})

	cases := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{name: "a fourth replica fits no node", pod: labelled("web-3", web, oneWebPerNode),
			want: "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."},
		{name: "the replicas' anti-affinity repels a pod they select", pod: labelled("web-plain", web, nil),
			want: "0/3 nodes are available: 3 node(s) didn't satisfy existing pods anti-affinity rules."},
		{name: "affinity with no matching pod anywhere", pod: labelled("follower", nil, func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{selects(zoneLabel, map[string]string{"app": "cache"})}}}
		}), want: "0/3 nodes are available: 3 node(s) didn't match pod affinity rules."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := pods.Create(ctx, tc.pod); err != nil {
				t.Fatal(err)
			}
			cond, event := unschedulableMessage(t, ctx, pods, events, tc.pod.Metadata.Name)
			if cond != tc.want || event != tc.want {
				t.Errorf("got condition %q and event %q, want %q", cond, event, tc.want)
			}
		})
	}

	t.Run("a waiting pod follows its affinity once a match is placed", func(t *testing.T) {
		if _, err := pods.Create(ctx, labelled("cache", map[string]string{"app": "cache"}, func(s *corev1.PodSpec) {
			s.NodeSelector = map[string]string{hostnameLabel: "b1"}
		})); err != nil {
			t.Fatal(err)
		}
		if got := boundNode(t, ctx, pods, "cache"); got != "b1" {
			t.Fatalf("cache: got node %q, want b1", got)
		}
		if got := boundNode(t, ctx, pods, "follower"); zoneOf[got] != "b" {
			t.Errorf("follower: got node %q (zone %q), want zone b", got, zoneOf[got])
		}
	})

	t.Run("topology spread by zone with maxSkew 1", func(t *testing.T) {
		sp := map[string]string{"app": "spread"}
		for i := range 4 {
			if _, err := pods.Create(ctx, labelled(fmt.Sprintf("spread-%d", i), sp, func(s *corev1.PodSpec) {
				s.TopologySpreadConstraints = []*corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zoneLabel,
					WhenUnsatisfiable: "DoNotSchedule", LabelSelector: &metav1.LabelSelector{MatchLabels: sp}}}
			})); err != nil {
				t.Fatal(err)
			}
		}
		perZone := map[string]int{}
		for i := range 4 {
			perZone[zoneOf[boundNode(t, ctx, pods, fmt.Sprintf("spread-%d", i))]]++
		}
		if perZone["a"] != 2 || perZone["b"] != 2 {
			t.Errorf("pods per zone: got %v, want 2 in a and 2 in b", perZone)
		}
	})
}
