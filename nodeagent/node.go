// This file holds the agent's Node: its registration with labels, capacity
// (keeping extended resources others added), addresses and node info, its
// status written when it changes, and the Lease renewed in kube-node-lease.

package nodeagent

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/proto/apierrors"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// NodeLeaseNamespace holds the node Leases.
const NodeLeaseNamespace = "kube-node-lease"

// maxImages is how many images the node status lists (as the kubelet).
const maxImages = 50

// labels are the Node's labels.
func (a *Agent) labels() map[string]string {
	l := map[string]string{
		"kubernetes.io/hostname": a.cfg.NodeName,
		"kubernetes.io/os":       runtime.GOOS,
		"kubernetes.io/arch":     runtime.GOARCH,
	}
	if a.simulated {
		l[LabelSimulated] = "true"
	}
	maps.Copy(l, a.cfg.Labels)
	return l
}

// register creates the Node, or updates an existing one's labels, pod
// CIDR and status (a restarted agent keeps the Node it had).
func (a *Agent) register(ctx context.Context) error {
	want := &corev1.Node{
		Metadata: &metav1.ObjectMeta{Name: a.cfg.NodeName, Labels: a.labels()},
		Spec:     &corev1.NodeSpec{Taints: a.cfg.Taints},
	}
	if a.cfg.PodCIDR != "" {
		want.Spec.PodCidr, want.Spec.PodCidrs = a.cfg.PodCIDR, []string{a.cfg.PodCIDR}
	}
	var node *corev1.Node
	for attempt := 0; ; attempt++ {
		got, err := a.nodes.Create(ctx, want)
		if err == nil {
			node = got
			break
		}
		if !apierrors.IsAlreadyExists(err) {
			if ctx.Err() != nil || attempt >= 20 {
				return fmt.Errorf("nodeagent: register node %s: %w", a.cfg.NodeName, err)
			}
			a.log.Warn("registering the node failed; retrying", "err", err)
			time.Sleep(time.Second)
			continue
		}
		cur, err := a.nodes.Get(ctx, "", a.cfg.NodeName)
		if err != nil {
			return fmt.Errorf("nodeagent: get node %s: %w", a.cfg.NodeName, err)
		}
		upd := proto.Clone(cur).(*corev1.Node)
		if upd.Metadata.Labels == nil {
			upd.Metadata.Labels = map[string]string{}
		}
		maps.Copy(upd.Metadata.Labels, want.Metadata.Labels)
		if upd.Spec == nil {
			upd.Spec = &corev1.NodeSpec{}
		}
		if a.cfg.PodCIDR != "" && upd.Spec.PodCidr == "" {
			upd.Spec.PodCidr, upd.Spec.PodCidrs = a.cfg.PodCIDR, []string{a.cfg.PodCIDR}
		}
		if proto.Equal(cur, upd) {
			node = cur
			break
		}
		if node, err = a.nodes.Update(ctx, upd); err == nil {
			break
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("nodeagent: update node %s: %w", a.cfg.NodeName, err)
		}
	}
	_, err := a.updateNodeStatus(ctx, node, nil)
	return err
}

// nodeStatus computes the node's status; old gives the transition times.
func (a *Agent) nodeStatus(ctx context.Context, old *corev1.NodeStatus) *corev1.NodeStatus {
	now := timestamppb.New(time.Now().Truncate(time.Second))
	ready, reason, msg := "True", "KubeletReady", "kplane node agent is posting ready status"
	if st, err := a.cfg.Runtime.Status(ctx); err != nil {
		ready, reason, msg = "False", "KubeletNotReady", "container runtime status check failed: "+err.Error()
	} else if ok, why := cri.Ready(st); !ok {
		ready, reason, msg = "False", "KubeletNotReady", "container runtime not ready: "+why
	}
	cond := func(t, s, reason, msg string) *corev1.NodeCondition {
		c := &corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
		for _, oc := range old.GetConditions() {
			if oc.GetType() == t && oc.GetStatus() == s {
				c.LastTransitionTime = oc.GetLastTransitionTime()
			}
		}
		return c
	}
	capacity := nodeCapacity(a.cfg.Capacity, old.GetCapacity())
	st := &corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: maps.Clone(capacity),
		Conditions: []*corev1.NodeCondition{
			cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond("Ready", ready, reason, msg),
		},
		Addresses: []*corev1.NodeAddress{
			{Type: "InternalIP", Address: a.cfg.HostIP},
			{Type: "Hostname", Address: a.cfg.NodeName},
		},
		NodeInfo: a.nodeInfo(),
	}
	if a.cfg.LogPort != 0 {
		st.DaemonEndpoints = &corev1.NodeDaemonEndpoints{KubeletEndpoint: &corev1.DaemonEndpoint{Port: a.cfg.LogPort}}
	}
	if imgs, err := a.cfg.Runtime.ListImages(ctx); err == nil {
		sort.Slice(imgs, func(i, j int) bool { return imgs[i].GetSize_() > imgs[j].GetSize_() })
		for i, im := range imgs {
			if i == maxImages {
				break
			}
			names := append(append([]string{}, im.GetRepoDigests()...), im.GetRepoTags()...)
			st.Images = append(st.Images, &corev1.ContainerImage{Names: names, SizeBytes: int64(im.GetSize_())})
		}
	}
	return st
}

// nodeCapacity is the agent's own capacity plus the domain-prefixed
// resources (extended resources such as example.com/gpu) that someone else
// put in the node's capacity, which the kubelet keeps as it finds them.
// Allocatable follows capacity, so an extended resource added to capacity
// becomes allocatable and one removed from it stops being.
func nodeCapacity(own, old map[string]string) map[string]string {
	c := maps.Clone(own)
	if c == nil {
		c = map[string]string{}
	}
	for k, v := range old {
		if _, ok := c[k]; !ok && strings.Contains(k, "/") {
			c[k] = v
		}
	}
	return c
}

// sameStatus compares node statuses without heartbeat times.
func sameStatus(a, b *corev1.NodeStatus) bool {
	strip := func(s *corev1.NodeStatus) *corev1.NodeStatus {
		s = proto.Clone(s).(*corev1.NodeStatus)
		for _, c := range s.GetConditions() {
			c.LastHeartbeatTime = nil
		}
		return s
	}
	return proto.Equal(strip(a), strip(b))
}

// updateNodeStatus writes the node's status if it changed (or always when
// force), re-reading the Node on a conflict.
func (a *Agent) updateNodeStatus(ctx context.Context, node *corev1.Node, lastWrite *time.Time) (*corev1.Node, error) {
	for attempt := 0; attempt < 5; attempt++ {
		st := a.nodeStatus(ctx, node.GetStatus())
		force := lastWrite == nil || time.Since(*lastWrite) > time.Minute
		if !force && sameStatus(st, node.GetStatus()) {
			return node, nil
		}
		upd := proto.Clone(node).(*corev1.Node)
		upd.Status = st
		got, err := a.nodes.UpdateStatus(ctx, upd)
		if err == nil {
			if lastWrite != nil {
				*lastWrite = time.Now()
			}
			return got, nil
		}
		if !apierrors.IsConflict(err) {
			return node, fmt.Errorf("nodeagent: update node status: %w", err)
		}
		if node, err = a.nodes.Get(ctx, "", a.cfg.NodeName); err != nil {
			return node, fmt.Errorf("nodeagent: get node: %w", err)
		}
	}
	return node, fmt.Errorf("nodeagent: update node status: too many conflicts")
}

// statusLoop recomputes the node status every StatusInterval.
func (a *Agent) statusLoop(ctx context.Context) {
	var node *corev1.Node
	last := time.Now()
	t := time.NewTicker(a.cfg.StatusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if node == nil {
			n, err := a.nodes.Get(ctx, "", a.cfg.NodeName)
			if err != nil {
				a.log.Warn("get node failed", "err", err)
				continue
			}
			node = n
		}
		n, err := a.updateNodeStatus(ctx, node, &last)
		if err != nil {
			a.log.Warn("node status update failed", "err", err)
			node = nil
			continue
		}
		node = n
	}
}

// renewLease keeps the node's Lease in kube-node-lease renewed every
// quarter of LeaseDuration, with compare-and-swap updates.
func (a *Agent) renewLease(ctx context.Context) {
	var lease *coordv1.Lease
	secs := int32(a.cfg.LeaseDuration / time.Second)
	if secs < 1 {
		secs = 1
	}
	for {
		now := timestamppb.New(time.Now())
		var err error
		if lease == nil {
			lease, err = a.leases.Get(ctx, NodeLeaseNamespace, a.cfg.NodeName)
			if apierrors.IsNotFound(err) {
				lease, err = a.leases.Create(ctx, &coordv1.Lease{
					Metadata: &metav1.ObjectMeta{Namespace: NodeLeaseNamespace, Name: a.cfg.NodeName},
					Spec: &coordv1.LeaseSpec{
						HolderIdentity:       proto.String(a.cfg.NodeName),
						LeaseDurationSeconds: proto.Int32(secs),
						RenewTime:            now,
					},
				})
			}
		} else {
			upd := proto.Clone(lease).(*coordv1.Lease)
			if upd.Spec == nil {
				upd.Spec = &coordv1.LeaseSpec{}
			}
			upd.Spec.HolderIdentity = proto.String(a.cfg.NodeName)
			upd.Spec.LeaseDurationSeconds = proto.Int32(secs)
			upd.Spec.RenewTime = now
			lease, err = a.leases.Update(ctx, upd) // CAS on resourceVersion
		}
		wait := a.cfg.LeaseDuration / 4
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.log.Warn("lease renewal failed", "err", err)
			lease = nil // re-read: a conflict means someone else wrote it
			wait = min(wait, time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
