// This file holds the test of the work-queue metrics.

package workqueuemetrics

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

var (
	testRegistry = prometheus.NewRegistry()
	installOnce  sync.Once
	runs         int
)

// value returns the value of metric family for the queue named queue.
func value(t *testing.T, family, queue string) float64 {
	t.Helper()
	mfs, err := testRegistry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == queue {
					if c := m.GetCounter(); c != nil {
						return c.GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s for queue %s", family, queue)
	return 0
}

// TestInstall: a named queue created after Install reports its adds, depth
// and retries under Kubernetes' metric names.
func TestInstall(t *testing.T) {
	// client-go takes only the first provider of the process: install
	// once, and give each run (go test -count=N) a queue of its own.
	installOnce.Do(func() { Install(testRegistry) })
	runs++
	name := fmt.Sprintf("test-queue-%d", runs)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		// The retried item waits an hour, so the depth below stays 2.
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	q.AddRateLimited("c")
	for family, want := range map[string]float64{"workqueue_adds_total": 2, "workqueue_depth": 2, "workqueue_retries_total": 1} {
		if got := value(t, family, name); got != want {
			t.Errorf("%s{name=%q}: %v, want %v", family, name, got, want)
		}
	}
}
