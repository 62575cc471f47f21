// This file holds the unit test of how long a pod tolerates a node's
// NoExecute taints, as Kubernetes' taint eviction decides it.
package nodelifecycle

import (
	"testing"

	"google.golang.org/protobuf/proto"
	k8scorev1 "k8s.io/api/core/v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

func TestTolerationTime(t *testing.T) {
	unreachable := k8scorev1.Taint{Key: UnreachableKey, Effect: k8scorev1.TaintEffectNoExecute}
	dedicated := k8scorev1.Taint{Key: "dedicated", Value: "db", Effect: k8scorev1.TaintEffectNoExecute}
	for _, tc := range []struct {
		name   string
		taints []k8scorev1.Taint
		tols   []*corev1.Toleration
		want   int64
		wantOK bool
	}{
		{name: "unreachable, none: the default", taints: []k8scorev1.Taint{unreachable}, want: 300, wantOK: true},
		{name: "unreachable, own seconds", taints: []k8scorev1.Taint{unreachable}, tols: []*corev1.Toleration{{Key: UnreachableKey, Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(5)}}, want: 5, wantOK: true},
		{name: "unreachable, no seconds: forever", taints: []k8scorev1.Taint{unreachable}, tols: []*corev1.Toleration{{Key: UnreachableKey, Operator: "Exists", Effect: "NoExecute"}}, want: -1, wantOK: true},
		{name: "wildcard Exists", taints: []k8scorev1.Taint{unreachable, dedicated}, tols: []*corev1.Toleration{{Operator: "Exists"}}, want: -1, wantOK: true},
		{name: "other key ignored", taints: []k8scorev1.Taint{unreachable}, tols: []*corev1.Toleration{{Key: NotReadyKey, Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(1)}}, want: 300, wantOK: true},
		{name: "NoSchedule toleration ignored", taints: []k8scorev1.Taint{unreachable}, tols: []*corev1.Toleration{{Key: UnreachableKey, Operator: "Exists", Effect: "NoSchedule"}}, want: 300, wantOK: true},
		{name: "user taint, none: evicted now", taints: []k8scorev1.Taint{dedicated}, wantOK: false},
		{name: "user taint, wrong value", taints: []k8scorev1.Taint{dedicated}, tols: []*corev1.Toleration{{Key: "dedicated", Value: "web", Effect: "NoExecute"}}, wantOK: false},
		{name: "user taint, Equal", taints: []k8scorev1.Taint{dedicated}, tols: []*corev1.Toleration{{Key: "dedicated", Operator: "Equal", Value: "db", TolerationSeconds: proto.Int64(30)}}, want: 30, wantOK: true},
		{name: "two taints: the shortest", taints: []k8scorev1.Taint{unreachable, dedicated}, tols: []*corev1.Toleration{
			{Key: "dedicated", Operator: "Exists", TolerationSeconds: proto.Int64(30)}, {Key: UnreachableKey, Operator: "Exists", TolerationSeconds: proto.Int64(10)}}, want: 10, wantOK: true},
		{name: "negative seconds: now", taints: []k8scorev1.Taint{dedicated}, tols: []*corev1.Toleration{{Key: "dedicated", Operator: "Exists", TolerationSeconds: proto.Int64(-5)}}, want: 0, wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: &corev1.PodSpec{Tolerations: tc.tols}}
			got, ok := tolerationTime(p, tc.taints, 300)
			if ok != tc.wantOK || (ok && got != tc.want) {
				t.Errorf("got %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
