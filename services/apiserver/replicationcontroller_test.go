// This file holds the API service's tests of ReplicationControllers:
// Kubernetes' defaults, generation and the status and scale subresources,
// and validation with the messages kube-apiserver v1.33.13 answered for the
// same objects.
package apiserver

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func testRC(name string) *corev1.ReplicationController {
	return &corev1.ReplicationController{Metadata: om("default", name), Spec: &corev1.ReplicationControllerSpec{
		Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}}}}}
}

func TestReplicationControllerDefaultsStatusScale(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	rcs := corev1.NewReplicationControllerServiceClient(e.conn)

	// Selector and labels from the template, one replica; own labels kept.
	in := testRC("ok")
	in.Metadata.Labels = map[string]string{"own": "x"}
	in.Status = &corev1.ReplicationControllerStatus{Replicas: 4}
	cr, err := rcs.CreateReplicationController(ctx, &corev1.CreateReplicationControllerRequest{Namespace: "default", ReplicationController: in})
	if err != nil {
		t.Fatal(err)
	}
	got := cr.GetReplicationController()
	if s := got.GetSpec(); s.GetReplicas() != 1 || len(s.GetSelector()) != 1 || s.GetSelector()["app"] != "a" || s.GetTemplate().GetSpec().GetRestartPolicy() != "Always" {
		t.Errorf("spec: got replicas %d selector %v restartPolicy %q; want 1, app=a, Always", s.GetReplicas(), s.GetSelector(), s.GetTemplate().GetSpec().GetRestartPolicy())
	}
	if l := got.GetMetadata().GetLabels(); len(l) != 1 || l["own"] != "x" {
		t.Errorf("labels: got %v, want own=x kept", l)
	}
	if got.GetStatus().GetReplicas() != 0 || got.GetMetadata().GetGeneration() != 1 {
		t.Errorf("status %v, generation %d: want an empty status and generation 1", got.GetStatus(), got.GetMetadata().GetGeneration())
	}
	bare := testRC("bare")
	cr, err = rcs.CreateReplicationController(ctx, &corev1.CreateReplicationControllerRequest{Namespace: "default", ReplicationController: bare})
	if err != nil {
		t.Fatal(err)
	}
	if l := cr.GetReplicationController().GetMetadata().GetLabels(); l["app"] != "a" {
		t.Errorf("labels of an RC without any: got %v, want the template's app=a", l)
	}

	// The scale subresource sets spec.replicas and bumps generation.
	sr, err := rcs.UpdateReplicationControllerScale(ctx, &corev1.UpdateReplicationControllerScaleRequest{Namespace: "default", Name: "ok",
		Scale: &autoscalingv1.Scale{Metadata: &metav1.ObjectMeta{Name: "ok"}, Spec: &autoscalingv1.ScaleSpec{Replicas: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	if sr.GetScale().GetSpec().GetReplicas() != 3 || sr.GetScale().GetStatus().GetSelector() != "app=a" {
		t.Errorf("scale: got %v", sr.GetScale())
	}
	gr, err := rcs.GetReplicationController(ctx, &corev1.GetReplicationControllerRequest{Namespace: "default", Name: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	got = gr.GetReplicationController()
	if got.GetSpec().GetReplicas() != 3 || got.GetMetadata().GetGeneration() != 2 {
		t.Errorf("after scale: replicas %d generation %d; want 3, 2", got.GetSpec().GetReplicas(), got.GetMetadata().GetGeneration())
	}

	// Status is written through the status subresource only, and checked.
	upd := proto.Clone(got).(*corev1.ReplicationController)
	upd.Status = &corev1.ReplicationControllerStatus{Replicas: 3, ReadyReplicas: 2, AvailableReplicas: 2, FullyLabeledReplicas: 3, ObservedGeneration: 2}
	ur, err := rcs.UpdateReplicationControllerStatus(ctx, &corev1.UpdateReplicationControllerStatusRequest{Namespace: "default", Name: "ok", ReplicationController: upd})
	if err != nil {
		t.Fatal(err)
	}
	if st := ur.GetReplicationController().GetStatus(); st.GetReadyReplicas() != 2 || ur.GetReplicationController().GetMetadata().GetGeneration() != 2 {
		t.Errorf("status write: got %v, generation %d", st, ur.GetReplicationController().GetMetadata().GetGeneration())
	}
	upd = proto.Clone(ur.GetReplicationController()).(*corev1.ReplicationController)
	upd.Status = &corev1.ReplicationControllerStatus{Replicas: 1, ReadyReplicas: 2, AvailableReplicas: 3, ObservedGeneration: -1}
	_, err = rcs.UpdateReplicationControllerStatus(ctx, &corev1.UpdateReplicationControllerStatusRequest{Namespace: "default", Name: "ok", ReplicationController: upd})
	se := wantReason(t, err, apierrors.ReasonInvalid)
	if want := `ReplicationController "ok" is invalid: [status.observedGeneration: Invalid value: -1: must be greater than or equal to 0, status.readyReplicas: Invalid value: 2: cannot be greater than status.replicas, status.availableReplicas: Invalid value: 3: cannot be greater than status.replicas, status.availableReplicas: Invalid value: 3: cannot be greater than readyReplicas]`; se.Message != want {
		t.Errorf("status message\n got %q\nwant %q", se.Message, want)
	}
}

// TestReplicationControllerValidationMatchesKubernetes: the messages are
// those kube-apiserver v1.33.13 answered for the same objects.
func TestReplicationControllerValidationMatchesKubernetes(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	rcs := corev1.NewReplicationControllerServiceClient(e.conn)
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.ReplicationController)
		want   string
	}{
		{"mismatch", func(r *corev1.ReplicationController) {
			r.Spec.Selector = map[string]string{"app": "a"}
			r.Spec.Template.Metadata.Labels = map[string]string{"app": "b"}
		}, `ReplicationController "mismatch" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{"app":"b"}: ` + "`selector` does not match template `labels`"},
		{"never", func(r *corev1.ReplicationController) { r.Spec.Template.Spec.RestartPolicy = "Never" },
			`ReplicationController "never" is invalid: spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"`},
		{"negative", func(r *corev1.ReplicationController) {
			r.Spec.Replicas = proto.Int32(-2)
			r.Spec.MinReadySeconds = -1
		}, `ReplicationController "negative" is invalid: [spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0, spec.replicas: Invalid value: -2: must be greater than or equal to 0]`},
		{"notemplate", func(r *corev1.ReplicationController) {
			r.Spec.Selector = map[string]string{"app": "a"}
			r.Spec.Template = nil
		}, `ReplicationController "notemplate" is invalid: spec.template: Required value`},
		{"nolabels", func(r *corev1.ReplicationController) {
			r.Spec.Template.Metadata = nil
			r.Spec.Template.Spec.ActiveDeadlineSeconds = proto.Int64(5)
		}, `ReplicationController "nolabels" is invalid: [spec.selector: Required value, spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicationController is not Supported]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testRC(tc.name)
			tc.mutate(r)
			_, err := rcs.CreateReplicationController(ctx, &corev1.CreateReplicationControllerRequest{Namespace: "default", ReplicationController: r})
			se := wantReason(t, err, apierrors.ReasonInvalid)
			if se.Message != tc.want {
				t.Errorf("message\n got %q\nwant %q", se.Message, tc.want)
			}
		})
	}
}

// TestReplicationControllerDeleteOrphansByDefault: a v1
// ReplicationController deleted without a propagation policy orphans its
// pods, as Kubernetes keeps for compatibility (the orphan finalizer holds
// it until the garbage collector has released them).
func TestReplicationControllerDeleteOrphansByDefault(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	rcs := corev1.NewReplicationControllerServiceClient(e.conn)
	if _, err := rcs.CreateReplicationController(ctx, &corev1.CreateReplicationControllerRequest{Namespace: "default", ReplicationController: testRC("orphaning")}); err != nil {
		t.Fatal(err)
	}
	resp, err := rcs.DeleteReplicationController(ctx, &corev1.DeleteReplicationControllerRequest{Namespace: "default", Name: "orphaning"})
	if err != nil {
		t.Fatal(err)
	}
	m := resp.GetReplicationController().GetMetadata()
	if m.GetDeletionTimestamp() == nil || !slices.Contains(m.GetFinalizers(), "orphan") {
		t.Errorf("deleted without a policy: got %v, want it held by the orphan finalizer", m)
	}
}
