// This file holds the test that the Env's API service runs the
// DefaultTolerationSeconds admission plugin, as Kubernetes enables it by
// default.

package apiservertest

import (
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/defaulttolerationseconds"
)

// TestDefaultTolerationSecondsWired: the Env's API service runs the
// DefaultTolerationSeconds admission plugin, as Kubernetes enables it by
// default: a pod without tolerations of the not-ready and unreachable
// NoExecute taints gets both for 300 s; a pod with its own keeps it.
func TestDefaultTolerationSecondsWired(t *testing.T) {
	env := Start(t, Options{})
	pods := corev1.NewPodServiceClient(env.Dial(t, AdminToken))
	create := func(name string, tols ...*corev1.Toleration) []*corev1.Toleration {
		t.Helper()
		r, err := pods.CreatePod(ctxT(t), &corev1.CreatePodRequest{Namespace: "default", Pod: &corev1.Pod{
			Metadata: &metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec:     &corev1.PodSpec{Tolerations: tols, Containers: []*corev1.Container{{Name: "c", Image: "busybox"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetPod().GetSpec().GetTolerations()
	}
	seconds := func(tols []*corev1.Toleration, key string) (int64, bool) {
		for _, tol := range tols {
			if tol.GetKey() == key && tol.GetEffect() == "NoExecute" && tol.GetOperator() == "Exists" {
				return tol.GetTolerationSeconds(), tol.TolerationSeconds != nil
			}
		}
		return 0, false
	}
	tols := create("plain")
	for _, key := range []string{defaulttolerationseconds.TaintNotReady, defaulttolerationseconds.TaintUnreachable} {
		if s, ok := seconds(tols, key); !ok || s != defaulttolerationseconds.DefaultSeconds {
			t.Errorf("pod without tolerations: %s got %v (set %v), want %d s; tolerations %v", key, s, ok, defaulttolerationseconds.DefaultSeconds, tols)
		}
	}
	own := int64(5)
	tols = create("own", &corev1.Toleration{Key: defaulttolerationseconds.TaintUnreachable, Operator: "Exists", Effect: "NoExecute", TolerationSeconds: &own})
	if s, _ := seconds(tols, defaulttolerationseconds.TaintUnreachable); s != own || len(tols) != 2 {
		t.Errorf("pod with its own unreachable toleration: got %v, want it kept (5 s) and not-ready added", tols)
	}
}
