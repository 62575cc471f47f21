package nodelifecycle

import (
	"testing"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

func TestTolerationSeconds(t *testing.T) {
	for _, tc := range []struct {
		name string
		tols []*corev1.Toleration
		want int64
	}{
		{name: "none: the default", want: 300},
		{name: "own seconds", tols: []*corev1.Toleration{{Key: UnreachableKey, Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(5)}}, want: 5},
		{name: "no seconds: forever", tols: []*corev1.Toleration{{Key: UnreachableKey, Operator: "Exists", Effect: "NoExecute"}}, want: -1},
		{name: "wildcard Exists", tols: []*corev1.Toleration{{Operator: "Exists"}}, want: -1},
		{name: "other key ignored", tols: []*corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(1)}}, want: 300},
		{name: "NoSchedule ignored", tols: []*corev1.Toleration{{Key: UnreachableKey, Operator: "Exists", Effect: "NoSchedule"}}, want: 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: &corev1.PodSpec{Tolerations: tc.tols}}
			if got := TolerationSeconds(p, 300); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}
