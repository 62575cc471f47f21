// This file holds the VolumeBinding filter's tests over claims and volumes
// PreFilter would have read: node affinity of bound volumes, fitting
// volumes for waiting claims, provisioners.
package volumebinding

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

func volume(name, size, node string, modes ...string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{Metadata: &metav1.ObjectMeta{Name: name}, Spec: &corev1.PersistentVolumeSpec{
		Capacity: map[string]string{"storage": size}, AccessModes: modes, StorageClassName: "local", VolumeMode: proto.String("Filesystem")}}
	if node != "" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []*corev1.NodeSelectorTerm{{
			MatchExpressions: []*corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: "In", Values: []string{node}}}}}}}
	}
	return pv
}

func waiting(size string, modes ...string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{Metadata: &metav1.ObjectMeta{Name: "c", Namespace: "ns"}, Spec: &corev1.PersistentVolumeClaimSpec{
		StorageClassName: proto.String("local"), AccessModes: modes, VolumeMode: proto.String("Filesystem"),
		Resources: &corev1.VolumeResourceRequirements{Requests: map[string]string{"storage": size}}}}
}

func TestFilter(t *testing.T) {
	node := func(name string) *framework.NodeInfo {
		return &framework.NodeInfo{Name: name, Node: &corev1.Node{Metadata: &metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name}}}}
	}
	tests := []struct {
		name string
		st   *state
		node string
		want framework.Code
	}{
		{name: "bound volume on this node", st: &state{bound: []*corev1.PersistentVolume{volume("v", "1Gi", "a")}}, node: "a", want: framework.Success},
		{name: "bound volume elsewhere", st: &state{bound: []*corev1.PersistentVolume{volume("v", "1Gi", "b")}}, node: "a", want: framework.UnschedulableAndUnresolvable},
		{name: "bound volume anywhere", st: &state{bound: []*corev1.PersistentVolume{volume("v", "1Gi", "")}}, node: "a", want: framework.Success},
		{name: "waiting: a fitting volume here", node: "a", want: framework.Success, st: &state{
			waiting: []*corev1.PersistentVolumeClaim{waiting("1Gi", "ReadWriteOnce")}, provisioned: []bool{false},
			candidates: []*corev1.PersistentVolume{volume("small", "500Mi", "a", "ReadWriteOnce"), volume("ok", "2Gi", "a", "ReadWriteOnce")}}},
		{name: "waiting: volumes too small, elsewhere or of other modes", node: "a", want: framework.UnschedulableAndUnresolvable, st: &state{
			waiting: []*corev1.PersistentVolumeClaim{waiting("1Gi", "ReadWriteOnce")}, provisioned: []bool{false},
			candidates: []*corev1.PersistentVolume{volume("small", "500Mi", "a", "ReadWriteOnce"), volume("far", "2Gi", "b", "ReadWriteOnce"),
				volume("ro", "2Gi", "a", "ReadOnlyMany")}}},
		{name: "waiting: none fits but the class provisions", node: "a", want: framework.Success, st: &state{
			waiting: []*corev1.PersistentVolumeClaim{waiting("1Gi", "ReadWriteOnce")}, provisioned: []bool{true}}},
		{name: "two claims cannot share one volume", node: "a", want: framework.UnschedulableAndUnresolvable, st: &state{
			waiting:     []*corev1.PersistentVolumeClaim{waiting("1Gi", "ReadWriteOnce"), waiting("1Gi", "ReadWriteOnce")},
			provisioned: []bool{false, false}, candidates: []*corev1.PersistentVolume{volume("one", "2Gi", "a", "ReadWriteOnce")}}},
	}
	p := &Plugin{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := framework.NewCycleState()
			cs.Write(stateKey, tc.st)
			if got := p.Filter(context.Background(), cs, nil, node(tc.node)); got.Code() != tc.want {
				t.Errorf("got %v (%s), want %v", got.Code(), got.Message(), tc.want)
			}
		})
	}
}

func TestPreFilterSkipsPodsWithoutClaims(t *testing.T) {
	p, _ := New(nil, nil)
	pod := &framework.PodInfo{Pod: &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: &corev1.PodSpec{
		Volumes: []*corev1.Volume{{Name: "e", VolumeSource: &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}}}
	if got := p.(*Plugin).PreFilter(context.Background(), framework.NewCycleState(), pod, nil); !got.IsSkip() {
		t.Errorf("got %v, want Skip", got.Code())
	}
}
