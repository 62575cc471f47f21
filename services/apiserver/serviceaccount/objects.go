// This file holds Objects, the cache of the ServiceAccounts, Pods, Secrets
// and Nodes a token's validation looks up.
package serviceaccount

import (
	"sync"
	"time"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// Object is what validation needs of a cached object.
type Object struct {
	UID string
	// Deleted is the deletionTimestamp (zero while not being deleted).
	Deleted time.Time
	// ServiceAccountName is a pod's spec.serviceAccountName; NodeName its
	// spec.nodeName.
	ServiceAccountName, NodeName string
}

// Kinds of objects tokens are bound to.
const (
	KindServiceAccount = "ServiceAccount"
	KindPod            = "Pod"
	KindSecret         = "Secret"
	KindNode           = "Node"
)

// Objects holds, per kind, the uid and deletion time of every
// ServiceAccount, Pod, Secret and Node. The API service feeds it from its
// watch cache (it is an ObjectSink: register it with Config.Informers for
// serviceaccounts, pods, secrets and nodes), so validating a token reads no
// store. It is safe for concurrent use.
type Objects struct {
	mu   sync.RWMutex
	objs map[string]map[string]Object // kind → namespace/name → object
	// fallback reads an object the cache does not hold (SetFallback).
	fallback func(kind, namespace, name string) (any, error)
}

// SetFallback makes Get read an object the cache does not hold with f
// (which returns the object or an error; nil, nil: not there): a token
// issued by another replica for a ServiceAccount created a moment before
// is then valid here before this replica's watch has brought the
// ServiceAccount, as Kubernetes' token getter falls back from its
// informer to a live read. Call it before the first Get.
func (o *Objects) SetFallback(f func(kind, namespace, name string) (any, error)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fallback = f
}

// NewObjects returns an empty cache.
func NewObjects() *Objects {
	return &Objects{objs: map[string]map[string]Object{}}
}

// Get returns the object of kind named namespace/name ("" namespace for
// Nodes).
func (o *Objects) Get(kind, namespace, name string) (Object, bool) {
	o.mu.RLock()
	obj, ok := o.objs[kind][namespace+"/"+name]
	fallback := o.fallback
	o.mu.RUnlock()
	if ok || fallback == nil {
		return obj, ok
	}
	got, err := fallback(kind, namespace, name)
	if err != nil || got == nil {
		return Object{}, false
	}
	k, m, extra := describe(got)
	if k != kind || m == nil {
		return Object{}, false
	}
	extra.UID = m.GetUid()
	if ts := m.GetDeletionTimestamp(); ts != nil {
		extra.Deleted = ts.AsTime()
	}
	return extra, true
}

// Upsert records obj (an ObjectSink method).
func (o *Objects) Upsert(obj any) {
	kind, m, extra := describe(obj)
	if kind == "" || m == nil {
		return
	}
	extra.UID = m.GetUid()
	if ts := m.GetDeletionTimestamp(); ts != nil {
		extra.Deleted = ts.AsTime()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.objs[kind] == nil {
		o.objs[kind] = map[string]Object{}
	}
	o.objs[kind][m.GetNamespace()+"/"+m.GetName()] = extra
}

// Delete forgets obj (an ObjectSink method).
func (o *Objects) Delete(obj any) {
	kind, m, _ := describe(obj)
	if kind == "" || m == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.objs[kind], m.GetNamespace()+"/"+m.GetName())
}

func describe(obj any) (string, *metav1.ObjectMeta, Object) {
	switch x := obj.(type) {
	case *corev1.ServiceAccount:
		return KindServiceAccount, x.GetMetadata(), Object{}
	case *corev1.Pod:
		return KindPod, x.GetMetadata(), Object{ServiceAccountName: x.GetSpec().GetServiceAccountName(), NodeName: x.GetSpec().GetNodeName()}
	case *corev1.Secret:
		return KindSecret, x.GetMetadata(), Object{}
	case *corev1.Node:
		return KindNode, x.GetMetadata(), Object{}
	}
	return "", nil, Object{}
}
