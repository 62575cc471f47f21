// This file holds the plugin's benchmarks: what it adds to a pod create in
// a namespace without Pod Security labels (the common case, on the create
// hot path) and in one it has to check.
package podsecurity

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// staticCluster answers from fixed objects, as the watch caches would.
type staticCluster map[string]*corev1.Namespace

func (c staticCluster) Namespace(_ context.Context, name string) (*corev1.Namespace, error) {
	return c[name], nil
}

func (c staticCluster) Pods(context.Context, string) ([]*corev1.Pod, error) { return nil, nil }

func BenchmarkValidatePodCreate(b *testing.B) {
	cluster := staticCluster{
		"plain":      {Metadata: &metav1.ObjectMeta{Name: "plain", Labels: map[string]string{"kubernetes.io/metadata.name": "plain"}}},
		"restricted": {Metadata: &metav1.ObjectMeta{Name: "restricted", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}},
	}
	p, err := New(nil, cluster, noop.NewMeterProvider())
	if err != nil {
		b.Fatal(err)
	}
	for _, ns := range []string{"plain", "restricted"} {
		b.Run(ns, func(b *testing.B) {
			pod := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "p"},
				Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}}}
			a := &request.Admission{Attributes: request.Attributes{Verb: "create", APIVersion: "v1", Resource: "pods", Namespace: ns, Name: "p"},
				Operation: request.Create, Object: pod}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = p.Validate(ctx, a)
			}
		})
	}
}
