// This file holds the informer handlers: they keep the cache and the queue
// in step with the cluster, and move unschedulable pods back on the
// events that could make them fit.
package scheduler

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/plugins/interpodaffinity"
	"github.com/kplane/kplane/services/scheduler/plugins/podtopologyspread"
)

// Cluster events that move unschedulable pods.
const (
	EventNodeAdd       = "NodeAdd"
	EventNodeUpdate    = "NodeUpdate"
	EventPodDelete     = "AssignedPodDelete"
	EventPodTerminated = "AssignedPodTerminated"
	EventClaimChange   = "PersistentVolumeClaimChange"
	EventVolumeChange  = "PersistentVolumeChange"
	// EventAssignedPodAdd: a pod was placed on a node, or a placed pod's
	// labels changed; it moves only pods inter-pod affinity or topology
	// spread rejected (others cannot fit through it).
	EventAssignedPodAdd  = "AssignedPodAdd"
	EventNamespaceChange = "NamespaceChange"
)

func (s *Scheduler) onPodAdd(pod *corev1.Pod) {
	switch {
	case pod.GetSpec().GetNodeName() != "":
		if !terminal(pod) {
			s.cache.AddPod(framework.NewPodInfo(pod), pod.GetSpec().GetNodeName())
			s.queue.MoveRejectedBy(EventAssignedPodAdd, interpodaffinity.Name, podtopologyspread.Name)
		}
	case terminal(pod) || pod.GetMetadata().GetDeletionTimestamp() != nil:
	case s.responsible(pod):
		pi := framework.NewPodInfo(pod)
		s.queue.Add(pi)
		// A nomination made before this replica led (or restarted) holds.
		s.nominated.set(pi, pod.GetStatus().GetNominatedNodeName())
	}
}

func (s *Scheduler) onPodUpdate(old, pod *corev1.Pod) {
	key := client.Key(pod)
	if node := pod.GetSpec().GetNodeName(); node != "" {
		s.queue.Delete(key)
		s.nominated.remove(key)
		if terminal(pod) {
			if !terminal(old) {
				s.cache.RemovePod(key)
				s.queue.MoveAllToActiveOrBackoff(EventPodTerminated)
			}
			return
		}
		s.cache.AddPod(framework.NewPodInfo(pod), node)
		if old.GetSpec().GetNodeName() == "" || !maps.Equal(old.GetMetadata().GetLabels(), pod.GetMetadata().GetLabels()) {
			s.queue.MoveRejectedBy(EventAssignedPodAdd, interpodaffinity.Name, podtopologyspread.Name)
		}
		return
	}
	if terminal(pod) || pod.GetMetadata().GetDeletionTimestamp() != nil || !s.responsible(pod) {
		s.queue.Delete(key)
		s.nominated.remove(key)
		return
	}
	if s.cache.IsAssumed(key) {
		return // bind in flight
	}
	specChanged := !proto.Equal(old.GetSpec(), pod.GetSpec()) ||
		!maps.Equal(old.GetMetadata().GetLabels(), pod.GetMetadata().GetLabels())
	pi := framework.NewPodInfo(pod)
	s.queue.Update(pi, specChanged)
	// The status names the nominated node (the scheduler wrote it); a
	// nomination someone cleared is dropped, an unchanged one refreshed.
	if nom := pod.GetStatus().GetNominatedNodeName(); nom != "" || old.GetStatus().GetNominatedNodeName() != "" {
		s.nominated.set(pi, nom)
	}
}

func (s *Scheduler) onPodDelete(pod *corev1.Pod) {
	key := client.Key(pod)
	s.queue.Delete(key)
	s.nominated.remove(key)
	s.clearReported(key)
	if _, placed := s.cache.PodNode(key); placed {
		s.cache.RemovePod(key)
		s.queue.MoveAllToActiveOrBackoff(EventPodDelete)
	}
}

func (s *Scheduler) onNodeAdd(node *corev1.Node) {
	s.cache.AddNode(node)
	s.queue.MoveAllToActiveOrBackoff(EventNodeAdd)
}

func (s *Scheduler) onNodeUpdate(old, node *corev1.Node) {
	s.cache.UpdateNode(node)
	if schedulingRelevantChange(old, node) {
		s.queue.MoveAllToActiveOrBackoff(EventNodeUpdate)
	}
}

func (s *Scheduler) onNodeDelete(node *corev1.Node) {
	s.cache.RemoveNode(node.GetMetadata().GetName())
}

// schedulingRelevantChange reports whether a node update could make a pod
// fit (heartbeats alone do not).
func schedulingRelevantChange(old, node *corev1.Node) bool {
	return !maps.Equal(old.GetStatus().GetAllocatable(), node.GetStatus().GetAllocatable()) ||
		!maps.Equal(old.GetMetadata().GetLabels(), node.GetMetadata().GetLabels()) ||
		old.GetSpec().GetUnschedulable() != node.GetSpec().GetUnschedulable() ||
		!slices.EqualFunc(old.GetSpec().GetTaints(), node.GetSpec().GetTaints(), func(a, b *corev1.Taint) bool {
			return a.GetKey() == b.GetKey() && a.GetValue() == b.GetValue() && a.GetEffect() == b.GetEffect()
		}) ||
		readyStatus(old) != readyStatus(node) ||
		len(old.GetStatus().GetImages()) != len(node.GetStatus().GetImages())
}

func readyStatus(n *corev1.Node) string {
	for _, c := range n.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c.GetStatus()
		}
	}
	return ""
}
