// Package defaultpreemption is the PostFilter plugin that makes room for a
// pod no node can take by evicting pods of lower priority, as
// kube-scheduler's DefaultPreemption does: on every node that rejected the
// pod for a reason preemption can fix, it removes all pods of lower
// priority, checks that the pod then passes the filters, and gives back as
// many of those victims as still leave room, most important first. Of the
// nodes where that works it picks the one whose victims matter least (the
// lowest highest victim priority, then the lowest sum of priorities, then
// the fewest victims), writes the pod's status.nominatedNodeName, and
// deletes the victims gracefully, each first marked with the
// DisruptionTarget condition (reason PreemptionByScheduler) and given a
// Preempted event. The pod
// itself is scheduled again once the victims are gone (pod deletions
// requeue unschedulable pods).
//
// The room made is held: until the pod is placed, the filters of pods of
// no higher priority count it on its nominated node (the scheduler's
// nominator). Inter-pod anti-affinity and topology spread take part as
// in Kubernetes: a node the pod's anti-affinity, a placed pod's
// anti-affinity or a spread constraint's skew rejected is a candidate (a
// failed required affinity or a missing topology label is not: evicting
// cannot fix those), and the filters judge the node copy without the
// victims by its own pods. As in Kubernetes, victims are only ever taken
// from the one node, never elsewhere in a zone the rule spans. Not done,
// unlike Kubernetes: PodDisruptionBudgets are not consulted.
package defaultpreemption

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "DefaultPreemption"

// Plugin is the preemption plugin.
type Plugin struct {
	h    framework.Handle
	pods *client.Client[*corev1.Pod]
	rec  *client.Recorder
	now  func() time.Time
}

var _ framework.PostFilterPlugin = (*Plugin)(nil)

// New is the plugin's factory; it needs the Handle's ClientConn.
func New(_ []byte, h framework.Handle) (framework.Plugin, error) {
	conn := h.ClientConn()
	if conn == nil {
		return nil, errors.New("defaultpreemption: no connection to the API service")
	}
	return &Plugin{h: h, pods: client.Must[*corev1.Pod](conn), rec: h.EventRecorder(), now: time.Now}, nil
}

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Candidate is a node where evicting Victims lets the pod fit.
type Candidate struct {
	Node    string
	Victims []*framework.PodInfo
}

// PostFilter implements framework.PostFilterPlugin.
func (p *Plugin) PostFilter(ctx context.Context, state *framework.CycleState, pod *framework.PodInfo, statuses framework.NodeToStatus) (string, *framework.Status) {
	if msg := p.ineligible(pod); msg != "" {
		return "", framework.NewStatus(framework.UnschedulableAndUnresolvable, msg)
	}
	cands, err := FindCandidates(ctx, p.h, state, pod, statuses)
	if err != nil {
		return "", framework.AsStatus(err)
	}
	best := PickCandidate(cands)
	if best == nil {
		// As Kubernetes: a nomination that no longer leads anywhere is
		// cleared, so it stops holding room on its node.
		if err := p.nominate(ctx, pod, ""); err != nil {
			return "", framework.AsStatus(err)
		}
		return "", framework.NewStatus(framework.Unschedulable, "preemption: no node where evicting lower-priority pods makes room")
	}
	if err := p.prepare(ctx, pod, best); err != nil {
		return "", framework.AsStatus(err)
	}
	return best.Node, nil
}

// ineligible says why pod may not preempt now ("" if it may): its policy
// says Never, or it already nominated a node where lower-priority pods are
// still terminating (the room it made is on its way).
func (p *Plugin) ineligible(pod *framework.PodInfo) string {
	if pod.Pod.GetSpec().GetPreemptionPolicy() == "Never" {
		return "not eligible for preemption: preemptionPolicy is Never"
	}
	nom := pod.Pod.GetStatus().GetNominatedNodeName()
	if nom == "" {
		return ""
	}
	if ni, ok := p.h.Snapshot().Get(nom); ok {
		for _, v := range ni.Pods {
			if v.Pod.GetMetadata().GetDeletionTimestamp() != nil && v.Priority < pod.Priority {
				return "not eligible for preemption: victims on the nominated node " + nom + " are still terminating"
			}
		}
	}
	return ""
}

// FindCandidates returns, for each node that rejected pod for a reason
// preemption could fix, the smallest set of lower-priority victims (by
// Kubernetes' reprieve order) whose eviction lets pod pass the filters.
func FindCandidates(ctx context.Context, h framework.Handle, state *framework.CycleState, pod *framework.PodInfo, statuses framework.NodeToStatus) ([]Candidate, error) {
	var out []Candidate
	names := make([]string, 0, len(statuses))
	for name, st := range statuses {
		if st.Code() == framework.Unschedulable {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ni, ok := h.Snapshot().Get(name)
		if !ok {
			continue
		}
		if v, ok := victimsOn(ctx, h, state, pod, ni); ok {
			out = append(out, Candidate{Node: name, Victims: v})
		}
	}
	return out, nil
}

// victimsOn works on a copy of ni: without every lower-priority pod, does
// pod fit? Then the victims are given back, most important first, while
// pod still fits; those that cannot be are the victims.
func victimsOn(ctx context.Context, h framework.Handle, state *framework.CycleState, pod *framework.PodInfo, ni *framework.NodeInfo) ([]*framework.PodInfo, bool) {
	var lower []*framework.PodInfo
	for _, v := range ni.Pods {
		if v.Priority < pod.Priority {
			lower = append(lower, v)
		}
	}
	if len(lower) == 0 {
		return nil, false // the common case; no copy made
	}
	n := ni.Clone()
	for _, v := range lower {
		n.RemovePod(v.Key)
	}
	if !h.RunFilterPlugins(ctx, state, pod, n).IsSuccess() {
		return nil, false
	}
	sort.Slice(lower, func(i, j int) bool { return moreImportant(lower[i], lower[j]) })
	var victims []*framework.PodInfo
	for _, v := range lower {
		n.AddPod(v)
		if !h.RunFilterPlugins(ctx, state, pod, n).IsSuccess() {
			n.RemovePod(v.Key)
			victims = append(victims, v)
		}
	}
	return victims, len(victims) > 0
}

// moreImportant: higher priority, then started earlier, then by key.
func moreImportant(a, b *framework.PodInfo) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	ta, tb := a.Pod.GetStatus().GetStartTime().AsTime(), b.Pod.GetStatus().GetStartTime().AsTime()
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.Key < b.Key
}

// PickCandidate chooses the node whose victims matter least: the lowest
// highest victim priority, then the lowest sum of victim priorities, then
// the fewest victims, then the node name. nil if there is none.
func PickCandidate(cands []Candidate) *Candidate {
	var best *Candidate
	var bestKey [3]int64
	for i := range cands {
		c := &cands[i]
		highest, sum := int64(-1<<31), int64(0)
		for _, v := range c.Victims {
			highest = max(highest, int64(v.Priority))
			sum += int64(v.Priority)
		}
		key := [3]int64{highest, sum, int64(len(c.Victims))}
		if best == nil || less(key, bestKey) || (key == bestKey && c.Node < best.Node) {
			best, bestKey = c, key
		}
	}
	return best
}

func less(a, b [3]int64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// prepare nominates the node for pod and deletes the victims gracefully.
func (p *Plugin) prepare(ctx context.Context, pod *framework.PodInfo, c *Candidate) error {
	for _, v := range c.Victims {
		m := v.Pod.GetMetadata()
		if err := p.markDisruptionTarget(ctx, pod, v.Pod); err != nil {
			return fmt.Errorf("preempting %s on %s: %w", v.Key, c.Node, err)
		}
		err := p.pods.Delete(ctx, m.GetNamespace(), m.GetName(), client.DeleteOptions{UID: m.GetUid()})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("preempting %s on %s: %w", v.Key, c.Node, err)
		}
		if p.rec != nil {
			p.rec.Eventf(v.Pod, client.EventNormal, "Preempted", "Preempted by pod %s on node %s", pod.UID, c.Node)
		}
	}
	return p.nominate(ctx, pod, c.Node)
}

// nominate writes node as pod's status.nominatedNodeName ("" clears it);
// nothing is written when it is already so.
func (p *Plugin) nominate(ctx context.Context, pod *framework.PodInfo, node string) error {
	if node == "" && pod.Pod.GetStatus().GetNominatedNodeName() == "" {
		return nil // the common case: nothing to clear, no read
	}
	cur, err := p.pods.Get(ctx, pod.Pod.GetMetadata().GetNamespace(), pod.Pod.GetMetadata().GetName())
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nominating %q for %s: %w", node, pod.Key, err)
	}
	if cur.GetMetadata().GetUid() != pod.UID || cur.GetStatus().GetNominatedNodeName() == node {
		return nil
	}
	if cur.Status == nil {
		cur.Status = &corev1.PodStatus{}
	}
	cur.Status.NominatedNodeName = node
	if _, err := p.pods.UpdateStatus(ctx, cur); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("nominating %q for %s: %w", node, pod.Key, err)
	}
	return nil
}

// markDisruptionTarget sets the DisruptionTarget condition Kubernetes'
// preemption sets on victim before deleting it, so that its owner (a Job's
// pod failure policy, for one) can tell why it went. The victim is read
// again after a conflict; one that is gone needs no mark.
func (p *Plugin) markDisruptionTarget(ctx context.Context, preemptor *framework.PodInfo, victim *corev1.Pod) error {
	want := &corev1.PodCondition{Type: "DisruptionTarget", Status: "True", Reason: "PreemptionByScheduler",
		Message: preemptor.Pod.GetSpec().GetSchedulerName() + ": preempting to accommodate a higher priority pod"}
	cur := victim
	for attempt := 0; ; attempt++ {
		u := proto.Clone(cur).(*corev1.Pod)
		if u.Status == nil {
			u.Status = &corev1.PodStatus{}
		}
		if !setCondition(u.Status, want, p.now()) {
			return nil
		}
		_, err := p.pods.UpdateStatus(ctx, u)
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err) || attempt == 2:
			return fmt.Errorf("DisruptionTarget condition: %w", err)
		}
		m := victim.GetMetadata()
		if cur, err = p.pods.Get(ctx, m.GetNamespace(), m.GetName()); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("DisruptionTarget condition: %w", err)
		}
		if cur.GetMetadata().GetUid() != m.GetUid() {
			return nil
		}
	}
}

// setCondition puts want into st as Kubernetes' UpdatePodCondition does
// (the transition time changes only with the status); false if st already
// has it.
func setCondition(st *corev1.PodStatus, want *corev1.PodCondition, now time.Time) bool {
	want = proto.Clone(want).(*corev1.PodCondition)
	want.LastTransitionTime = timestamppb.New(now.Truncate(time.Second))
	for i, c := range st.Conditions {
		if c.GetType() != want.GetType() {
			continue
		}
		if c.GetStatus() == want.GetStatus() && c.GetReason() == want.GetReason() && c.GetMessage() == want.GetMessage() {
			return false
		}
		if c.GetStatus() == want.GetStatus() {
			want.LastTransitionTime = c.GetLastTransitionTime()
		}
		st.Conditions[i] = want
		return true
	}
	st.Conditions = append(st.Conditions, want)
	return true
}
