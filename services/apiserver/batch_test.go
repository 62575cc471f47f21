// This file holds the tests of a Job's defaults, generated selector and
// template immutability in the API service.

package apiserver

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func testJob(name string, suspend bool) *batchv1.Job {
	return &batchv1.Job{Metadata: om("default", name), Spec: &batchv1.JobSpec{Suspend: proto.Bool(suspend),
		Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
			Spec: &corev1.PodSpec{RestartPolicy: "Never", Containers: []*corev1.Container{{Name: "c", Image: "busybox"}}}}}}
}

// TestJobDefaultsAndSelector: a new Job gets Kubernetes' defaults and, with
// manualSelector unset, the selector and template labels naming it.
func TestJobDefaultsAndSelector(t *testing.T) {
	e := newEnv(t, nil)
	jobs := batchv1.NewJobServiceClient(e.conn)
	resp, err := jobs.CreateJob(admin(t), &batchv1.CreateJobRequest{Namespace: "default", Job: testJob("d", false)})
	if err != nil {
		t.Fatal(err)
	}
	j := resp.GetJob()
	uid := j.GetMetadata().GetUid()
	s := j.GetSpec()
	if s.GetParallelism() != 1 || s.GetCompletions() != 1 || s.GetBackoffLimit() != 6 || s.GetCompletionMode() != "NonIndexed" ||
		s.Suspend == nil || s.ManualSelector == nil || s.GetPodReplacementPolicy() != "TerminatingOrFailed" {
		t.Errorf("defaults: %v", s)
	}
	if got := s.GetSelector().GetMatchLabels(); len(got) != 1 || got["batch.kubernetes.io/controller-uid"] != uid {
		t.Errorf("selector %v, want batch.kubernetes.io/controller-uid=%s", got, uid)
	}
	want := map[string]string{"app": "a", "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
		"batch.kubernetes.io/job-name": "d", "job-name": "d"}
	if got := s.GetTemplate().GetMetadata().GetLabels(); !mapsEqual(got, want) {
		t.Errorf("template labels %v, want %v", got, want)
	}
	// A Job without labels takes its template's as the client sent them
	// (Kubernetes defaults before its strategy adds the generated ones).
	if got := j.GetMetadata().GetLabels(); !mapsEqual(got, map[string]string{"app": "a"}) {
		t.Errorf("labels %v, want app=a", got)
	}
	// Without template labels, the generated ones (as Kubernetes shows
	// them on its next read).
	bare := testJob("bare", false)
	bare.Spec.Template.Metadata = nil
	resp, err = jobs.CreateJob(admin(t), &batchv1.CreateJobRequest{Namespace: "default", Job: bare})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetJob().GetMetadata().GetLabels(); got["batch.kubernetes.io/job-name"] != "bare" || len(got) != 4 {
		t.Errorf("labels of a Job without template labels: %v", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestJobTemplateImmutable: a Job's pod template may not change, but a
// suspended Job that never started may change its scheduling directives,
// labels and annotations, as on Kubernetes.
func TestJobTemplateImmutable(t *testing.T) {
	e := newEnv(t, nil)
	jobs := batchv1.NewJobServiceClient(e.conn)
	ctx := admin(t)
	for _, tc := range []struct {
		name    string
		suspend bool
		change  func(*corev1.PodTemplateSpec)
		wantErr string
	}{
		{name: "image of a running Job", change: func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Image = "alpine" },
			wantErr: "spec.template: Invalid value: "},
		{name: "nodeSelector of a running Job", change: func(p *corev1.PodTemplateSpec) { p.Spec.NodeSelector = map[string]string{"a": "b"} },
			wantErr: "field is immutable"},
		{name: "nodeSelector and tolerations of a suspended Job", suspend: true, change: func(p *corev1.PodTemplateSpec) {
			p.Spec.NodeSelector = map[string]string{"a": "b"}
			p.Spec.Tolerations = []*corev1.Toleration{{Key: "k", Operator: "Exists"}}
			p.Metadata.Annotations = map[string]string{"x": "y"}
		}},
		{name: "image of a suspended Job", suspend: true, change: func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Image = "alpine" },
			wantErr: "field is immutable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ToLower(strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), "a-", ""))
			resp, err := jobs.CreateJob(ctx, &batchv1.CreateJobRequest{Namespace: "default", Job: testJob(name, tc.suspend)})
			if err != nil {
				t.Fatal(err)
			}
			j := resp.GetJob()
			tc.change(j.Spec.Template)
			_, err = jobs.UpdateJob(ctx, &batchv1.UpdateJobRequest{Namespace: "default", Name: name, Job: j})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("update: %v", err)
				}
				return
			}
			se := wantReason(t, err, apierrors.ReasonInvalid)
			if !strings.Contains(se.Message, tc.wantErr) || !strings.HasPrefix(se.Message, `Job.batch "`+name+`" is invalid: spec.template: `) {
				t.Errorf("message %q, want spec.template ... %q", se.Message, tc.wantErr)
			}
		})
	}
}
