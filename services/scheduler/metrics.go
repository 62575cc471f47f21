// This file holds the scheduler's metrics: attempts by result and their
// latency, and the pending pods in each part of the queue (the gRPC calls
// to the API service are measured by the otelgrpc handler on the
// connection).

package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

type metrics struct {
	attempts metric.Int64Counter
	duration metric.Float64Histogram
	reg      metric.Registration
}

func (s *Scheduler) newMetrics(mp metric.MeterProvider) (*metrics, error) {
	m := mp.Meter(tracerName)
	var mt metrics
	var err1, err2, err3, err4 error
	mt.attempts, err1 = m.Int64Counter("kplane.scheduler.schedule_attempts", metric.WithDescription("Scheduling attempts by result: scheduled, unschedulable, error."))
	mt.duration, err2 = m.Float64Histogram("kplane.scheduler.scheduling_attempt_duration", metric.WithUnit("s"),
		metric.WithDescription("Scheduling attempt latency (filter, score, reserve), by result."))
	pending, err3 := m.Int64ObservableGauge("kplane.scheduler.pending_pods", metric.WithDescription("Pods waiting in the scheduling queue, by queue (active, backoff, unschedulable)."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("scheduler: metrics: %w", err)
	}
	mt.reg, err4 = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		a, b, u := s.queue.Lens()
		o.ObserveInt64(pending, int64(a), metric.WithAttributes(attribute.String("queue", "active")))
		o.ObserveInt64(pending, int64(b), metric.WithAttributes(attribute.String("queue", "backoff")))
		o.ObserveInt64(pending, int64(u), metric.WithAttributes(attribute.String("queue", "unschedulable")))
		return nil
	}, pending)
	if err4 != nil {
		return nil, fmt.Errorf("scheduler: metrics: %w", err4)
	}
	return &mt, nil
}

func (m *metrics) observe(d time.Duration, result string) {
	attrs := metric.WithAttributes(attribute.String("result", result))
	m.attempts.Add(context.Background(), 1, attrs)
	m.duration.Record(context.Background(), d.Seconds(), attrs)
}
