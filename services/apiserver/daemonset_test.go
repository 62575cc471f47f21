// This file holds the API service's tests of DaemonSet and
// ControllerRevision: Kubernetes' defaults, the template generation and
// generation bumps, the status subresource, and validation with the
// messages kube-apiserver v1.33.13 answered for the same objects.
package apiserver

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func testDaemonSet(name string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{Metadata: om("default", name), Spec: &appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
		Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}}}}}
}

func intVal(v int32) *metav1.IntOrString {
	return &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: v}}
}
func strVal(v string) *metav1.IntOrString {
	return &metav1.IntOrString{Value: &metav1.IntOrString_StrVal{StrVal: v}}
}

func TestDaemonSetDefaultsGenerationStatus(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dss := appsv1.NewDaemonSetServiceClient(e.conn)

	in := testDaemonSet("ok")
	in.Status = &appsv1.DaemonSetStatus{NumberReady: 4}
	cr, err := dss.CreateDaemonSet(ctx, &appsv1.CreateDaemonSetRequest{Namespace: "default", DaemonSet: in})
	if err != nil {
		t.Fatal(err)
	}
	got := cr.GetDaemonSet()
	ru := got.GetSpec().GetUpdateStrategy().GetRollingUpdate()
	if got.GetSpec().GetUpdateStrategy().GetType() != "RollingUpdate" || !proto.Equal(ru.GetMaxUnavailable(), intVal(1)) || !proto.Equal(ru.GetMaxSurge(), intVal(0)) {
		t.Errorf("updateStrategy: got %v, want RollingUpdate maxUnavailable 1 maxSurge 0", got.GetSpec().GetUpdateStrategy())
	}
	if got.GetSpec().GetRevisionHistoryLimit() != 10 || got.GetSpec().GetTemplate().GetSpec().GetRestartPolicy() != "Always" {
		t.Errorf("revisionHistoryLimit %d, restartPolicy %q: want 10, Always", got.GetSpec().GetRevisionHistoryLimit(), got.GetSpec().GetTemplate().GetSpec().GetRestartPolicy())
	}
	if got.GetStatus().GetNumberReady() != 0 || got.GetMetadata().GetGeneration() != 1 {
		t.Errorf("status %v, generation %d: want an empty status and generation 1", got.GetStatus(), got.GetMetadata().GetGeneration())
	}
	if a := got.GetMetadata().GetAnnotations()[templateGenerationAnnotation]; a != "1" {
		t.Errorf("template generation annotation: got %q, want 1", a)
	}

	// A spec change outside the template bumps generation only; a
	// template change bumps the template generation too.
	upd := proto.Clone(got).(*appsv1.DaemonSet)
	upd.Spec.MinReadySeconds = 5
	ur, err := dss.UpdateDaemonSet(ctx, &appsv1.UpdateDaemonSetRequest{Namespace: "default", Name: "ok", DaemonSet: upd})
	if err != nil {
		t.Fatal(err)
	}
	got = ur.GetDaemonSet()
	if got.GetMetadata().GetGeneration() != 2 || got.GetMetadata().GetAnnotations()[templateGenerationAnnotation] != "1" {
		t.Errorf("after minReadySeconds: generation %d, template generation %q; want 2, 1", got.GetMetadata().GetGeneration(), got.GetMetadata().GetAnnotations()[templateGenerationAnnotation])
	}
	upd = proto.Clone(got).(*appsv1.DaemonSet)
	upd.Spec.Template.Spec.Containers[0].Image = "nginx:2"
	upd.Metadata.Annotations[templateGenerationAnnotation] = "7"
	ur, err = dss.UpdateDaemonSet(ctx, &appsv1.UpdateDaemonSetRequest{Namespace: "default", Name: "ok", DaemonSet: upd})
	if err != nil {
		t.Fatal(err)
	}
	got = ur.GetDaemonSet()
	if got.GetMetadata().GetGeneration() != 3 || got.GetMetadata().GetAnnotations()[templateGenerationAnnotation] != "2" {
		t.Errorf("after image: generation %d, template generation %q; want 3, 2", got.GetMetadata().GetGeneration(), got.GetMetadata().GetAnnotations()[templateGenerationAnnotation])
	}

	// The status subresource writes status; a negative count is refused.
	upd = proto.Clone(got).(*appsv1.DaemonSet)
	upd.Status = &appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, NumberReady: 1, ObservedGeneration: 3, CollisionCount: proto.Int32(1)}
	sr, err := dss.UpdateDaemonSetStatus(ctx, &appsv1.UpdateDaemonSetStatusRequest{Namespace: "default", Name: "ok", DaemonSet: upd})
	if err != nil {
		t.Fatal(err)
	}
	if sr.GetDaemonSet().GetStatus().GetDesiredNumberScheduled() != 2 || sr.GetDaemonSet().GetMetadata().GetGeneration() != 3 {
		t.Errorf("status write: got %v", sr.GetDaemonSet().GetStatus())
	}
	upd = proto.Clone(sr.GetDaemonSet()).(*appsv1.DaemonSet)
	upd.Status.NumberReady = -1
	upd.Status.CollisionCount = proto.Int32(0)
	_, err = dss.UpdateDaemonSetStatus(ctx, &appsv1.UpdateDaemonSetStatusRequest{Namespace: "default", Name: "ok", DaemonSet: upd})
	se := wantReason(t, err, apierrors.ReasonInvalid)
	if want := `DaemonSet.apps "ok" is invalid: [status.numberReady: Invalid value: -1: must be greater than or equal to 0, status.collisionCount: Invalid value: 0: cannot be decremented]`; se.Message != want {
		t.Errorf("status message\n got %q\nwant %q", se.Message, want)
	}

	// The selector is immutable.
	upd = proto.Clone(sr.GetDaemonSet()).(*appsv1.DaemonSet)
	upd.Spec.Selector.MatchLabels = map[string]string{"app": "z"}
	upd.Spec.Template.Metadata.Labels = map[string]string{"app": "z"}
	_, err = dss.UpdateDaemonSet(ctx, &appsv1.UpdateDaemonSetRequest{Namespace: "default", Name: "ok", DaemonSet: upd})
	se = wantReason(t, err, apierrors.ReasonInvalid)
	if want := `DaemonSet.apps "ok" is invalid: spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"z"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable`; se.Message != want {
		t.Errorf("immutable selector message\n got %q\nwant %q", se.Message, want)
	}
}

// TestDaemonSetValidationMatchesKubernetes: the messages are those
// kube-apiserver v1.33.13 answered for the same objects.
func TestDaemonSetValidationMatchesKubernetes(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dss := appsv1.NewDaemonSetServiceClient(e.conn)
	for _, tc := range []struct {
		name   string
		mutate func(*appsv1.DaemonSet)
		want   string
	}{
		{"nosel", func(d *appsv1.DaemonSet) { d.Spec.Selector = nil },
			`DaemonSet.apps "nosel" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{"app":"x"}: ` + "`selector` does not match template `labels`"},
		{"mismatch", func(d *appsv1.DaemonSet) { d.Spec.Selector.MatchLabels = map[string]string{"app": "y"} },
			`DaemonSet.apps "mismatch" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{"app":"x"}: ` + "`selector` does not match template `labels`"},
		{"empty", func(d *appsv1.DaemonSet) { d.Spec.Selector = &metav1.LabelSelector{} },
			`DaemonSet.apps "empty" is invalid: spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for daemonset`},
		{"bothzero", func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy = &appsv1.DaemonSetUpdateStrategy{Type: "RollingUpdate", RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: intVal(0), MaxSurge: intVal(0)}}
		}, `DaemonSet.apps "bothzero" is invalid: spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0`},
		{"bothset", func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy = &appsv1.DaemonSetUpdateStrategy{Type: "RollingUpdate", RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: intVal(1), MaxSurge: strVal("20%")}}
		}, `DaemonSet.apps "bothset" is invalid: spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"20%"}: may not be set when maxUnavailable is non-zero`},
		{"pct", func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy = &appsv1.DaemonSetUpdateStrategy{Type: "RollingUpdate", RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: strVal("150%"), MaxSurge: strVal("abc")}}
		}, `DaemonSet.apps "pct" is invalid: [spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"abc"}: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%'), spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"150%"}: must not be greater than 100%]`},
		{"neg", func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy = &appsv1.DaemonSetUpdateStrategy{Type: "RollingUpdate", RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: intVal(-1)}}
		}, `DaemonSet.apps "neg" is invalid: spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: -1: must be greater than or equal to 0`},
		{"badtype", func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy = &appsv1.DaemonSetUpdateStrategy{Type: "Recreate"}
			d.Spec.RevisionHistoryLimit = proto.Int32(-1)
			d.Spec.MinReadySeconds = -2
			d.Spec.Template.Spec.RestartPolicy = "Never"
			d.Spec.Template.Spec.ActiveDeadlineSeconds = proto.Int64(5)
		}, `DaemonSet.apps "badtype" is invalid: [spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always", spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in DaemonSet is not Supported, spec.minReadySeconds: Invalid value: -2: must be greater than or equal to 0, spec.updateStrategy: Unsupported value: apps.DaemonSetUpdateStrategy{Type:"Recreate", RollingUpdate:(*apps.RollingUpdateDaemonSet)(nil)}: supported values: "RollingUpdate", "OnDelete", spec.revisionHistoryLimit: Invalid value: -1: must be greater than or equal to 0]`},
		{"ondelete", func(d *appsv1.DaemonSet) { d.Spec.UpdateStrategy = &appsv1.DaemonSetUpdateStrategy{Type: "OnDelete"} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testDaemonSet(tc.name)
			tc.mutate(d)
			_, err := dss.CreateDaemonSet(ctx, &appsv1.CreateDaemonSetRequest{Namespace: "default", DaemonSet: d})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			se := wantReason(t, err, apierrors.ReasonInvalid)
			if se.Message != tc.want {
				t.Errorf("message\n got %q\nwant %q", se.Message, tc.want)
			}
		})
	}
}

func TestControllerRevisionDataRequiredAndImmutable(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	crs := appsv1.NewControllerRevisionServiceClient(e.conn)
	_, err := crs.CreateControllerRevision(ctx, &appsv1.CreateControllerRevisionRequest{Namespace: "default",
		ControllerRevision: &appsv1.ControllerRevision{Metadata: om("default", "nodata"), Revision: 1}})
	se := wantReason(t, err, apierrors.ReasonInvalid)
	if want := `ControllerRevision.apps "nodata" is invalid: data: Required value: data is mandatory`; se.Message != want {
		t.Errorf("message\n got %q\nwant %q", se.Message, want)
	}
	cr, err := crs.CreateControllerRevision(ctx, &appsv1.CreateControllerRevisionRequest{Namespace: "default",
		ControllerRevision: &appsv1.ControllerRevision{Metadata: om("default", "r1"), Revision: 1, Data: &metav1.RawExtension{Raw: []byte(`{"spec":{}}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	upd := proto.Clone(cr.GetControllerRevision()).(*appsv1.ControllerRevision)
	upd.Data.Raw = []byte(`{"spec":{"x":1}}`)
	_, err = crs.UpdateControllerRevision(ctx, &appsv1.UpdateControllerRevisionRequest{Namespace: "default", Name: "r1", ControllerRevision: upd})
	wantReason(t, err, apierrors.ReasonInvalid)
	upd = proto.Clone(cr.GetControllerRevision()).(*appsv1.ControllerRevision)
	upd.Revision = 2
	if _, err := crs.UpdateControllerRevision(ctx, &appsv1.UpdateControllerRevisionRequest{Namespace: "default", Name: "r1", ControllerRevision: upd}); err != nil {
		t.Errorf("revision update (kubectl rollout undo's): %v", err)
	}
}
