// This file holds how the DaemonSet controller keeps one pod per eligible
// node: which pods to create and delete (failed pods with back-off), the
// pods it makes from the template, the creates and deletes themselves, and
// the status it writes.

package daemonset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// manage creates the daemon pods nodes need and deletes those that must
// go: pods on nodes that may no longer keep them, failed and succeeded
// pods (a new one follows), extra pods beyond one per node (two while
// surging), and pods for nodes that no longer exist. It asks to run again
// when the first failed pod it keeps for back-off may go.
func (c *Controller) manage(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, hash string) (client.Result, error) {
	byNode := c.podsByNode(ds)
	var res client.Result
	var del []*corev1.Pod
	var createOn []string
	known := map[string]bool{}
	for _, n := range nodes {
		name := n.GetMetadata().GetName()
		known[name] = true
		run, keep := shouldRun(n, ds)
		pods := byNode[name]
		switch {
		case run && len(pods) == 0:
			createOn = append(createOn, name)
		case keep:
			var running []*corev1.Pod
			for _, p := range pods {
				if p.GetMetadata().GetDeletionTimestamp() != nil {
					continue
				}
				switch p.GetStatus().GetPhase() {
				case "Failed":
					if wait := c.failedBackoff(client.Key(ds) + "/" + name); wait > 0 {
						res = res.Sooner(wait)
						continue
					}
					ctrl.Eventf(c.cfg.Recorder, ds, "Warning", "FailedDaemonPod", "Found failed daemon pod %s/%s on node %s, will try to kill it",
						p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), name)
					del = append(del, p)
				case "Succeeded":
					ctrl.Eventf(c.cfg.Recorder, ds, "Normal", "SucceededDaemonPod", "Found succeeded daemon pod %s/%s on node %s, will try to delete it",
						p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), name)
					del = append(del, p)
				default:
					running = append(running, p)
				}
			}
			if !allowsSurge(ds) {
				if len(running) > 1 {
					del = append(del, running[1:]...)
				}
				continue
			}
			if len(running) <= 1 {
				if len(running) == 0 && run {
					createOn = append(createOn, name)
				}
				continue
			}
			// Surging: keep the oldest new pod and, until it is
			// available, the oldest old one (if that is still ready).
			var oldestNew, oldestOld *corev1.Pod
			for _, p := range running {
				if updated(p, ds, hash) {
					if oldestNew == nil {
						oldestNew = p
						continue
					}
				} else if oldestOld == nil {
					oldestOld = p
					continue
				}
				del = append(del, p)
			}
			if oldestNew != nil && oldestOld != nil {
				if ready, _ := ctrl.PodReady(oldestOld); !ready || ctrl.PodAvailable(oldestNew, ds.GetSpec().GetMinReadySeconds(), c.now()) {
					del = append(del, oldestOld)
				}
			}
		case len(pods) > 0:
			for _, p := range pods {
				if p.GetMetadata().GetDeletionTimestamp() == nil {
					del = append(del, p)
				}
			}
		}
	}
	// Pods for a node that is gone and that no scheduler will ever bind.
	for name, pods := range byNode {
		if known[name] {
			continue
		}
		for _, p := range pods {
			if p.GetSpec().GetNodeName() == "" && p.GetMetadata().GetDeletionTimestamp() == nil {
				del = append(del, p)
			}
		}
	}
	return res, c.syncNodes(ctx, ds, del, createOn, hash)
}

// failedBackoff returns how long the deletion of a failed pod on this
// node must still wait (0: go ahead, and the next one waits longer).
func (c *Controller) failedBackoff(id string) time.Duration {
	c.failedMu.Lock()
	defer c.failedMu.Unlock()
	now := c.failed.Clock.Now()
	if c.failed.IsInBackOffSinceUpdate(id, now) {
		return c.failed.Get(id)
	}
	c.failed.Next(id, now)
	return 0
}

// newPod is the pod of ds for node: the template with the daemon
// tolerations, the hash and generation labels, and the node affinity.
func newPod(ds *appsv1.DaemonSet, node, hash string) *corev1.Pod {
	t := ds.GetSpec().GetTemplate()
	spec := proto.Clone(t.GetSpec()).(*corev1.PodSpec)
	if spec == nil {
		spec = &corev1.PodSpec{}
	}
	addDaemonTolerations(spec)
	pinToNode(spec, node)
	m := &metav1.ObjectMeta{GenerateName: ds.GetMetadata().GetName() + "-", Namespace: ds.GetMetadata().GetNamespace(),
		Labels: map[string]string{}, OwnerReferences: []*metav1.OwnerReference{ctrl.NewControllerRef(ds, "apps/v1", "DaemonSet")}}
	for k, v := range t.GetMetadata().GetLabels() {
		m.Labels[k] = v
	}
	if a := t.GetMetadata().GetAnnotations(); len(a) > 0 {
		m.Annotations = map[string]string{}
		for k, v := range a {
			m.Annotations[k] = v
		}
	}
	if g, ok := templateGeneration(ds); ok {
		m.Labels[GenerationLabel] = strconv.FormatInt(g, 10)
	}
	if hash != "" {
		m.Labels[HashLabel] = hash
	}
	return &corev1.Pod{ApiVersion: "v1", Kind: "Pod", Metadata: m, Spec: spec}
}

// syncNodes deletes del and creates a pod on each node of createOn, the
// creations in batches of 1, 2, 4, … that stop at the first batch with a
// failure (Kubernetes' slow start), expecting all of them in the informer
// before the next full sync.
func (c *Controller) syncNodes(ctx context.Context, ds *appsv1.DaemonSet, del []*corev1.Pod, createOn []string, hash string) error {
	key := client.Key(ds)
	if len(createOn) > burst {
		createOn = createOn[:burst]
	}
	if len(del) > burst {
		del = del[:burst]
	}
	if len(createOn) == 0 && len(del) == 0 {
		return nil
	}
	delKeys := make([]string, len(del))
	for i, p := range del {
		delKeys[i] = client.Key(p)
	}
	c.exp.Expect(key, len(createOn), delKeys)
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for pos, size := 0, 1; pos < len(createOn); pos, size = pos+size, size*2 {
		batch := createOn[pos:min(pos+size, len(createOn))]
		before := len(errs)
		var wg sync.WaitGroup
		for _, node := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := c.cfg.Pods.Create(ctx, newPod(ds, node, hash))
				if err != nil {
					c.exp.CreationObserved(key)
					ctrl.Eventf(c.cfg.Recorder, ds, "Warning", "FailedCreate", "Error creating: %v", err)
					fail(fmt.Errorf("daemonset %s: create pod on %s: %w", key, node, err))
					return
				}
				ctrl.Eventf(c.cfg.Recorder, ds, "Normal", "SuccessfulCreate", "Created pod: %s", p.GetMetadata().GetName())
			}()
		}
		wg.Wait()
		if len(errs) > before {
			for range createOn[min(pos+size, len(createOn)):] {
				c.exp.CreationObserved(key)
			}
			break
		}
	}
	var wg sync.WaitGroup
	for _, p := range del {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.cfg.Pods.Delete(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), client.DeleteOptions{})
			if err != nil {
				c.exp.DeletionObserved(key, client.Key(p))
				if !apierrors.IsNotFound(err) {
					ctrl.Eventf(c.cfg.Recorder, ds, "Warning", "FailedDelete", "Error deleting: %v", err)
					fail(fmt.Errorf("daemonset %s: delete pod %s: %w", key, p.GetMetadata().GetName(), err))
				}
				return
			}
			ctrl.Eventf(c.cfg.Recorder, ds, "Normal", "SuccessfulDelete", "Deleted pod: %s", p.GetMetadata().GetName())
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// syncStatus writes ds's status from the caches: desired (nodes that
// should run it), current (of those, with a pod), misscheduled (pods on
// nodes that should not run it), ready, available (ready for
// minReadySeconds), updated (running the current template), unavailable;
// observedGeneration when acted on. It asks to run again when the first
// ready pod becomes available with time.
func (c *Controller) syncStatus(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, hash string, observed bool) (client.Result, error) {
	byNode := c.podsByNode(ds)
	now := c.now()
	st := &appsv1.DaemonSetStatus{}
	var res client.Result
	for _, n := range nodes {
		run, _ := shouldRun(n, ds)
		pods := byNode[n.GetMetadata().GetName()]
		if !run {
			if len(pods) > 0 {
				st.NumberMisscheduled++
			}
			continue
		}
		st.DesiredNumberScheduled++
		if len(pods) == 0 {
			continue
		}
		st.CurrentNumberScheduled++
		p := pods[0]
		if ready, since := ctrl.PodReady(p); ready {
			st.NumberReady++
			if ctrl.PodAvailable(p, ds.GetSpec().GetMinReadySeconds(), now) {
				st.NumberAvailable++
			} else {
				res = res.Sooner(since.Add(time.Duration(ds.GetSpec().GetMinReadySeconds())*time.Second).Sub(now) + 10*time.Millisecond)
			}
		}
		if updated(p, ds, hash) {
			st.UpdatedNumberScheduled++
		}
	}
	st.NumberUnavailable = st.DesiredNumberScheduled - st.NumberAvailable
	have := ds.GetStatus()
	st.CollisionCount = have.CollisionCount
	st.Conditions = have.GetConditions()
	st.ObservedGeneration = have.GetObservedGeneration()
	if observed {
		st.ObservedGeneration = ds.GetMetadata().GetGeneration()
	}
	if have == nil {
		have = &appsv1.DaemonSetStatus{}
	}
	if proto.Equal(st, have) {
		return res, nil
	}
	u := proto.Clone(ds).(*appsv1.DaemonSet)
	u.Status = st
	if _, err := c.cfg.DaemonSets.UpdateStatus(ctx, u); err != nil {
		if apierrors.IsNotFound(err) {
			return res, nil
		}
		return res, fmt.Errorf("daemonset %s: status: %w", client.Key(ds), err)
	}
	return res, nil
}
