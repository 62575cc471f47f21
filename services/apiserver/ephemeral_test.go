// This file holds the API service's tests of a pod's ephemeralcontainers
// subresource: containers added, never changed or removed, the fields an
// ephemeral container may not have, that nothing else of the pod changes
// through it, and Pod Security's look at them.
package apiserver

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

func debugger(name, target string) *corev1.EphemeralContainer {
	return &corev1.EphemeralContainer{TargetContainerName: target,
		EphemeralContainerCommon: &corev1.EphemeralContainerCommon{Name: name, Image: "busybox:1.36", Stdin: true, Tty: true}}
}

func TestPodEphemeralContainers(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	update := func(p *corev1.Pod) (*corev1.Pod, error) {
		resp, err := e.pods.UpdatePodEphemeralContainers(ctx, &corev1.UpdatePodEphemeralContainersRequest{Namespace: "default", Name: "web", Pod: p})
		return resp.GetPod(), err
	}

	// Not on create.
	p := testPod("default", "web")
	p.Spec.EphemeralContainers = []*corev1.EphemeralContainer{debugger("dbg", "c")}
	_, err := e.pods.CreatePod(ctx, &corev1.CreatePodRequest{Namespace: "default", Pod: p})
	if se := wantReason(t, err, apierrors.ReasonInvalid); len(se.Causes) != 1 || se.Causes[0].Field != "spec.ephemeralContainers" ||
		!strings.Contains(se.Causes[0].Message, "cannot be set on create") {
		t.Errorf("create with an ephemeral container: got %+v", se)
	}
	created := mustCreatePod(t, e, testPod("default", "web"))

	// Added: defaulted, generation bumped, nothing else of the request
	// written (its labels, its containers' images).
	req := proto.Clone(created).(*corev1.Pod)
	req.Metadata.Labels = map[string]string{"sneaky": "yes"}
	req.Spec.Containers[0].Image = "nginx:1.28"
	req.Spec.EphemeralContainers = []*corev1.EphemeralContainer{debugger("dbg", "c")}
	got, err := update(req)
	if err != nil {
		t.Fatal(err)
	}
	ec := got.GetSpec().GetEphemeralContainers()
	if len(ec) != 1 || ec[0].GetEphemeralContainerCommon().GetImagePullPolicy() != "IfNotPresent" ||
		ec[0].GetEphemeralContainerCommon().GetTerminationMessagePolicy() != "File" || ec[0].GetTargetContainerName() != "c" {
		t.Errorf("after adding dbg: ephemeral containers %v, want dbg defaulted, targeting c", ec)
	}
	if got.GetMetadata().GetGeneration() != created.GetMetadata().GetGeneration()+1 || got.GetMetadata().GetLabels()["sneaky"] != "" ||
		got.GetSpec().GetContainers()[0].GetImage() != "nginx:1.27" {
		t.Errorf("after adding dbg: generation %d, labels %v, image %s; want the generation bumped and nothing else written",
			got.GetMetadata().GetGeneration(), got.GetMetadata().GetLabels(), got.GetSpec().GetContainers()[0].GetImage())
	}

	// Changed or removed: Forbidden, in Kubernetes' words.
	changed := proto.Clone(got).(*corev1.Pod)
	changed.Spec.EphemeralContainers[0].EphemeralContainerCommon.Image = "busybox:1.37"
	_, err = update(changed)
	if se := wantReason(t, err, apierrors.ReasonInvalid); len(se.Causes) != 1 || se.Causes[0].Field != "spec.ephemeralContainers" ||
		!strings.HasPrefix(se.Causes[0].Message, `Forbidden: existing ephemeral containers "dbg" may not be changed`) {
		t.Errorf("changing dbg: got %+v", se)
	}
	removed := proto.Clone(got).(*corev1.Pod)
	removed.Spec.EphemeralContainers = []*corev1.EphemeralContainer{debugger("dbg2", "")}
	_, err = update(removed)
	if se := wantReason(t, err, apierrors.ReasonInvalid); len(se.Causes) != 1 ||
		!strings.HasPrefix(se.Causes[0].Message, `Forbidden: existing ephemeral containers "dbg" may not be removed`) {
		t.Errorf("removing dbg: got %+v", se)
	}

	// What an ephemeral container may not have, a name taken, a target
	// that is not there: every violation at once.
	bad := proto.Clone(got).(*corev1.Pod)
	b := debugger("c", "nope")
	b.EphemeralContainerCommon.Ports = []*corev1.ContainerPort{{ContainerPort: 80}}
	b.EphemeralContainerCommon.ReadinessProbe = &corev1.Probe{}
	b.EphemeralContainerCommon.VolumeMounts = []*corev1.VolumeMount{{Name: "v", MountPath: "/v", SubPath: "x"}}
	bad.Spec.EphemeralContainers = append(bad.Spec.EphemeralContainers, b)
	_, err = update(bad)
	se := wantReason(t, err, apierrors.ReasonInvalid)
	var fields []string
	for _, c := range se.Causes {
		fields = append(fields, c.Field)
	}
	for _, want := range []string{"spec.ephemeralContainers[1].name", "spec.ephemeralContainers[1].targetContainerName",
		"spec.ephemeralContainers[1].ports", "spec.ephemeralContainers[1].readinessProbe", "spec.ephemeralContainers[1].volumeMounts[0].subPath"} {
		if !strings.Contains(strings.Join(fields, " "), want) {
			t.Errorf("invalid ephemeral container: no cause at %s in %v", want, se.Causes)
		}
	}

	// The pod itself may not change them.
	pod := proto.Clone(got).(*corev1.Pod)
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, debugger("dbg3", ""))
	_, err = e.pods.UpdatePod(ctx, &corev1.UpdatePodRequest{Namespace: "default", Name: "web", Pod: pod})
	if se := wantReason(t, err, apierrors.ReasonInvalid); len(se.Causes) != 1 || !strings.Contains(se.Causes[0].Message, "pod updates may not change fields") {
		t.Errorf("adding an ephemeral container through the pod: got %+v", se)
	}

	// Pod Security looks at ephemeral containers: a privileged one is
	// refused where baseline is enforced.
	psaNamespace(t, e, "guarded", map[string]string{"pod-security.kubernetes.io/enforce": "baseline"})
	gp := mustCreatePod(t, e, testPod("guarded", "web"))
	priv := debugger("root", "c")
	priv.EphemeralContainerCommon.SecurityContext = &corev1.SecurityContext{Privileged: proto.Bool(true)}
	gp.Spec.EphemeralContainers = []*corev1.EphemeralContainer{priv}
	_, err = e.pods.UpdatePodEphemeralContainers(ctx, &corev1.UpdatePodEphemeralContainersRequest{Namespace: "guarded", Name: "web", Pod: gp})
	if se := wantReason(t, err, apierrors.ReasonForbidden); !strings.Contains(se.Message, `violates PodSecurity "baseline:latest": privileged`) {
		t.Errorf("a privileged ephemeral container under baseline: got %q", se.Message)
	}
}
