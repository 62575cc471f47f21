// This file holds the tests of the DefaultTolerationSeconds admission
// plugin: the not-ready and unreachable tolerations a pod gets, and their
// seconds.

package defaulttolerationseconds

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

func TestAdmit(t *testing.T) {
	tol := func(key, op, effect string, secs *int64) *corev1.Toleration {
		return &corev1.Toleration{Key: key, Operator: op, Effect: effect, TolerationSeconds: secs}
	}
	notReady := tol(TaintNotReady, "Exists", "NoExecute", proto.Int64(300))
	unreachable := tol(TaintUnreachable, "Exists", "NoExecute", proto.Int64(300))
	create := request.Attributes{Resource: "pods"}
	for _, tc := range []struct {
		name  string
		attrs request.Attributes
		op    request.Operation
		in    []*corev1.Toleration
		want  []*corev1.Toleration
	}{
		{name: "none: both added", attrs: create, op: request.Create, want: []*corev1.Toleration{notReady, unreachable}},
		{name: "own not-ready toleration kept, unreachable added", attrs: create, op: request.Create,
			in:   []*corev1.Toleration{tol(TaintNotReady, "Exists", "NoExecute", proto.Int64(5))},
			want: []*corev1.Toleration{tol(TaintNotReady, "Exists", "NoExecute", proto.Int64(5)), unreachable}},
		{name: "own unreachable toleration without seconds kept", attrs: create, op: request.Create,
			in:   []*corev1.Toleration{tol(TaintUnreachable, "Exists", "", nil)},
			want: []*corev1.Toleration{tol(TaintUnreachable, "Exists", "", nil), notReady}},
		{name: "empty key tolerates both", attrs: create, op: request.Create,
			in:   []*corev1.Toleration{tol("", "Exists", "NoExecute", nil)},
			want: []*corev1.Toleration{tol("", "Exists", "NoExecute", nil)}},
		{name: "empty key and effect tolerates both", attrs: create, op: request.Create,
			in:   []*corev1.Toleration{tol("", "Exists", "", nil)},
			want: []*corev1.Toleration{tol("", "Exists", "", nil)}},
		{name: "NoSchedule toleration of the taint does not count", attrs: create, op: request.Create,
			in:   []*corev1.Toleration{tol(TaintNotReady, "Exists", "NoSchedule", nil)},
			want: []*corev1.Toleration{tol(TaintNotReady, "Exists", "NoSchedule", nil), notReady, unreachable}},
		{name: "other taints do not count", attrs: create, op: request.Create,
			in:   []*corev1.Toleration{tol("example.com/gpu", "Exists", "NoExecute", nil)},
			want: []*corev1.Toleration{tol("example.com/gpu", "Exists", "NoExecute", nil), notReady, unreachable}},
		{name: "update untouched", attrs: create, op: request.Update},
		{name: "status subresource untouched", attrs: request.Attributes{Resource: "pods", Subresource: "status"}, op: request.Create},
		{name: "other resources untouched", attrs: request.Attributes{Resource: "configmaps"}, op: request.Create},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: &corev1.PodSpec{Tolerations: tc.in}}
			a := &request.Admission{Attributes: tc.attrs, Operation: tc.op, Object: pod}
			if err := New(300, 300).Admit(context.Background(), a); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, pod.GetSpec().GetTolerations(), protocmp.Transform()); diff != "" {
				t.Errorf("tolerations (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSeconds: each taint gets its own configured seconds.
func TestSeconds(t *testing.T) {
	pod := &corev1.Pod{}
	a := &request.Admission{Attributes: request.Attributes{Resource: "pods"}, Operation: request.Create, Object: pod}
	if err := New(60, 120).Admit(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, tl := range pod.GetSpec().GetTolerations() {
		got[tl.GetKey()] = tl.GetTolerationSeconds()
	}
	if got[TaintNotReady] != 60 || got[TaintUnreachable] != 120 {
		t.Errorf("got %v, want not-ready 60, unreachable 120", got)
	}
}
