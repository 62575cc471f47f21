// Tests of the plugin's decisions: the default ServiceAccount, a missing
// one refused, automount on the pod and on the ServiceAccount, the token
// volume and its mounts.

package serviceaccountadmission

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

func TestAdmit(t *testing.T) {
	p := New(true)
	p.wait = 0
	p.Upsert(&corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "default"}})
	p.Upsert(&corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "quiet"}, AutomountServiceAccountToken: proto.Bool(false)})
	pod := func(mod func(*corev1.PodSpec)) *corev1.Pod {
		s := &corev1.PodSpec{
			InitContainers: []*corev1.Container{{Name: "init"}},
			Containers:     []*corev1.Container{{Name: "a"}, {Name: "b"}},
		}
		if mod != nil {
			mod(s)
		}
		return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: s}
	}
	tests := []struct {
		name      string
		pod       *corev1.Pod
		wantSA    string
		wantMount bool
		wantErr   string
	}{
		{name: "default ServiceAccount, token mounted", pod: pod(nil), wantSA: "default", wantMount: true},
		{name: "missing ServiceAccount", pod: pod(func(s *corev1.PodSpec) { s.ServiceAccountName = "ghost" }),
			wantErr: `pods "p" is forbidden: error looking up service account ns/ghost: serviceaccount "ghost" not found`},
		{name: "ServiceAccount turns automount off", pod: pod(func(s *corev1.PodSpec) { s.ServiceAccountName = "quiet" }), wantSA: "quiet"},
		{name: "pod turns it back on", pod: pod(func(s *corev1.PodSpec) {
			s.ServiceAccountName, s.AutomountServiceAccountToken = "quiet", proto.Bool(true)
		}), wantSA: "quiet", wantMount: true},
		{name: "the deprecated serviceAccount alias", pod: pod(func(s *corev1.PodSpec) {
			s.DeprecatedServiceAccount, s.AutomountServiceAccountToken = "quiet", proto.Bool(false)
		}), wantSA: "quiet"},
		{name: "pod turns it off", pod: pod(func(s *corev1.PodSpec) { s.AutomountServiceAccountToken = proto.Bool(false) }), wantSA: "default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.Admit(context.Background(), &request.Admission{
				Attributes: request.Attributes{Verb: "create", Resource: "pods", Namespace: "ns", Name: "p"},
				Operation:  request.Create, Object: tt.pod})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr || !apierrors.IsForbidden(err) {
					t.Fatalf("got %v, want Forbidden %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := tt.pod.Spec
			if s.ServiceAccountName != tt.wantSA || s.DeprecatedServiceAccount != tt.wantSA {
				t.Errorf("serviceAccountName, serviceAccount: got %q, %q, want %q", s.ServiceAccountName, s.DeprecatedServiceAccount, tt.wantSA)
			}
			if !tt.wantMount {
				if len(s.Volumes) != 0 {
					t.Errorf("volumes: got %v, want none", s.Volumes)
				}
				return
			}
			if len(s.Volumes) != 1 || !strings.HasPrefix(s.Volumes[0].Name, VolumeNamePrefix) || len(s.Volumes[0].Name) != len(VolumeNamePrefix)+5 {
				t.Fatalf("volumes: got %v, want one kube-api-access-xxxxx", s.Volumes)
			}
			src := s.Volumes[0].GetVolumeSource().GetProjected().GetSources()
			if len(src) != 3 || src[0].GetServiceAccountToken().GetExpirationSeconds() != 3607 || src[0].GetServiceAccountToken().GetPath() != "token" ||
				src[1].GetConfigMap().GetLocalObjectReference().GetName() != RootCAConfigMap || src[2].GetDownwardApi().GetItems()[0].GetFieldRef().GetFieldPath() != "metadata.namespace" {
				t.Errorf("projected sources: got %v", src)
			}
			for _, c := range append(append([]*corev1.Container(nil), s.InitContainers...), s.Containers...) {
				if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != MountPath || !c.VolumeMounts[0].ReadOnly || c.VolumeMounts[0].Name != s.Volumes[0].Name {
					t.Errorf("container %s mounts: got %v", c.Name, c.VolumeMounts)
				}
			}
		})
	}

	// Without a token issuer no volume is added (no node could fill it).
	noIssuer := New(false)
	noIssuer.Upsert(&corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "default"}})
	plain := pod(nil)
	if err := noIssuer.Admit(context.Background(), &request.Admission{Attributes: request.Attributes{Resource: "pods", Namespace: "ns"}, Operation: request.Create, Object: plain}); err != nil {
		t.Fatal(err)
	}
	if plain.Spec.ServiceAccountName != "default" || len(plain.Spec.Volumes) != 0 {
		t.Errorf("without an issuer: got serviceAccountName %q, volumes %v", plain.Spec.ServiceAccountName, plain.Spec.Volumes)
	}

	// A container with its own mount at the path keeps it; the others get
	// the volume.
	own := pod(func(s *corev1.PodSpec) {
		s.Volumes = []*corev1.Volume{{Name: "mine"}}
		s.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: "mine", MountPath: MountPath}}
	})
	if err := p.Admit(context.Background(), &request.Admission{Attributes: request.Attributes{Resource: "pods", Namespace: "ns"}, Operation: request.Create, Object: own}); err != nil {
		t.Fatal(err)
	}
	if got := own.Spec.Containers[0].VolumeMounts; len(got) != 1 || got[0].Name != "mine" {
		t.Errorf("container with its own mount: got %v", got)
	}
	if got := own.Spec.Containers[1].VolumeMounts; len(got) != 1 || !strings.HasPrefix(got[0].Name, VolumeNamePrefix) {
		t.Errorf("other container: got %v", got)
	}
	if len(own.Spec.Volumes) != 2 {
		t.Errorf("volumes: got %d, want 2", len(own.Spec.Volumes))
	}
}
