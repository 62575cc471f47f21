// This file holds the API service's own metrics (per-method gRPC counts and
// latencies come from the otelgrpc server handler): the watch multiplexer's
// watchers, cached objects and window per resource.

package apiserver

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// registerMetrics adds observable gauges read from the cachers at each
// scrape; Run unregisters them when it returns.
func (s *Server) registerMetrics(mp metric.MeterProvider) error {
	m := mp.Meter("github.com/kplane/kplane/services/apiserver")
	watchers, err := m.Int64ObservableGauge("kplane.apiserver.watchers", metric.WithDescription("Client watches open, per resource."))
	if err != nil {
		return fmt.Errorf("apiserver: metrics: %w", err)
	}
	objects, err := m.Int64ObservableGauge("kplane.apiserver.watch_cache.objects", metric.WithDescription("Objects in the watch cache, per resource."))
	if err != nil {
		return fmt.Errorf("apiserver: metrics: %w", err)
	}
	window, err := m.Int64ObservableGauge("kplane.apiserver.watch_cache.events", metric.WithDescription("Recent events kept for watches to resume from, per resource."))
	if err != nil {
		return fmt.Errorf("apiserver: metrics: %w", err)
	}
	if s.throttled, err = m.Int64Counter("kplane.apiserver.requests.throttled", metric.WithDescription("Calls refused with 429 because the in-flight limit of their kind was reached.")); err != nil {
		return fmt.Errorf("apiserver: metrics: %w", err)
	}
	if s.consistentLists.counter, err = m.Int64Counter("kplane.apiserver.consistent_lists", metric.WithDescription("Consistent lists (resourceVersion unset), by resource, source (cache or store) and reason (fresh; unsupported: the store's progress notifications are not ordered; timeout: the cache did not catch up in time; error).")); err != nil {
		return fmt.Errorf("apiserver: metrics: %w", err)
	}
	// API Priority and Fairness, under kube-apiserver's names and labels.
	if s.apfMetrics.dispatched, err = m.Int64Counter("apiserver_flowcontrol_dispatched_requests", metric.WithDescription("Requests released by API Priority and Fairness for execution, by flow_schema and priority_level.")); err != nil {
		return fmt.Errorf("apiserver: metrics: %w", err)
	}
	if s.apfMetrics.rejected, err = m.Int64Counter("apiserver_flowcontrol_rejected_requests", metric.WithDescription("Requests API Priority and Fairness refused with 429, by flow_schema, priority_level and reason (queue-full, concurrency-limit, time-out, cancelled).")); err != nil {
		return fmt.Errorf("apiserver: metrics: %w", err)
	}
	if s.apfMetrics.wait, err = m.Float64Histogram("apiserver_flowcontrol_request_wait_duration_seconds", metric.WithUnit("s"),
		metric.WithDescription("Time a request waited for its seats, by flow_schema, priority_level and whether it then executed."),
		metric.WithExplicitBucketBoundaries(0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30)); err != nil {
		return fmt.Errorf("apiserver: metrics: %w", err)
	}
	s.metricsReg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for name, c := range s.cachers {
			c.mu.Lock()
			w, n, e := len(c.watchers), len(c.state), len(c.events)
			c.mu.Unlock()
			attrs := metric.WithAttributes(attribute.String("resource", name))
			o.ObserveInt64(watchers, int64(w), attrs)
			o.ObserveInt64(objects, int64(n), attrs)
			o.ObserveInt64(window, int64(e), attrs)
		}
		return nil
	}, watchers, objects, window)
	if err != nil {
		return fmt.Errorf("apiserver: metrics: %w", err)
	}
	return nil
}

// apfMetrics are the counters and the histogram of API Priority and
// Fairness (Kubernetes' apiserver_flowcontrol_* series).
type apfMetrics struct {
	dispatched, rejected metric.Int64Counter
	wait                 metric.Float64Histogram
}
