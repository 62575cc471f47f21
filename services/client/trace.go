package client

// This file continues an object's trace in a reconcile loop (see
// internal/telemetry for the trace annotation).

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/telemetry"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// TracedReconciler wraps r in a span named span ("deployment.reconcile")
// that continues the trace recorded on the object key names in store: the
// reconcile, and every write it makes, join the trace of the change that
// caused it. tp nil uses the global tracer provider.
func TracedReconciler[T proto.Message](tp trace.TracerProvider, span string, store *Indexer[T], r Reconciler) Reconciler {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	tracer := tp.Tracer("github.com/kplane/kplane/services/client")
	return func(ctx context.Context, key string) error {
		var ann map[string]string
		if obj, ok := store.Get(key); ok {
			if m, ok := any(obj).(interface{ GetMetadata() *metav1.ObjectMeta }); ok {
				ann = m.GetMetadata().GetAnnotations()
			}
		}
		ctx, s := telemetry.StartFromObject(ctx, tracer, span, ann, trace.WithAttributes(attribute.String("k8s.object", key)))
		defer s.End()
		err := r(ctx, key)
		if err != nil {
			s.SetStatus(codes.Error, err.Error())
		}
		return err
	}
}
