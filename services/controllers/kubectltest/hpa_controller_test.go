// This file holds the HorizontalPodAutoscaler controller's test against a
// real in-process API service, scheduler, Deployment and ReplicaSet
// controllers and a node agent on the built-in runtime whose containers
// declare their CPU usage (KPLANE_SIM_CPU_USAGE) and whose stats the API
// service serves as metrics.k8s.io: a Deployment using 180% of its CPU
// request against a 50% target is scaled up to maxReplicas, with
// SuccessfulRescale events and Kubernetes' conditions; once its pods use
// 10% it is scaled back down to minReplicas after the scale-down window;
// a custom resource with a scale subresource is scaled too.
// An autoscaler whose pods have no CPU request reports
// FailedGetResourceMetric.
package kubectltest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/nodeagent"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/simruntime"
	"github.com/kplane/kplane/nodeagent/simruntime/simruntimetest"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
	"github.com/kplane/kplane/services/scheduler"
)

// startMetricsNode runs, until the test ends, a node agent for node name on
// the built-in runtime with its log and stats server on loopback HTTPS,
// readable by the API service's kubelet client only.
func startMetricsNode(t *testing.T, env *apiservertest.Env, name string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "hpanode")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt, err := simruntime.New(simruntime.Config{Name: name, Images: []string{"kplane.test/web:1"}})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cri.New(cri.Config{Socket: simruntimetest.Serve(t, rt)})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, err := nodeagent.New(nodeagent.Config{
		NodeName: name, Conn: env.DialCert(t, "system:node:"+name, "system:nodes"), Runtime: rc,
		Capacity: map[string]string{"cpu": "8", "memory": "8Gi", "pods": "110"},
		LogDir:   filepath.Join(dir, "logs"), RootDir: filepath.Join(dir, "root"), LogPort: int32(hl.Addr().(*net.TCPAddr).Port),
		StatusInterval: time.Second, RelistInterval: 100 * time.Millisecond,
		Backoff: nodeagent.Backoff{Base: 200 * time.Millisecond, Max: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	ca := env.CA()
	srv := &http.Server{Handler: nodeagent.NewLogServer(a).RequireClientCert(apiservertest.KubeletClientUser)}
	go srv.Serve(tls.NewListener(hl, nodeagent.LogServerTLS(ca.Issue(t, "kplane-nodeagent", nil, true), ca.Pool)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("agent %s: %v", name, err)
		}
		rc.Close()
	})
}

func TestHorizontalPodAutoscalerScalesADeployment(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{TLS: true})
	admin := env.Dial(t, apiservertest.AdminToken)
	m, err := controllers.New(controllers.Config{Conn: admin, LocalVolumeDir: t.TempDir(),
		Controllers:   []string{controllers.Deployment, controllers.ReplicaSet, controllers.HorizontalPodAutoscaling, controllers.CRD},
		HPASyncPeriod: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(scheduler.Config{Conn: env.Dial(t, apiservertest.SchedulerToken)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	for _, run := range []func(context.Context) error{m.Run, s.Run} {
		go func() { _ = run(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() { cancel(); <-done; <-done })
	startMetricsNode(t, env, "n1")

	deps := client.Must[*appsv1.Deployment](admin)
	hpas := client.Must[*autoscalingv2.HorizontalPodAutoscaler](admin)
	events := client.Must[*corev1.Event](admin)
	deployment := func(name, cpuUsage string, request bool) *appsv1.Deployment {
		lbl := map[string]string{"app": name}
		c := &corev1.Container{Name: "c", Image: "kplane.test/web:1", Env: []*corev1.EnvVar{{Name: simruntime.EnvCPUUsage, Value: cpuUsage}}}
		if request {
			c.Resources = &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "500m"}}
		}
		return &appsv1.Deployment{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: &appsv1.DeploymentSpec{Replicas: proto.Int32(1), Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: lbl}, Spec: &corev1.PodSpec{Containers: []*corev1.Container{c}}}}}
	}
	autoscaler := func(name string) *autoscalingv2.HorizontalPodAutoscaler {
		return &autoscalingv2.HorizontalPodAutoscaler{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: &autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: proto.Int32(1), MaxReplicas: 5,
				ScaleTargetRef: &autoscalingv2.CrossVersionObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Name: name},
				Metrics: []*autoscalingv2.MetricSpec{{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "cpu",
					Target: &autoscalingv2.MetricTarget{Type: "Utilization", AverageUtilization: proto.Int32(50)}}}},
				// A short scale-down window, so the test need not wait
				// Kubernetes' default five minutes.
				Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: proto.Int32(2)}}}}
	}
	for _, d := range []*appsv1.Deployment{deployment("web", "900m", true), deployment("norequest", "100m", false)} {
		if _, err := deps.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"web", "norequest"} {
		if _, err := hpas.Create(ctx, autoscaler(name)); err != nil {
			t.Fatal(err)
		}
	}
	condition := func(h *autoscalingv2.HorizontalPodAutoscaler, typ string) *autoscalingv2.HorizontalPodAutoscalerCondition {
		for _, c := range h.GetStatus().GetConditions() {
			if c.GetType() == typ {
				return c
			}
		}
		return nil
	}
	scaledTo := func(n int32, cpu int32) func() (bool, string) {
		return func() (bool, string) {
			d, err := deps.Get(ctx, "default", "web")
			if err != nil {
				return false, err.Error()
			}
			h, err := hpas.Get(ctx, "default", "web")
			if err != nil {
				return false, err.Error()
			}
			st := h.GetStatus()
			util := int32(-1)
			if m := st.GetCurrentMetrics(); len(m) == 1 {
				util = m[0].GetResource().GetCurrent().GetAverageUtilization()
			}
			return d.GetSpec().GetReplicas() == n && st.GetDesiredReplicas() == n && st.GetCurrentReplicas() == n && util == cpu,
				fmt.Sprintf("deployment replicas %d, hpa status %v", d.GetSpec().GetReplicas(), st)
		}
	}
	// 900m of a 500m request is 180% against 50%: up to maxReplicas.
	testutil.EventuallyWithin(t, 90*time.Second, "web scaled to 5 at 180% CPU", scaledTo(5, 180))
	h, err := hpas.Get(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if c := condition(h, "ScalingActive"); c.GetStatus() != "True" || c.GetReason() != "ValidMetricFound" ||
		c.GetMessage() != "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)" {
		t.Errorf("ScalingActive: got %v", c)
	}
	if c := condition(h, "ScalingLimited"); c.GetStatus() != "True" || c.GetReason() != "TooManyReplicas" {
		t.Errorf("ScalingLimited at maxReplicas: got %v", c)
	}
	if c := condition(h, "AbleToScale"); c.GetStatus() != "True" || h.GetStatus().GetLastScaleTime() == nil {
		t.Errorf("AbleToScale: got %v, lastScaleTime %v", c, h.GetStatus().GetLastScaleTime())
	}
	// The pods now use 50m (10%): back down to minReplicas once the
	// two-second window has passed.
	testutil.EventuallyWithin(t, 90*time.Second, "the new template written", func() (bool, string) {
		d, err := deps.Get(ctx, "default", "web")
		if err != nil {
			return false, err.Error()
		}
		d.Spec.Template.Spec.Containers[0].Env[0].Value = "50m"
		_, err = deps.Update(ctx, d)
		return err == nil, fmt.Sprint(err)
	})
	testutil.EventuallyWithin(t, 90*time.Second, "web scaled down to 1 at 10% CPU", scaledTo(1, 10))

	// The events Kubernetes records, and the refusal for pods without a
	// CPU request.
	testutil.EventuallyWithin(t, 90*time.Second, "SuccessfulRescale events", func() (bool, string) {
		l, _, err := events.List(ctx, "default", client.ListOptions{FieldSelector: "involvedObject.name=web,involvedObject.kind=HorizontalPodAutoscaler"})
		if err != nil {
			return false, err.Error()
		}
		var msgs []string
		up, down := false, false
		for _, e := range l {
			msgs = append(msgs, e.GetReason()+": "+e.GetMessage())
			up = up || (e.GetReason() == "SuccessfulRescale" && strings.HasSuffix(e.GetMessage(), "; reason: cpu resource utilization (percentage of request) above target"))
			down = down || (e.GetReason() == "SuccessfulRescale" && e.GetMessage() == "New size: 1; reason: All metrics below target")
		}
		return up && down, strings.Join(msgs, " | ")
	})
	testutil.EventuallyWithin(t, 90*time.Second, "FailedGetResourceMetric for pods without a request", func() (bool, string) {
		h, err := hpas.Get(ctx, "default", "norequest")
		if err != nil {
			return false, err.Error()
		}
		c := condition(h, "ScalingActive")
		return c.GetStatus() == "False" && c.GetReason() == "FailedGetResourceMetric" &&
			strings.HasPrefix(c.GetMessage(), "the HPA was unable to compute the replica count: failed to get cpu utilization: missing request for cpu in container c of Pod norequest-"), fmt.Sprint(c)
	})

	// A custom resource with a scale subresource is scaled the same way:
	// its pods (made here, as its own controller would) use 180%.
	crds := client.Must[*apiextensionsv1.CustomResourceDefinition](admin)
	if _, err := crds.Create(ctx, &apiextensionsv1.CustomResourceDefinition{Metadata: &metav1.ObjectMeta{Name: "scalers.example.com"},
		Spec: &apiextensionsv1.CustomResourceDefinitionSpec{Group: "example.com", Scope: "Namespaced",
			Names: &apiextensionsv1.CustomResourceDefinitionNames{Plural: "scalers", Kind: "Scaler"},
			Versions: []*apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenApiv3Schema: &apiextensionsv1.JSONSchemaProps{
					Raw: []byte(`{"type":"object","x-kubernetes-preserve-unknown-fields":true}`)}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale: &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas",
						LabelSelectorPath: proto.String(".status.selector")}}}}}}); err != nil {
		t.Fatal(err)
	}
	dyn := dynamicv1.NewResourceServiceClient(admin)
	target := &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "scalers", Namespace: "default", Name: "sc"}
	testutil.EventuallyWithin(t, 90*time.Second, "the Scaler created", func() (bool, string) {
		_, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: target,
			Object: []byte(`{"apiVersion":"example.com/v1","kind":"Scaler","metadata":{"name":"sc","namespace":"default"},"spec":{"replicas":1}}`)})
		return err == nil, fmt.Sprint(err)
	})
	if _, err := dyn.UpdateStatus(ctx, &dynamicv1.UpdateStatusRequest{Target: target,
		Object: []byte(`{"apiVersion":"example.com/v1","kind":"Scaler","metadata":{"name":"sc","namespace":"default"},"spec":{"replicas":1},"status":{"replicas":1,"selector":"app=scaled"}}`)}); err != nil {
		t.Fatal(err)
	}
	pods := client.Must[*corev1.Pod](admin)
	if _, err := pods.Create(ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "scaled-0", Labels: map[string]string{"app": "scaled"}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "kplane.test/web:1",
			Env:       []*corev1.EnvVar{{Name: simruntime.EnvCPUUsage, Value: "900m"}},
			Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "500m"}}}}}}); err != nil {
		t.Fatal(err)
	}
	cr := autoscaler("sc")
	cr.Spec.ScaleTargetRef = &autoscalingv2.CrossVersionObjectReference{ApiVersion: "example.com/v1", Kind: "Scaler", Name: "sc"}
	cr.Spec.MaxReplicas = 3
	if _, err := hpas.Create(ctx, cr); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 90*time.Second, "the Scaler scaled to 3", func() (bool, string) {
		sc, err := dyn.GetScale(ctx, &dynamicv1.GetScaleRequest{Target: target})
		if err != nil {
			return false, err.Error()
		}
		h, _ := hpas.Get(ctx, "default", "sc")
		return sc.GetScale().GetSpec().GetReplicas() == 3, fmt.Sprintf("scale %v, hpa status %v", sc.GetScale(), h.GetStatus())
	})

	// kubectl prints the current utilization against the target.
	k := kubectltest.StartBinary(t, env.Dial(t, ""), apiservertest.AdminToken, "kubectl.1.33")
	out, err := kubectlRunner(k, 60*time.Second)("", "get", "hpa", "web")
	if err != nil || !strings.Contains(out, "cpu: 10%/50%") || !strings.Contains(out, "Deployment/web") {
		t.Errorf("kubectl get hpa web: got %v %q, want cpu: 10%%/50%%", err, out)
	}
}
