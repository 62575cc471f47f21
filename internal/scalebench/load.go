// This file holds the load: the plan of namespaces and Deployments of mixed
// sizes (ClusterLoader2's load test shape), the objects each Deployment
// brings (a Service, a ConfigMap and a Secret its pods mount), their
// creation at a fixed rate, the churn and the deletion.

package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// podLabel marks every pod of the load: the watch selects on it.
const podLabel = "scalebench"

// deploymentPlan is one Deployment of the load.
type deploymentPlan struct {
	namespace, name string
	replicas        int32
}

// sizes are the Deployment sizes of ClusterLoader2's load test (big,
// medium, small) and the share of each namespace's pods each gets.
var sizes = []struct {
	name     string
	replicas int
	share    float64
}{
	{"big", 250, 0.25}, {"medium", 30, 0.25}, {"small", 5, 0.5},
}

// plan spreads nodes×podsPerNode pods over one namespace per
// nodesPerNamespace nodes: a quarter in big Deployments, a quarter in
// medium ones, the rest in small ones (the remainder in one last smaller
// Deployment).
func plan(nodes, podsPerNode, nodesPerNamespace int) (namespaces []string, deps []deploymentPlan) {
	nsCount := max(1, (nodes+nodesPerNamespace-1)/nodesPerNamespace)
	total := nodes * podsPerNode
	for n := range nsCount {
		ns := fmt.Sprintf("scale-%d", n+1)
		namespaces = append(namespaces, ns)
		pods := total / nsCount
		if n < total%nsCount {
			pods++
		}
		left := pods
		for _, s := range sizes {
			count := int(float64(pods) * s.share / float64(s.replicas))
			if s.name == "small" {
				count = left / s.replicas
			}
			for i := range count {
				deps = append(deps, deploymentPlan{namespace: ns, name: fmt.Sprintf("%s-%d", s.name, i+1), replicas: int32(s.replicas)})
				left -= s.replicas
			}
		}
		if left > 0 {
			deps = append(deps, deploymentPlan{namespace: ns, name: "rest-1", replicas: int32(left)})
		}
	}
	return namespaces, deps
}

// loader makes the API calls of the load, each creation or deletion
// waiting its turn on a limiter of -qps.
type loader struct {
	cs     kubernetes.Interface
	log    *slog.Logger
	limit  *rate.Limiter
	errors int
}

// call waits for the limiter, then makes one call; a failure is counted and
// logged (the load goes on: an API that refuses is what the SLOs measure).
func (l *loader) call(ctx context.Context, what string, f func(context.Context) error) error {
	if err := l.limit.Wait(ctx); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := f(ctx); err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		l.errors++
		l.log.Warn("call failed", "what", what, "err", err)
	}
	return nil
}

// createAll creates the namespaces (with their default ServiceAccount,
// which Kubernetes' admission wants before pods), then per Deployment its
// ConfigMap, Secret, Service and the Deployment.
func (l *loader) createAll(ctx context.Context, namespaces []string, deps []deploymentPlan) error {
	for _, ns := range namespaces {
		if err := l.call(ctx, "create namespace "+ns, func(ctx context.Context) error {
			_, err := l.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
		if err := l.call(ctx, "create serviceaccount "+ns+"/default", func(ctx context.Context) error {
			_, err := l.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
	}
	for _, d := range deps {
		if err := l.createDeployment(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

func (l *loader) createDeployment(ctx context.Context, d deploymentPlan) error {
	key := d.namespace + "/" + d.name
	steps := []struct {
		what string
		f    func(context.Context) error
	}{
		{"create configmap " + key, func(ctx context.Context) error {
			_, err := l.cs.CoreV1().ConfigMaps(d.namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: d.name},
				Data: map[string]string{"config": "key=value"}}, metav1.CreateOptions{})
			return err
		}},
		{"create secret " + key, func(ctx context.Context) error {
			_, err := l.cs.CoreV1().Secrets(d.namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: d.name},
				StringData: map[string]string{"password": "secret"}}, metav1.CreateOptions{})
			return err
		}},
		{"create service " + key, func(ctx context.Context) error {
			_, err := l.cs.CoreV1().Services(d.namespace).Create(ctx, service(d), metav1.CreateOptions{})
			return err
		}},
		{"create deployment " + key, func(ctx context.Context) error {
			_, err := l.cs.AppsV1().Deployments(d.namespace).Create(ctx, deployment(d), metav1.CreateOptions{})
			return err
		}},
	}
	for _, s := range steps {
		if err := l.call(ctx, s.what, s.f); err != nil {
			return err
		}
	}
	return nil
}

// churn cycles through the Deployments until ctx ends or until is reached:
// the i-th action on a Deployment scales it to 3/2 of its size, the next
// back (each a GET and a PUT), the next rolls it out (a new pod template annotation: every pod
// replaced), the next deletes it and the next creates it again; each action
// first waits for as many pods from a limiter of podRate pods per second.
func (l *loader) churn(ctx context.Context, deps []deploymentPlan, podRate float64, until time.Time) (actions int, err error) {
	maxPods := 1
	for _, d := range deps {
		maxPods = max(maxPods, int(d.replicas)*3/2)
	}
	pods := rate.NewLimiter(rate.Limit(podRate), maxPods)
	rollout := 0
	for i := 0; time.Now().Before(until); i++ {
		d := deps[i%len(deps)]
		key := d.namespace + "/" + d.name
		round := i / len(deps)
		var n int
		var what string
		var f func(context.Context) error
		switch round % 5 {
		case 0:
			up := d.replicas * 3 / 2
			n, what = int(up-d.replicas), "scale up "+key
			f = func(ctx context.Context) error { return l.scale(ctx, d, up) }
		case 1:
			what = "scale down " + key
			f = func(ctx context.Context) error { return l.scale(ctx, d, d.replicas) }
		case 2:
			rollout++
			n, what = int(d.replicas), "roll out "+key
			f = func(ctx context.Context) error {
				patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"scalebench/rollout":%q}}}}}`, strconv.Itoa(rollout))
				_, err := l.cs.AppsV1().Deployments(d.namespace).Patch(ctx, d.name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
				return err
			}
		case 3:
			what = "delete " + key
			f = func(ctx context.Context) error {
				bg := metav1.DeletePropagationBackground
				return l.cs.AppsV1().Deployments(d.namespace).Delete(ctx, d.name, metav1.DeleteOptions{PropagationPolicy: &bg})
			}
		case 4:
			n, what = int(d.replicas), "recreate "+key
			f = func(ctx context.Context) error {
				_, err := l.cs.AppsV1().Deployments(d.namespace).Create(ctx, deployment(d), metav1.CreateOptions{})
				return err
			}
		}
		if n > 0 {
			if err := pods.WaitN(ctx, n); err != nil {
				return actions, fmt.Errorf("%s: %w", what, err)
			}
		}
		if err := l.call(ctx, what, f); err != nil {
			return actions, err
		}
		actions++
	}
	return actions, nil
}

// scale reads the Deployment and writes it back with replicas, as a
// read-modify-write client does (a GET and a PUT; a conflict is retried
// once).
func (l *loader) scale(ctx context.Context, d deploymentPlan, replicas int32) error {
	var err error
	for range 2 {
		var dep *appsv1.Deployment
		if dep, err = l.cs.AppsV1().Deployments(d.namespace).Get(ctx, d.name, metav1.GetOptions{}); err != nil {
			return err
		}
		dep.Spec.Replicas = &replicas
		if _, err = l.cs.AppsV1().Deployments(d.namespace).Update(ctx, dep, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// deleteAll deletes every Deployment, Service, ConfigMap and Secret of the
// load at the limiter's rate (the pods go through the garbage collector, as
// ClusterLoader2's deletion phase has them go).
func (l *loader) deleteAll(ctx context.Context, deps []deploymentPlan) error {
	bg := metav1.DeletePropagationBackground
	for _, d := range deps {
		key := d.namespace + "/" + d.name
		steps := []struct {
			what string
			f    func(context.Context) error
		}{
			{"delete deployment " + key, func(ctx context.Context) error {
				return l.cs.AppsV1().Deployments(d.namespace).Delete(ctx, d.name, metav1.DeleteOptions{PropagationPolicy: &bg})
			}},
			{"delete service " + key, func(ctx context.Context) error {
				return l.cs.CoreV1().Services(d.namespace).Delete(ctx, d.name, metav1.DeleteOptions{})
			}},
			{"delete configmap " + key, func(ctx context.Context) error {
				return l.cs.CoreV1().ConfigMaps(d.namespace).Delete(ctx, d.name, metav1.DeleteOptions{})
			}},
			{"delete secret " + key, func(ctx context.Context) error {
				return l.cs.CoreV1().Secrets(d.namespace).Delete(ctx, d.name, metav1.DeleteOptions{})
			}},
		}
		for _, s := range steps {
			if err := l.call(ctx, s.what, s.f); err != nil {
				return err
			}
		}
	}
	return nil
}

func labelsOf(d deploymentPlan) map[string]string {
	return map[string]string{podLabel: "true", "app": d.name}
}

func service(d deploymentPlan) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: d.name},
		Spec: corev1.ServiceSpec{
			Selector: labelsOf(d),
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

func deployment(d deploymentPlan) *appsv1.Deployment {
	replicas := d.replicas
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: d.name, Labels: labelsOf(d)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labelsOf(d)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labelsOf(d)},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:  "pause",
						Image: "registry.k8s.io/pause:3.10",
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "config", MountPath: "/etc/config"},
							{Name: "secret", MountPath: "/etc/secret"},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: d.name}}}},
						{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: d.name}}},
					},
					// KWOK's nodes carry its NoSchedule taint; kplane's do not.
					Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				},
			},
		},
	}
}
