// This file holds the HorizontalPodAutoscaler test with the real kubectl
// (1.27 and 1.33) through the gateway: kubectl 1.33's autoscale creates an
// autoscaling/v2 HorizontalPodAutoscaler for a Deployment, kubectl 1.27's
// an autoscaling/v1 one (a view of the stored v2 object), get hpa prints
// kube-apiserver's columns, get at v1 answers what kube-apiserver answers,
// describe hpa reads it, and a refusal carries Kubernetes' message.
package kubectltest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

func TestKubectlAutoscale(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	admin := env.Dial(t, apiservertest.AdminToken)
	hpas := client.Must[*autoscalingv2.HorizontalPodAutoscaler](admin)
	gwConn := env.Dial(t, "")
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, gwConn, apiservertest.AdminToken, bin)
			kubectl := kubectlRunner(k, 60*time.Second)
			run := func(args ...string) string {
				t.Helper()
				out, err := kubectl("", args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			ns := "x" + strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl."), ".", "")
			run("create", "ns", ns)
			run("-n", ns, "create", "deployment", "web", "--image=kplane.test/web:1")
			autoscale := []string{"-n", ns, "autoscale", "deployment", "web", "--min", "1", "--max", "5", "--cpu-percent", "50"}
			// kubectl 1.27 creates an autoscaling/v1 object, kubectl 1.33
			// an autoscaling/v2 one: both are the one stored autoscaler.
			if out := run(autoscale...); !strings.Contains(out, "horizontalpodautoscaler.autoscaling/web autoscaled") {
				t.Errorf("autoscale: got %q", out)
			}
			h, err := hpas.Get(context.Background(), ns, "web")
			if err != nil {
				t.Fatal(err)
			}
			s := h.GetSpec()
			m := s.GetMetrics()
			if s.GetMinReplicas() != 1 || s.GetMaxReplicas() != 5 || s.GetScaleTargetRef().GetKind() != "Deployment" || s.GetScaleTargetRef().GetName() != "web" ||
				len(m) != 1 || m[0].GetResource().GetName() != "cpu" || m[0].GetResource().GetTarget().GetAverageUtilization() != 50 {
				t.Errorf("stored spec: got %v, want Deployment/web 1..5 at 50%% CPU", s)
			}
			out := run("-n", ns, "get", "hpa")
			for _, want := range []string{"NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE", "Deployment/web", "cpu: <unknown>/50%"} {
				if !strings.Contains(out, want) {
					t.Errorf("get hpa: got %q, want %q in it", out, want)
				}
			}
			// Read at v1 (kubectl resolves the short name hpa to the
			// preferred v2, so the full name), as kube-apiserver answers.
			out = run("-n", ns, "get", "horizontalpodautoscalers.v1.autoscaling", "web", "-o", "yaml")
			if got := yamlBody(out); got != hpaV1YAML {
				t.Errorf("get -o yaml at v1: got\n%s\nwant\n%s", got, hpaV1YAML)
			}
			if !strings.Contains(out, "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\n") {
				t.Errorf("get -o yaml at v1: got %q, want autoscaling/v1", out)
			}
			if bin == "kubectl.1.27" {
				// kubectl-autoscale's fields are owned at v1, as on Kubernetes.
				out = run("get", "--raw", "/apis/autoscaling/v2/namespaces/"+ns+"/horizontalpodautoscalers/web")
				for _, want := range []string{`"manager":"kubectl-autoscale"`, `"apiVersion":"autoscaling/v1","fieldsType":"FieldsV1"`,
					`"fieldsV1":{"f:spec":{"f:maxReplicas":{},"f:minReplicas":{},"f:scaleTargetRef":{},"f:targetCPUUtilizationPercentage":{}}}`} {
					if !strings.Contains(out, want) {
						t.Errorf("managedFields: got %s, want %s in it", out, want)
					}
				}
			}
			out = run("-n", ns, "describe", "hpa", "web")
			for _, want := range []string{"Reference:", "Deployment/web", "Min replicas:", "Max replicas:", "resource cpu on pods  (as a percentage of request):  <unknown> / 50%"} {
				if !strings.Contains(out, want) {
					t.Errorf("describe hpa: got %q, want %q in it", out, want)
				}
			}
			out, err = kubectl(hpaYAML("bad", 3, 2, 50), "-n", ns, "create", "-f", "-")
			if err == nil || !strings.Contains(out, `The HorizontalPodAutoscaler "bad" is invalid: spec.maxReplicas: Invalid value: 2: must be greater than or equal to `+"`minReplicas`") {
				t.Errorf("create of min 3 max 2: got %v %q, want Kubernetes' refusal", err, out)
			}
		})
	}
}

// hpaV1YAML is the spec and status kube-apiserver v1.33.13 answers at
// autoscaling/v1 for kubectl autoscale's object (kubectl -o yaml).
const hpaV1YAML = `spec:
  maxReplicas: 5
  minReplicas: 1
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: web
  targetCPUUtilizationPercentage: 50
status:
  currentReplicas: 0
  desiredReplicas: 0
`

// yamlBody is kubectl -o yaml's output from its spec on (the metadata
// differs by object and server).
func yamlBody(out string) string {
	if i := strings.Index(out, "\nspec:\n"); i >= 0 {
		return out[i+1:]
	}
	return out
}

// hpaYAML is an autoscaling/v2 HorizontalPodAutoscaler of Deployment web
// at cpu percent CPU.
func hpaYAML(name string, lo, hi, cpu int) string {
	return fmt.Sprintf(`apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: %s}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: %d
  maxReplicas: %d
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: %d}}}]
`, name, lo, hi, cpu)
}
