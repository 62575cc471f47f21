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
