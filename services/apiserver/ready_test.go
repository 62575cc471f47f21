// This file holds the test that Ready waits until every sink holds the
// bootstrap objects.

package apiserver

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
)

// slowSink records the names it was given, slowly, as a cache that takes
// its time to index would.
type slowSink struct {
	mu    sync.Mutex
	names map[string]bool
}

func (s *slowSink) Upsert(obj any) {
	time.Sleep(20 * time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[meta(obj.(proto.Message)).GetName()] = true
}

func (s *slowSink) Delete(obj any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.names, meta(obj.(proto.Message)).GetName())
}

func (s *slowSink) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name]
}

// TestReadyWaitsForInformers: when Ready is closed, every sink already
// holds every bootstrap object, however slowly it takes them in; before,
// Ready fired as the feeds started, and the RBAC cache could answer an
// early Forbidden.
func TestReadyWaitsForInformers(t *testing.T) {
	sink := &slowSink{names: map[string]bool{}}
	var boot []proto.Message
	for i := range 10 {
		boot = append(boot, &rbacv1.ClusterRole{Metadata: &metav1.ObjectMeta{Name: fmt.Sprintf("role-%d", i)}})
	}
	newEnv(t, func(c *Config) {
		c.Informers = map[string][]ObjectSink{"clusterroles": {sink}}
		c.Bootstrap = boot
	})
	for i := range 10 {
		if name := fmt.Sprintf("role-%d", i); !sink.has(name) {
			t.Errorf("at Ready the sink does not hold bootstrap ClusterRole %s", name)
		}
	}
}
