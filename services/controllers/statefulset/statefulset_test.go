// This file holds unit tests of the StatefulSet controller's pure parts:
// ordinals from pod names, claim owners per retention policy, revision
// hashes.
package statefulset

import (
	"testing"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func TestOrdinalOf(t *testing.T) {
	set := &appsv1.StatefulSet{Metadata: &metav1.ObjectMeta{Name: "web"}}
	tests := []struct {
		name string
		pod  string
		want int
	}{
		{name: "first", pod: "web-0", want: 0},
		{name: "large", pod: "web-12", want: 12},
		{name: "other set", pod: "webx-1", want: -1},
		{name: "leading zero", pod: "web-01", want: -1},
		{name: "not a number", pod: "web-a", want: -1},
		{name: "prefix of another set", pod: "web-1-0", want: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ordinalOf(set, &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: tc.pod}}); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// TestClaimOwners checks the owner references of a claim for each
// retention policy, as Kubernetes' updateClaimOwnerRefForSetAndPod sets
// them.
func TestClaimOwners(t *testing.T) {
	pod := &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "web-1", Uid: "pod-uid"}}
	foreign := &metav1.OwnerReference{Kind: "Other", Name: "x", Uid: "x", Controller: new(true)}
	tests := []struct {
		name                string
		whenDeleted, scaled string
		inRange             bool
		refs                []*metav1.OwnerReference
		want                []string // owner kinds
	}{
		{name: "retain retain", whenDeleted: "Retain", scaled: "Retain", inRange: true},
		{name: "deleted: the set", whenDeleted: "Delete", scaled: "Retain", inRange: true, want: []string{"StatefulSet"}},
		{name: "deleted: the set, also scaled down", whenDeleted: "Delete", scaled: "Retain", inRange: false, want: []string{"StatefulSet"}},
		{name: "scaled: nothing in range", whenDeleted: "Retain", scaled: "Delete", inRange: true},
		{name: "scaled: the pod once condemned", whenDeleted: "Retain", scaled: "Delete", inRange: false, want: []string{"Pod"}},
		{name: "both, in range", whenDeleted: "Delete", scaled: "Delete", inRange: true, want: []string{"StatefulSet"}},
		{name: "both, condemned: the pod only", whenDeleted: "Delete", scaled: "Delete", inRange: false,
			refs: []*metav1.OwnerReference{{Kind: "StatefulSet", Name: "web", Uid: "set-uid", Controller: new(true)}}, want: []string{"Pod"}},
		{name: "another controller: ours removed", whenDeleted: "Delete", scaled: "Delete", inRange: true,
			refs: []*metav1.OwnerReference{foreign, {Kind: "StatefulSet", Name: "web", Uid: "set-uid"}}, want: []string{"Other"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := &appsv1.StatefulSet{Metadata: &metav1.ObjectMeta{Name: "web", Uid: "set-uid"}, Spec: &appsv1.StatefulSetSpec{
				PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: tc.whenDeleted, WhenScaled: tc.scaled}}}
			var got []string
			for _, r := range claimOwners(tc.refs, set, pod, tc.inRange) {
				got = append(got, r.GetKind())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got owners %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got owners %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestRevisionHashDependsOnCollisionCount(t *testing.T) {
	one := int32(1)
	a, b, c := revisionHash([]byte(`{"a":1}`), nil), revisionHash([]byte(`{"a":1}`), &one), revisionHash([]byte(`{"a":2}`), nil)
	if a == b || a == c || a != revisionHash([]byte(`{"a":1}`), nil) {
		t.Errorf("hashes %s %s %s: want stable, and different for another collision count or data", a, b, c)
	}
}
