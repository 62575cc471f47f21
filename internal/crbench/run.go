// This file holds one measurement: the CustomResourceDefinition applied and
// Established, then closed-loop creates of its kind and of pods.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

func run(ctx context.Context, cfg config, log *slog.Logger) (*result, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// The clients' own rate limits off: the server is what is measured.
	rc.QPS, rc.Burst = -1, 0
	rc.Timeout = 30 * time.Second
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	crd, err := applyCRD(ctx, dyn, cfg.crd)
	if err != nil {
		return nil, err
	}
	version := ""
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			version = v.Name
		}
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural}
	log.Info("CustomResourceDefinition established", "name", crd.Name, "version", version)
	if err := prepareNamespace(ctx, cs, cfg.namespace); err != nil {
		return nil, err
	}
	res := &result{Label: cfg.label, Clients: cfg.clients, CRD: crd.Name}
	crs := dyn.Resource(gvr).Namespace(cfg.namespace)
	newCR := func(name string) error {
		_, err := crs.Create(ctx, customObject(crd, version, name), metav1.CreateOptions{})
		return err
	}
	pods := cs.CoreV1().Pods(cfg.namespace)
	newPod := func(name string) error {
		_, err := pods.Create(ctx, podObject(name), metav1.CreateOptions{})
		return err
	}
	for _, k := range []struct {
		name   string
		create func(string) error
	}{{crd.Spec.Names.Kind, newCR}, {"Pod", newPod}} {
		if cfg.warmup > 0 {
			if _, err := closedLoop(ctx, cfg.clients, cfg.warmup, "warm-"+cfg.label, k.create); err != nil {
				return nil, err
			}
		}
		got, err := closedLoop(ctx, cfg.clients, cfg.duration, cfg.label, k.create)
		if err != nil {
			return nil, err
		}
		got.Kind = k.name
		res.Kinds = append(res.Kinds, *got)
	}
	return res, nil
}

// applyCRD creates the CustomResourceDefinition in file (or keeps the one
// there) and waits until it is Established.
func applyCRD(ctx context.Context, dyn dynamic.Interface, file string) (*apiextensionsv1.CustomResourceDefinition, error) {
	crdResource := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var u unstructured.Unstructured
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if _, err := dyn.Resource(crdResource).Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create the CustomResourceDefinition: %w", err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got, err := dyn.Resource(crdResource).Get(ctx, crd.Name, metav1.GetOptions{})
		if err == nil {
			var cur apiextensionsv1.CustomResourceDefinition
			if b, err := got.MarshalJSON(); err == nil && yaml.Unmarshal(b, &cur) == nil {
				for _, c := range cur.Status.Conditions {
					if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
						return &crd, nil
					}
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the CustomResourceDefinition %s is not Established after a minute (last error %v)", crd.Name, err)
		}
	}
}

// prepareNamespace creates ns and its default ServiceAccount (pods need it;
// nothing else may be running to create it).
func prepareNamespace(ctx context.Context, cs kubernetes.Interface, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace: %w", err)
	}
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("default ServiceAccount: %w", err)
	}
	return nil
}

// customObject is a small valid object of the CRD's kind. For the Gateway
// API's HTTPRoute it is a route with a parent, a host, a path match and a
// backend, so its CEL rules run; for another kind, an empty spec.
func customObject(crd *apiextensionsv1.CustomResourceDefinition, version, name string) *unstructured.Unstructured {
	spec := map[string]any{}
	if crd.Spec.Names.Kind == "HTTPRoute" {
		spec = map[string]any{
			"parentRefs": []any{map[string]any{"name": "gw"}},
			"hostnames":  []any{"app.example.com"},
			"rules": []any{map[string]any{
				"matches":     []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/app"}}},
				"backendRefs": []any{map[string]any{"name": "web", "port": int64(80)}},
			}},
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": crd.Spec.Group + "/" + version,
		"kind":       crd.Spec.Names.Kind,
		"metadata":   map[string]any{"name": name, "labels": map[string]any{"app": "crbench"}},
		"spec":       spec,
	}}
}

func podObject(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "crbench"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{},
		}}},
	}
}

// closedLoop runs clients creators, each creating its next object as soon
// as the last is answered, for d; names are prefix-client-n.
func closedLoop(ctx context.Context, clients int, d time.Duration, prefix string, create func(string) error) (*kind, error) {
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      int
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	stamp := start.UnixNano() % 1_000_000
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			bad := 0
			var first error
			for n := 0; time.Now().Before(end) && ctx.Err() == nil; n++ {
				t := time.Now()
				err := create(fmt.Sprintf("%s-%d-%d-%d", prefix, stamp, c, n))
				if err != nil {
					bad++
					if first == nil {
						first = err
					}
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			defer mu.Unlock()
			latencies = append(latencies, mine...)
			errs += bad
			if firstErr == nil {
				firstErr = first
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if len(latencies) == 0 {
		return nil, fmt.Errorf("no create succeeded: %w", firstErr)
	}
	if errs > len(latencies)/100 {
		return nil, fmt.Errorf("%d of %d creates failed; the first: %w", errs, errs+len(latencies), firstErr)
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	return &kind{Creates: len(latencies), Errors: errs, Seconds: elapsed, PerSec: float64(len(latencies)) / elapsed,
		P50ms: pct(0.50), P99ms: pct(0.99)}, nil
}
