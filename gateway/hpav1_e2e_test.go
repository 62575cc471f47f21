// This file holds the kubectl tests of autoscaling/v1 HorizontalPodAutoscaler,
// a view of the stored autoscaling/v2 one: discovery lists both versions
// with v2 preferred, an object written at v1 is read, watched, patched,
// status-written and deleted at v1 and read at v2, and a v2 object's
// fields that v1 cannot hold travel in v1's annotations through a patch.

package gateway_test

import (
	"strings"
	"testing"
)

const hpaV1ObjYAML = `apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata: {name: web, labels: {set: a}}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 5
  targetCPUUtilizationPercentage: 50
`

const hpaV2ObjYAML = `apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: multi, labels: {set: a}}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 5
  metrics:
  - {type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 60}}}
  - {type: Resource, resource: {name: memory, target: {type: AverageValue, averageValue: 0.5Gi}}}
`

func TestKubectlHPAV1(t *testing.T) {
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := startKube(t, bin)
			k.ok([]string{"get", "--raw", "/apis/autoscaling"},
				`"versions":[{"groupVersion":"autoscaling/v2","version":"v2"},{"groupVersion":"autoscaling/v1","version":"v1"}]`,
				`"preferredVersion":{"groupVersion":"autoscaling/v2","version":"v2"}`)
			k.ok([]string{"get", "--raw", "/apis/autoscaling/v1"}, `"name":"horizontalpodautoscalers"`, `"name":"horizontalpodautoscalers/status"`, `"shortNames":["hpa"]`)
			k.ok([]string{"api-versions"}, "autoscaling/v1", "autoscaling/v2")

			k.ok([]string{"create", "-f", k.file("v1.yaml", hpaV1ObjYAML)}, "horizontalpodautoscaler.autoscaling/web created")
			k.ok([]string{"get", "horizontalpodautoscalers.v1.autoscaling", "web", "-o", "jsonpath={.apiVersion} {.spec.minReplicas} {.spec.targetCPUUtilizationPercentage}"},
				"autoscaling/v1 1 50")
			k.ok([]string{"get", "horizontalpodautoscalers.v2.autoscaling", "web", "-o", "jsonpath={.apiVersion} {.spec.metrics[0].resource.target.averageUtilization}"},
				"autoscaling/v2 50")
			k.ok([]string{"get", "horizontalpodautoscalers.v1.autoscaling"}, "REFERENCE", "Deployment/web", "cpu: <unknown>/50%")
			// A watch at v1 (the API service's JSON watch stream) converts
			// each event.
			k.ok([]string{"get", "--raw", "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers?watch=1&timeoutSeconds=1"},
				`"type":"ADDED"`, `"apiVersion":"autoscaling/v1"`, `"targetCPUUtilizationPercentage":50`)

			// A v2 object read at v1: the memory metric in the annotation,
			// which a merge patch at v1 carries back.
			k.ok([]string{"create", "-f", k.file("v2.yaml", hpaV2ObjYAML)}, "horizontalpodautoscaler.autoscaling/multi created")
			k.ok([]string{"get", "horizontalpodautoscalers.v1.autoscaling", "multi", "-o", `jsonpath={.spec.targetCPUUtilizationPercentage} {.metadata.annotations.autoscaling\.alpha\.kubernetes\.io/metrics}`},
				`60 [{"type":"Resource","resource":{"name":"memory","targetAverageValue":"512Mi"}}]`)
			k.ok([]string{"patch", "horizontalpodautoscalers.v1.autoscaling", "multi", "--type=merge", "-p", `{"spec":{"targetCPUUtilizationPercentage":70}}`},
				"horizontalpodautoscaler.autoscaling/multi patched")
			k.ok([]string{"get", "horizontalpodautoscalers.v2.autoscaling", "multi", "-o", "jsonpath={.spec.metrics[*].resource.name} {.spec.metrics[1].resource.target.averageUtilization}"},
				"memory cpu 70")
			k.ok([]string{"get", "hpa"}, "memory: <unknown>/512Mi, cpu: <unknown>/70%")

			// The status subresource at v1.
			k.ok([]string{"get", "--raw", "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers/web/status"}, `"apiVersion":"autoscaling/v1"`)
			if bin == "kubectl.1.33" {
				k.ok([]string{"patch", "horizontalpodautoscalers.v1.autoscaling", "web", "--subresource=status", "--type=merge", "-p", `{"status":{"currentReplicas":2,"desiredReplicas":3,"currentCPUUtilizationPercentage":40}}`},
					"horizontalpodautoscaler.autoscaling/web patched")
				k.ok([]string{"get", "horizontalpodautoscalers.v2.autoscaling", "web", "-o", "jsonpath={.status.desiredReplicas} {.status.currentMetrics[0].resource.current.averageUtilization}"},
					"3 40")
			}

			// Server-side apply at v1 of an object last written at v2.
			applied := strings.Replace(strings.Replace(hpaV1ObjYAML, "name: web,", "name: multi,", 1), "maxReplicas: 5", "maxReplicas: 7", 1)
			k.ok([]string{"apply", "--server-side", "--force-conflicts", "-f", k.file("apply.yaml", applied)}, "horizontalpodautoscaler.autoscaling/multi serverside-applied")
			k.ok([]string{"get", "horizontalpodautoscalers.v2.autoscaling", "multi", "-o", "jsonpath={.spec.maxReplicas} {.spec.metrics[*].resource.name}"},
				"7 memory cpu")

			k.fails([]string{"patch", "horizontalpodautoscalers.v1.autoscaling", "web", "--type=merge", "-p", `{"spec":{"targetCPUUtilizationPercentage":0}}`},
				"spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0")
			k.ok([]string{"delete", "horizontalpodautoscalers.v1.autoscaling", "-l", "set=a"},
				`horizontalpodautoscaler.autoscaling "multi" deleted`, `horizontalpodautoscaler.autoscaling "web" deleted`)
			if out := k.ok([]string{"get", "hpa", "-o", "name"}); strings.Contains(out, "web") || strings.Contains(out, "multi") {
				t.Errorf("after delete: got\n%s\nwant no web or multi", out)
			}
		})
	}
}
