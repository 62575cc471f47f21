// This file holds the store leases that make objects expire (events, after
// --event-ttl), shared among the writes of a short window as kube-apiserver
// shares them, so that a burst of events grants one lease, not one each.

package apiserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultEventTTL is kube-apiserver's default --event-ttl.
const DefaultEventTTL = time.Hour

// Lease sharing, as kube-apiserver's: a lease is granted for the TTL plus a
// reuse window of 5% of the TTL (at most a minute), and handed to every
// write that asks for the same TTL within that window, up to 1,000 objects:
// each object then lives between TTL and TTL plus the window.
const (
	leaseReuseFraction   = 0.05
	leaseReuseMax        = time.Minute
	leaseMaxObjects      = 1000
	leaseMinGrantSeconds = 1
)

// leaseManager hands out shared leases for one TTL at a time.
type leaseManager struct {
	cli clientv3.Lease
	now func() time.Time

	mu      sync.Mutex
	id      clientv3.LeaseID
	ttl     time.Duration // the TTL the current lease serves
	expires time.Time     // when the current lease ends
	objects int           // writes given the current lease
}

func newLeaseManager(cli clientv3.Lease) *leaseManager {
	return &leaseManager{cli: cli, now: time.Now}
}

// lease returns a lease under which an object lives at least ttl from now.
func (m *leaseManager) lease(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if m.id != 0 && m.ttl == ttl && m.objects < leaseMaxObjects && !m.expires.Before(now.Add(ttl)) {
		m.objects++
		return m.id, nil
	}
	reuse := min(time.Duration(float64(ttl)*leaseReuseFraction), leaseReuseMax)
	secs := max(int64((ttl+reuse+time.Second-1)/time.Second), leaseMinGrantSeconds)
	resp, err := m.cli.Grant(ctx, secs)
	if err != nil {
		return 0, fmt.Errorf("grant a %ds lease: %w", secs, err)
	}
	m.id, m.ttl, m.objects = resp.ID, ttl, 1
	m.expires = now.Add(time.Duration(resp.TTL) * time.Second)
	return m.id, nil
}

// forget drops id if it is the current lease, so the next write gets a new
// one.
func (m *leaseManager) forget(id clientv3.LeaseID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.id == id {
		m.id = 0
	}
}
