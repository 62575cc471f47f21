// This file holds the garbage collector's reconcile tests: dependents of
// missing owners deleted, stale and recreated owners, and foreground and
// orphan deletion with their finalizers.

package garbagecollector

import (
	"context"
	"slices"
	"sort"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// fakeResource is an in-memory ctrl.Resource that records writes.
type fakeResource struct {
	kind string
	objs []ctrl.Object
	mu   sync.Mutex
	log  *[]string
	live string // the store's resourceVersion of every object, when not the cached one
}

func (r *fakeResource) Kind() string            { return r.kind }
func (r *fakeResource) APIVersion() string      { return "v1" }
func (r *fakeResource) Informer() client.Syncer { return synced{} }
func (r *fakeResource) find(f func(ctrl.Object) bool) []ctrl.Object {
	var out []ctrl.Object
	for _, o := range r.objs {
		if f(o) {
			out = append(out, o)
		}
	}
	return out
}
func (r *fakeResource) Cached(key string) (ctrl.Object, bool) {
	l := r.find(func(o ctrl.Object) bool { return client.Key(o.(proto.Message)) == key })
	if len(l) == 0 {
		return nil, false
	}
	return l[0], true
}
func (r *fakeResource) CachedByUID(uid string) (ctrl.Object, bool) {
	l := r.find(func(o ctrl.Object) bool { return o.GetMetadata().GetUid() == uid })
	if len(l) == 0 {
		return nil, false
	}
	return l[0], true
}
func (r *fakeResource) Dependents(uid string) []ctrl.Object {
	return r.find(func(o ctrl.Object) bool {
		for _, ref := range o.GetMetadata().GetOwnerReferences() {
			if ref.GetUid() == uid {
				return true
			}
		}
		return false
	})
}
func (r *fakeResource) InNamespace(ns string) []ctrl.Object { return r.objs }
func (r *fakeResource) All() []ctrl.Object                  { return r.objs }
func (r *fakeResource) Get(_ context.Context, ns, name string) (ctrl.Object, error) {
	if o, ok := r.Cached(client.KeyOf(ns, name)); ok {
		return o, nil
	}
	return nil, apierrors.NewNotFound("", r.kind, name)
}
func (r *fakeResource) Update(_ context.Context, o ctrl.Object) error {
	m := o.GetMetadata()
	var refs []string
	blocking := false
	for _, ref := range m.GetOwnerReferences() {
		refs = append(refs, ref.GetUid())
		blocking = blocking || ref.GetBlockOwnerDeletion()
	}
	line := "update " + r.kind + " " + m.GetName() + " owners=" + joined(refs) + " finalizers=" + joined(m.GetFinalizers())
	if len(refs) > 0 && !blocking {
		line += " non-blocking"
	}
	r.record(line)
	return nil
}
func (r *fakeResource) Delete(_ context.Context, ns, name string, opts client.DeleteOptions) error {
	line := "delete " + r.kind + " " + name + " " + opts.PropagationPolicy
	if opts.ResourceVersion != "" {
		line += " rv=" + opts.ResourceVersion
	}
	r.record(line)
	if o, ok := r.Cached(client.KeyOf(ns, name)); ok && r.live != "" && opts.ResourceVersion != "" && opts.ResourceVersion != r.live {
		return apierrors.NewConflict("", r.kind, o.GetMetadata().GetName(), "Precondition failed")
	}
	return nil
}
func (r *fakeResource) OnChange(func(ctrl.Object, bool)) {}
func (r *fakeResource) record(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.log = append(*r.log, s)
}

func joined(l []string) string {
	s := "["
	for i, x := range l {
		if i > 0 {
			s += ","
		}
		s += x
	}
	return s + "]"
}

type synced struct{}

func (synced) HasSynced() bool { return true }

func ref(kind, name, uid string, block bool) *metav1.OwnerReference {
	t := true
	return &metav1.OwnerReference{Kind: kind, Name: name, Uid: uid, Controller: &t, BlockOwnerDeletion: &block}
}

func meta(name, uid string, refs ...*metav1.OwnerReference) *metav1.ObjectMeta {
	return &metav1.ObjectMeta{Namespace: "ns", Name: name, Uid: uid, OwnerReferences: refs}
}

func withRV(m *metav1.ObjectMeta, rv string) *metav1.ObjectMeta {
	m.ResourceVersion = rv
	return m
}

func deleting(m *metav1.ObjectMeta, finalizers ...string) *metav1.ObjectMeta {
	m.DeletionTimestamp = timestamppb.Now()
	m.Finalizers = finalizers
	return m
}

func TestReconcile(t *testing.T) {
	for _, tc := range []struct {
		name string
		rss  []*appsv1.ReplicaSet
		pods []*corev1.Pod
		key  string
		live string
		want []string
	}{
		{
			name: "owner missing: background delete",
			pods: []*corev1.Pod{{Metadata: meta("p", "p1", ref("ReplicaSet", "rs", "rs1", true))}},
			key:  "Pod./ns/p",
			want: []string{"delete Pod p Background"},
		},
		{
			// The orphaning of a deleted owner removed the reference in a
			// newer version the cache has not seen yet: the delete names the
			// cached version, conflicts, and the object stays.
			name: "owner missing, cached copy stale: conditional delete conflicts",
			pods: []*corev1.Pod{{Metadata: withRV(meta("p", "p1", ref("ReplicaSet", "rs", "rs1", true)), "5")}},
			live: "6",
			key:  "Pod./ns/p",
			want: []string{"delete Pod p Background rv=5"},
		},
		{
			name: "owner recreated with another uid: delete",
			rss:  []*appsv1.ReplicaSet{{Metadata: meta("rs", "rs2")}},
			pods: []*corev1.Pod{{Metadata: meta("p", "p1", ref("ReplicaSet", "rs", "rs1", true))}},
			key:  "Pod./ns/p",
			want: []string{"delete Pod p Background"},
		},
		{
			name: "owner present: nothing",
			rss:  []*appsv1.ReplicaSet{{Metadata: meta("rs", "rs1")}},
			pods: []*corev1.Pod{{Metadata: meta("p", "p1", ref("ReplicaSet", "rs", "rs1", true))}},
			key:  "Pod./ns/p",
		},
		{
			name: "one of two owners gone: drop its reference",
			rss:  []*appsv1.ReplicaSet{{Metadata: meta("rs", "rs1")}},
			pods: []*corev1.Pod{{Metadata: meta("p", "p1", ref("ReplicaSet", "rs", "rs1", true), ref("ReplicaSet", "old", "rs0", false))}},
			key:  "Pod./ns/p",
			want: []string{"update Pod p owners=[rs1] finalizers=[]"},
		},
		{
			name: "foreground: dependents deleted first, finalizer kept",
			rss:  []*appsv1.ReplicaSet{{Metadata: deleting(meta("rs", "rs1"), ForegroundFinalizer)}},
			pods: []*corev1.Pod{{Metadata: meta("p", "p1", ref("ReplicaSet", "rs", "rs1", true))}, {Metadata: meta("q", "q1", ref("ReplicaSet", "rs", "rs1", true))}},
			key:  "ReplicaSet./ns/rs",
			want: []string{"delete Pod p Foreground", "delete Pod q Foreground"},
		},
		{
			name: "foreground: only non-blocking dependents left, finalizer removed",
			rss:  []*appsv1.ReplicaSet{{Metadata: deleting(meta("rs", "rs1"), ForegroundFinalizer)}},
			pods: []*corev1.Pod{{Metadata: deleting(meta("p", "p1", ref("ReplicaSet", "rs", "rs1", false)))}},
			key:  "ReplicaSet./ns/rs",
			want: []string{"update ReplicaSet rs owners=[] finalizers=[]"},
		},
		{
			// Kubernetes' "should not delete dependents that have both
			// valid owner and owner that's waiting for dependents to be
			// deleted": the pod the other set still owns only loses its
			// reference to the set being deleted.
			name: "foreground: a dependent with another solid owner kept",
			rss:  []*appsv1.ReplicaSet{{Metadata: deleting(meta("rs", "rs1"), ForegroundFinalizer)}, {Metadata: meta("other", "rs2")}},
			pods: []*corev1.Pod{
				{Metadata: meta("p", "p1", ref("ReplicaSet", "rs", "rs1", true))},
				{Metadata: meta("q", "q1", ref("ReplicaSet", "rs", "rs1", true), ref("ReplicaSet", "other", "rs2", false))},
			},
			key:  "ReplicaSet./ns/rs",
			want: []string{"delete Pod p Foreground", "update Pod q owners=[rs2] finalizers=[] non-blocking"},
		},
		{
			// pod1 is owned by pod3, pod2 by pod1, pod3 by pod2, all
			// deleted in the foreground (Kubernetes' "should not be
			// blocked by dependency circle"): pod2's dependent pod3 waits
			// for pod1, itself waiting; pod3's reference stops blocking
			// and pod2 can go.
			name: "foreground cycle: the circle unblocked",
			pods: []*corev1.Pod{
				{Metadata: deleting(meta("pod1", "u1", ref("Pod", "pod3", "u3", true)), ForegroundFinalizer)},
				{Metadata: deleting(meta("pod2", "u2", ref("Pod", "pod1", "u1", true)), ForegroundFinalizer)},
				{Metadata: deleting(meta("pod3", "u3", ref("Pod", "pod2", "u2", true)), ForegroundFinalizer)},
			},
			key:  "Pod./ns/pod2",
			want: []string{"update Pod pod2 owners=[u1] finalizers=[]", "update Pod pod3 owners=[u2] finalizers=[foregroundDeletion] non-blocking"},
		},
		{
			name: "orphan: references removed, then the finalizer",
			rss:  []*appsv1.ReplicaSet{{Metadata: deleting(meta("rs", "rs1"), OrphanFinalizer)}},
			pods: []*corev1.Pod{{Metadata: meta("p", "p1", ref("ReplicaSet", "rs", "rs1", true))}},
			key:  "ReplicaSet./ns/rs",
			want: []string{"update Pod p owners=[] finalizers=[]", "update ReplicaSet rs owners=[] finalizers=[]"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			rsR := &fakeResource{kind: "ReplicaSet", log: &got}
			for _, o := range tc.rss {
				rsR.objs = append(rsR.objs, o)
			}
			podR := &fakeResource{kind: "Pod", log: &got, live: tc.live}
			for _, o := range tc.pods {
				podR.objs = append(podR.objs, o)
			}
			c := New(Config{Resources: []ctrl.Resource{rsR, podR}})
			if _, err := c.Reconcile(context.Background(), tc.key); err != nil {
				t.Fatal(err)
			}
			sort.Strings(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
