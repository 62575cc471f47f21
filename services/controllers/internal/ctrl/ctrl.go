// Package ctrl holds what kplane's controllers share: controller
// ownerReferences, pod readiness and availability, and expectations (what a
// controller has asked the API service for and not yet seen in its
// informers). Label selectors convert with kubeconv.Selector.
package ctrl

import (
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// Object is any kplane object (every generated resource has metadata).
type Object interface {
	GetMetadata() *metav1.ObjectMeta
}

// ControllerRef is obj's ownerReference with controller: true, or nil.
func ControllerRef(obj Object) *metav1.OwnerReference {
	for _, r := range obj.GetMetadata().GetOwnerReferences() {
		if r.GetController() {
			return r
		}
	}
	return nil
}

// NewControllerRef is the ownerReference a controller puts on what it
// creates: controller and blockOwnerDeletion true.
func NewControllerRef(owner Object, apiVersion, kind string) *metav1.OwnerReference {
	t := true
	m := owner.GetMetadata()
	return &metav1.OwnerReference{ApiVersion: apiVersion, Kind: kind, Name: m.GetName(), Uid: m.GetUid(), Controller: &t, BlockOwnerDeletion: &t}
}

// PodReady reports whether pod's Ready condition is True, and since when.
func PodReady(pod *corev1.Pod) (bool, time.Time) {
	for _, c := range pod.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c.GetStatus() == "True", c.GetLastTransitionTime().AsTime()
		}
	}
	return false, time.Time{}
}

// PodAvailable reports whether pod has been Ready for minReadySeconds at now.
func PodAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	ready, since := PodReady(pod)
	if !ready {
		return false
	}
	if minReadySeconds == 0 {
		return true
	}
	return !since.IsZero() && !since.Add(time.Duration(minReadySeconds)*time.Second).After(now)
}

// PodActive reports whether pod counts toward a controller's replicas: not
// finished and not being deleted.
func PodActive(pod *corev1.Pod) bool {
	p := pod.GetStatus().GetPhase()
	return p != "Succeeded" && p != "Failed" && pod.GetMetadata().GetDeletionTimestamp() == nil
}

// HasFinalizer reports whether m lists f.
func HasFinalizer(m *metav1.ObjectMeta, f string) bool {
	for _, x := range m.GetFinalizers() {
		if x == f {
			return true
		}
	}
	return false
}

// RemoveFinalizer removes f from m.
func RemoveFinalizer(m *metav1.ObjectMeta, f string) {
	out := m.Finalizers[:0]
	for _, x := range m.Finalizers {
		if x != f {
			out = append(out, x)
		}
	}
	m.Finalizers = out
}

// expectationsTTL is how long unmet expectations hold a controller back
// before they are assumed lost (a watch event that never came), as in
// Kubernetes.
const expectationsTTL = 5 * time.Minute

// Expectations remember, per controller key, how many creations are still
// to be observed and which pods (by key) are still to be seen deleted, so a
// controller whose informers lag behind its own writes does not act twice.
// Safe for concurrent use.
type Expectations struct {
	mu sync.Mutex
	m  map[string]*expectation
}

type expectation struct {
	adds    int
	deletes map[string]bool
	at      time.Time
}

// NewExpectations returns empty expectations.
func NewExpectations() *Expectations { return &Expectations{m: map[string]*expectation{}} }

// Satisfied reports whether key has nothing outstanding (or its
// expectations expired, or were never set).
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok {
		return true
	}
	if x.adds <= 0 && len(x.deletes) == 0 {
		return true
	}
	return time.Since(x.at) > expectationsTTL
}

// ExpectCreations records that n creations are about to be made for key.
func (e *Expectations) ExpectCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = &expectation{adds: n, deletes: map[string]bool{}, at: time.Now()}
}

// ExpectDeletions records that the pods podKeys are about to be deleted for key.
func (e *Expectations) ExpectDeletions(key string, podKeys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := make(map[string]bool, len(podKeys))
	for _, k := range podKeys {
		d[k] = true
	}
	e.m[key] = &expectation{deletes: d, at: time.Now()}
}

// Expect records that n creations and the deletions of the pods podKeys
// are about to be made for key (a controller that does both in one sync).
func (e *Expectations) Expect(key string, n int, podKeys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := make(map[string]bool, len(podKeys))
	for _, k := range podKeys {
		d[k] = true
	}
	e.m[key] = &expectation{adds: n, deletes: d, at: time.Now()}
}

// CreationObserved lowers key's outstanding creations by one (a create was
// seen, or failed and will not be seen).
func (e *Expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok && x.adds > 0 {
		x.adds--
	}
}

// DeletionObserved marks podKey's deletion as seen for key.
func (e *Expectations) DeletionObserved(key, podKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok {
		delete(x.deletes, podKey)
	}
}

// Delete forgets key.
func (e *Expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}

// Eventf records an event through r; a nil r records nothing.
func Eventf(r *client.Recorder, obj proto.Message, eventType, reason, format string, args ...any) {
	if r != nil {
		r.Eventf(obj, eventType, reason, format, args...)
	}
}
