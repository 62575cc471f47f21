// This file holds the lease table: leases granted and revoked, and the keys
// attached to each, deleted with it.

package mvcc

import (
	"slices"
	"strings"
)

// The lease table: which leases exist, their granted TTL, and which keys are
// attached to each. Expiry is not decided here: the Raft leader decides when a
// lease expires and proposes its revoke, which every replica then applies.

// LeaseInfo describes one lease and the keys attached to it, sorted.
type LeaseInfo struct {
	ID, TTL int64
	Keys    [][]byte
}

// attach records key under lease id; the caller holds s.mu and has checked
// that the lease exists. id 0 means no lease.
func (s *Store) attach(id int64, key []byte) {
	if id == 0 {
		return
	}
	if l, ok := s.leases[id]; ok {
		l.keys[string(key)] = struct{}{}
	}
}

// detach removes key from lease id, if attached.
func (s *Store) detach(id int64, key []byte) {
	if id == 0 {
		return
	}
	if l, ok := s.leases[id]; ok {
		delete(l.keys, string(key))
	}
}

// LeaseGrant adds lease id with the given TTL (seconds) to the table. It
// returns ErrLeaseExists if id is already granted and ErrLeaseNotFound for id
// 0, which is etcd's "no lease". It does not change the revision.
func (s *Store) LeaseGrant(id, ttl int64) error {
	if id == 0 {
		return ErrLeaseNotFound
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.leases[id]; ok {
		return ErrLeaseExists
	}
	s.leases[id] = &lease{id: id, ttl: ttl, keys: make(map[string]struct{})}
	return nil
}

// LeaseRevoke removes lease id and deletes every key attached to it, in key
// order, in one revision; with no keys attached the revision does not move.
// It returns the store's revision afterwards, or ErrLeaseNotFound.
func (s *Store) LeaseRevoke(id int64) (rev int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok {
		return 0, ErrLeaseNotFound
	}
	keys := sortedKeys(l.keys)
	w := s.newWriter()
	for _, k := range keys {
		ki, ok := s.tree.Get(keyIndex{key: []byte(k)})
		if ok && ki.live() != nil {
			w.deleteKey(ki)
		}
	}
	delete(s.leases, id)
	return w.commit(), nil
}

func sortedKeys(m map[string]struct{}) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, strings.Compare)
	return keys
}

func (l *lease) info() LeaseInfo {
	info := LeaseInfo{ID: l.id, TTL: l.ttl}
	for _, k := range sortedKeys(l.keys) {
		info.Keys = append(info.Keys, []byte(k))
	}
	return info
}

// Lease returns lease id and its attached keys.
func (s *Store) Lease(id int64) (LeaseInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.leases[id]
	if !ok {
		return LeaseInfo{}, false
	}
	return l.info(), true
}

// Leases returns every lease, sorted by ID.
func (s *Store) Leases() []LeaseInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := make([]int64, 0, len(s.leases))
	for id := range s.leases {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]LeaseInfo, len(ids))
	for i, id := range ids {
		out[i] = s.leases[id].info()
	}
	return out
}
