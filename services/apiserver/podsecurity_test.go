// This file holds the API service's tests of the PodSecurity admission
// plugin: refusals with Kubernetes' message, warn-only namespaces, warnings
// on workloads and on a stricter namespace label, invalid labels, dry runs,
// exemptions from the configuration and audit annotations.
package apiserver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/net"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/audit"
	"github.com/kplane/kplane/services/apiserver/podsecurity"
)

// restrictedViolations is what Kubernetes lists for testPod's container
// under the restricted level.
const restrictedViolations = `allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), ` +
	`unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), ` +
	`runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), ` +
	`seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`

func psaNamespace(t *testing.T, e *env, name string, labels map[string]string) {
	t.Helper()
	if _, err := e.ns.CreateNamespace(admin(t), &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{
		Metadata: &metav1.ObjectMeta{Name: name, Labels: labels}}}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, e, "namespaces", "", name)
}

func privilegedPod(ns, name string) *corev1.Pod {
	p := testPod(ns, name)
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: proto.Bool(true)}
	return p
}

func restrictedPod(ns, name string) *corev1.Pod {
	p := testPod(ns, name)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: proto.Bool(true),
		SeccompProfile: &corev1.SeccompProfile{Type: "RuntimeDefault"}}
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: proto.Bool(false),
		Capabilities: &corev1.Capabilities{Drop: []string{"ALL"}}}
	return p
}

// warnings decodes the Warning headers of a response.
func warnings(t *testing.T, md metadata.MD) []string {
	t.Helper()
	var out []string
	for _, v := range md.Get(apierrors.WarningHeader) {
		ws, errs := net.ParseWarningHeaders([]string{v})
		if len(errs) > 0 {
			t.Fatalf("warning header %q: %v", v, errs)
		}
		for _, w := range ws {
			out = append(out, w.Text)
		}
	}
	return out
}

func TestPodSecurityEnforce(t *testing.T) {
	e := newEnv(t, nil)
	psaNamespace(t, e, "locked", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	want := `pods "p" is forbidden: violates PodSecurity "restricted:latest": ` + restrictedViolations
	for _, dry := range []bool{false, true} {
		req := &corev1.CreatePodRequest{Namespace: "locked", Pod: testPod("locked", "p")}
		if dry {
			req.DryRun = []string{"All"}
		}
		_, err := e.pods.CreatePod(admin(t), req)
		se := wantReason(t, err, apierrors.ReasonForbidden)
		if se.Message != want || se.Code != 403 || se.Kind != "pods" || se.Name != "p" {
			t.Errorf("dry run %v: got %d %s %q %q,\nwant 403 pods \"p\" %q", dry, se.Code, se.Kind, se.Name, se.Message, want)
		}
	}
	// A pod that meets the level is admitted; so is the refused one
	// elsewhere, the default level being privileged.
	mustCreatePod(t, e, restrictedPod("locked", "ok"))
	mustCreatePod(t, e, testPod("default", "p"))

}

func TestPodSecurityWarn(t *testing.T) {
	e := newEnv(t, nil)
	psaNamespace(t, e, "warned", map[string]string{
		"pod-security.kubernetes.io/warn": "baseline", "pod-security.kubernetes.io/warn-version": "v1.33"})
	var h metadata.MD
	if _, err := e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "warned", Pod: privilegedPod("warned", "p")}, grpc.Header(&h)); err != nil {
		t.Fatalf("warn only: %v", err)
	}
	want := []string{`would violate PodSecurity "baseline:v1.33": privileged (container "c" must not set securityContext.privileged=true)`}
	if diff := cmp.Diff(want, warnings(t, h)); diff != "" {
		t.Errorf("pod warnings (-want +got):\n%s", diff)
	}

	// Workloads with a pod template get the warning; enforce does not
	// refuse them (their pods are refused instead).
	psaNamespace(t, e, "strict", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	tmpl := privilegedPod("", "")
	d := &appsv1.Deployment{Metadata: om("strict", "web"), Spec: &appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: tmpl.Spec}}}
	h = nil
	if _, err := e.deps.CreateDeployment(admin(t), &appsv1.CreateDeploymentRequest{Namespace: "strict", Deployment: d}, grpc.Header(&h)); err != nil {
		t.Fatalf("deployment: %v", err)
	}
	want = []string{`would violate PodSecurity "restricted:latest": privileged (container "c" must not set securityContext.privileged=true), ` + restrictedViolations}
	if diff := cmp.Diff(want, warnings(t, h)); diff != "" {
		t.Errorf("deployment warnings (-want +got):\n%s", diff)
	}
	// Nothing to say about a workload in an unlabelled namespace.
	h = nil
	d.Metadata = om("default", "web")
	if _, err := e.deps.CreateDeployment(admin(t), &appsv1.CreateDeploymentRequest{Namespace: "default", Deployment: d}, grpc.Header(&h)); err != nil {
		t.Fatal(err)
	}
	if w := warnings(t, h); len(w) != 0 {
		t.Errorf("default namespace: got warnings %q", w)
	}
}

func TestPodSecurityNamespaceLabels(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.ns.CreateNamespace(admin(t), &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{
		Metadata: &metav1.ObjectMeta{Name: "bad", Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "strict", "pod-security.kubernetes.io/warn-version": "1.33"}}}})
	se := wantReason(t, err, apierrors.ReasonInvalid)
	want := `Namespace "bad" is invalid: [metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted, ` +
		`metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: "1.33": must be "latest" or "v1.x"]`
	if se.Message != want || se.Code != 422 {
		t.Errorf("got %d %q,\nwant 422 %q", se.Code, se.Message, want)
	}
	if len(se.Causes) != 2 || se.Causes[0].Field != "metadata.labels[pod-security.kubernetes.io/enforce]" {
		t.Errorf("causes: got %+v", se.Causes)
	}

	// Making the enforce level stricter warns about the pods it would
	// refuse; the change is made.
	psaNamespace(t, e, "apps", nil)
	mustCreatePod(t, e, testPod("apps", "p1"))
	mustCreatePod(t, e, testPod("apps", "p2"))
	mustCreatePod(t, e, restrictedPod("apps", "good"))
	waitCached(t, e, "pods", "apps", "good")
	got, err := e.ns.GetNamespace(admin(t), &corev1.GetNamespaceRequest{Name: "apps"})
	if err != nil {
		t.Fatal(err)
	}
	ns := got.GetNamespace()
	ns.Metadata.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	var h metadata.MD
	if _, err := e.ns.UpdateNamespace(admin(t), &corev1.UpdateNamespaceRequest{Name: "apps", Namespace: ns}, grpc.Header(&h)); err != nil {
		t.Fatalf("label: %v", err)
	}
	wantW := []string{
		`existing pods in namespace "apps" violate the new PodSecurity enforce level "restricted:latest"`,
		`p1 (and 1 other pod): allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile`,
	}
	if diff := cmp.Diff(wantW, warnings(t, h)); diff != "" {
		t.Errorf("label warnings (-want +got):\n%s", diff)
	}
	waitCached(t, e, "namespaces", "", "apps")

	// An update of a pod that changes an image is checked against the new
	// level; one that changes nothing the checks read is not.
	for _, tc := range []struct {
		name    string
		change  func(*corev1.Pod)
		refused bool
	}{
		{name: "labels", change: func(p *corev1.Pod) { p.Metadata.Labels = map[string]string{"tier": "web"} }},
		{name: "image", change: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "nginx:1.28" }, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.pods.GetPod(admin(t), &corev1.GetPodRequest{Namespace: "apps", Name: "p1"})
			if err != nil {
				t.Fatal(err)
			}
			p := got.GetPod()
			tc.change(p)
			_, err = e.pods.UpdatePod(admin(t), &corev1.UpdatePodRequest{Namespace: "apps", Name: "p1", Pod: p})
			if !tc.refused {
				if err != nil {
					t.Fatalf("got %v, want the update made", err)
				}
				return
			}
			want := `pods "p1" is forbidden: violates PodSecurity "restricted:latest": ` + restrictedViolations
			if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != want {
				t.Errorf("got %q,\nwant %q", se.Message, want)
			}
		})
	}

	// An invalid label on an update is refused as on create.
	got, err = e.ns.GetNamespace(admin(t), &corev1.GetNamespaceRequest{Name: "apps"})
	if err != nil {
		t.Fatal(err)
	}
	ns = got.GetNamespace()
	ns.Metadata.Labels["pod-security.kubernetes.io/audit"] = "none"
	_, err = e.ns.UpdateNamespace(admin(t), &corev1.UpdateNamespaceRequest{Name: "apps", Namespace: ns})
	if se := wantReason(t, err, apierrors.ReasonInvalid); !strings.Contains(se.Message, `metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: "none"`) {
		t.Errorf("update: got %q", se.Message)
	}
}

func TestPodSecurityExemptions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "admission.yaml")
	writeFile(t, path, `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      audit: restricted
    exemptions:
      usernames: [trusted]
      namespaces: [tools, sandbox]
      runtimeClasses: [sandboxed]
`)
	cfg, err := podsecurity.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(dir, "audit.log")
	al, err := audit.New(audit.Config{Path: auditPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	e := newEnv(t, func(c *Config) { c.PodSecurity = cfg; c.Auditor = al })
	psaNamespace(t, e, "tools", nil)
	psaNamespace(t, e, "open", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})

	// The default level applies to namespaces without labels.
	var h metadata.MD
	_, err = e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default", Pod: privilegedPod("default", "p")}, grpc.Header(&h))
	if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != `pods "p" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)` {
		t.Errorf("default: got %q", se.Message)
	}
	refusedID := h.Get("audit-id")
	for _, tc := range []struct {
		name, user, ns, runtimeClass, exemption string
	}{
		{name: "namespace", user: "admin", ns: "tools", exemption: "namespace"},
		{name: "user", user: "trusted", ns: "default", exemption: "user"},
		{name: "runtime class", user: "admin", ns: "default", runtimeClass: "sandboxed", exemption: "runtimeClass"},
		{name: "labelled", user: "admin", ns: "open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := privilegedPod(tc.ns, strings.ReplaceAll(tc.name, " ", "-"))
			if tc.runtimeClass != "" {
				p.Spec.RuntimeClassName = proto.String(tc.runtimeClass)
			}
			var h metadata.MD
			if _, err := e.pods.CreatePod(as(t, tc.user), &corev1.CreatePodRequest{Namespace: tc.ns, Pod: p}, grpc.Header(&h)); err != nil {
				t.Fatalf("got %v, want the pod admitted", err)
			}
			id := h.Get("audit-id")
			testutil.EventuallyWithin(t, 5*time.Second, "the audit event", func() bool { return len(id) == 1 && psaAuditAnnotations(t, auditPath)[id[0]] != nil })
			got := psaAuditAnnotations(t, auditPath)[id[0]]
			if tc.exemption != "" {
				if v := got["pod-security.kubernetes.io/exempt"]; v != tc.exemption {
					t.Errorf("exempt annotation: got %q, want %q", v, tc.exemption)
				}
				return
			}
			if v := got["pod-security.kubernetes.io/enforce-policy"]; v != "privileged:latest" {
				t.Errorf("enforce-policy annotation: got %q (all %v)", v, got)
			}
			if v := got["pod-security.kubernetes.io/audit-violations"]; !strings.HasPrefix(v, `would violate PodSecurity "restricted:latest": privileged`) {
				t.Errorf("audit-violations annotation: got %q", v)
			}
		})
	}
	// The refusal's event says which policy refused it.
	testutil.EventuallyWithin(t, 5*time.Second, "the refusal's audit event", func() bool {
		return len(refusedID) == 1 && psaAuditAnnotations(t, auditPath)[refusedID[0]]["pod-security.kubernetes.io/enforce-policy"] == "baseline:latest"
	})

	// A namespace created with an exempt name and a level is told the
	// level is ignored.
	h = nil
	if _, err := e.ns.CreateNamespace(admin(t), &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{
		Metadata: &metav1.ObjectMeta{Name: "sandbox", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}}, grpc.Header(&h)); err != nil {
		t.Fatal(err)
	}
	want := []string{`namespace "sandbox" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored`}
	if diff := cmp.Diff(want, warnings(t, h)); diff != "" {
		t.Errorf("exempt namespace (-want +got):\n%s", diff)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPodSecurityBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admission.yaml")
	writeFile(t, path, `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: strict
`)
	if _, err := podsecurity.LoadConfig(path); err == nil || !strings.Contains(err.Error(), `defaults.enforce: Invalid value: "strict": must be one of privileged, baseline, restricted`) {
		t.Errorf("got %v, want the bad level named", err)
	}
	// Another plugin's configuration would not be acted on: refused.
	writeFile(t, path, `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: EventRateLimit
  path: eventconfig.yaml
`)
	if _, err := podsecurity.LoadConfig(path); err == nil || !strings.Contains(err.Error(), `plugin "EventRateLimit": kplane reads only the PodSecurity plugin's configuration`) {
		t.Errorf("got %v, want the other plugin refused", err)
	}
	// A file with a path to the PodSecurityConfiguration, relative to it.
	writeFile(t, filepath.Join(filepath.Dir(path), "psa.yaml"), `apiVersion: pod-security.admission.config.k8s.io/v1
kind: PodSecurityConfiguration
defaults: {warn: restricted}
`)
	writeFile(t, path, `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  path: psa.yaml
`)
	cfg, err := podsecurity.LoadConfig(path)
	if err != nil || cfg.Defaults.Warn != "restricted" || cfg.Defaults.Enforce != "privileged" {
		t.Errorf("got %+v, %v; want warn restricted, enforce privileged", cfg, err)
	}
}

// psaAuditAnnotations reads the audit log at path: each event's
// annotations by audit ID.
func psaAuditAnnotations(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev struct {
			AuditID     string            `json:"auditID"`
			Annotations map[string]string `json:"annotations"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if len(ev.Annotations) > 0 {
			out[ev.AuditID] = ev.Annotations
		}
	}
	return out
}
