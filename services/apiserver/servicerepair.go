// This file holds the repair of the cluster IP and node port records, as
// Kubernetes' repair controllers do: from one snapshot of the Services and
// the records, a member a Service holds without a record is recorded, and a
// record no Service holds is released, each in a transaction that holds only
// if neither the record nor the Service changed since the snapshot.

package apiserver

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// repairResult counts what one repair did.
type repairResult struct {
	recorded, released, conflicts int
}

// repairServiceAddresses runs one repair over both ranges.
func (s *Server) repairServiceAddresses(ctx context.Context) (repairResult, error) {
	var res repairResult
	r := s.resources["services"]
	page, err := s.store.list(ctx, r, "", 0, "", 0, nil)
	if err != nil {
		return res, err
	}
	type holder struct {
		owner allocationOwner
		key   string // the Service's store key
		rev   int64  // its mod revision
	}
	held := map[string]holder{} // record key → the Service holding it
	byOwner := map[string]holder{}
	for _, obj := range page.items {
		svc := obj.(*corev1.Service)
		m := svc.GetMetadata()
		rev, _ := parseRV(m.GetResourceVersion())
		h := holder{owner: allocationOwner{Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUid()}, key: s.store.key(r, m.GetNamespace(), m.GetName()), rev: rev}
		byOwner[h.owner.UID] = h
		ips, ports := s.svcs.heldMembers(svc.GetSpec())
		for _, i := range ips {
			k := s.svcs.ips.key(s.svcs.ips.name(i))
			if o, dup := held[k]; dup {
				s.log.Warn("a cluster IP is held by two services", "ip", s.svcs.ips.name(i), "service", o.owner.Namespace+"/"+o.owner.Name, "other", m.GetNamespace()+"/"+m.GetName())
				res.conflicts++
				continue
			}
			held[k] = h
		}
		for _, i := range ports {
			k := s.svcs.ports.key(s.svcs.ports.name(i))
			if o, dup := held[k]; dup {
				s.log.Warn("a node port is held by two services", "port", s.svcs.ports.name(i), "service", o.owner.Namespace+"/"+o.owner.Name, "other", m.GetNamespace()+"/"+m.GetName())
				res.conflicts++
				continue
			}
			held[k] = h
		}
	}
	for _, mr := range []*memberRange{s.svcs.ips, s.svcs.ports} {
		resp, err := s.store.cli.Get(ctx, mr.keyPrefix, clientv3.WithPrefix(), clientv3.WithRev(page.rev))
		if err != nil {
			return res, storeErr(err)
		}
		present := map[string]bool{}
		for _, kv := range resp.Kvs {
			k := string(kv.Key)
			present[k] = true
			o, _ := parseOwner(kv.Value)
			if h, ok := held[k]; ok && h.owner.UID == o.UID {
				continue
			}
			if h, ok := held[k]; ok {
				// Held by another Service than the record says: log it,
				// as Kubernetes reports it; nothing is moved.
				s.log.Warn("a range record names another service than the one holding it", "member", strings.TrimPrefix(k, mr.keyPrefix), "record", o.Namespace+"/"+o.Name, "service", h.owner.Namespace+"/"+h.owner.Name)
				res.conflicts++
				continue
			}
			// No Service holds it: release it if neither it nor its
			// owner (gone, or changed) moved since the snapshot.
			cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision)}
			if h, ok := byOwner[o.UID]; ok {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(h.key), "=", h.rev))
			} else if o.UID != "" {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.store.key(r, o.Namespace, o.Name)), "=", 0))
			}
			tr, err := s.store.cli.Txn(ctx).If(cmps...).Then(clientv3.OpDelete(k)).Commit()
			if err != nil {
				return res, storeErr(err)
			}
			if tr.Succeeded {
				res.released++
				s.log.Info("released a range member no service holds", "range", mr.what, "member", strings.TrimPrefix(k, mr.keyPrefix), "record", o.Namespace+"/"+o.Name)
			}
		}
		for k, h := range held {
			if !strings.HasPrefix(k, mr.keyPrefix) || present[k] {
				continue
			}
			tr, err := s.store.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0), clientv3.Compare(clientv3.ModRevision(h.key), "=", h.rev)).
				Then(clientv3.OpPut(k, h.owner.value())).Commit()
			if err != nil {
				return res, storeErr(err)
			}
			if tr.Succeeded {
				res.recorded++
				s.log.Info("recorded a range member a service held without a record", "range", mr.what, "member", strings.TrimPrefix(k, mr.keyPrefix), "service", h.owner.Namespace+"/"+h.owner.Name)
			}
		}
	}
	return res, nil
}

// runServiceRepair repairs the records every interval until ctx ends, the
// first time at once.
func (s *Server) runServiceRepair(ctx context.Context) {
	every := s.cfg.ServiceRepairInterval
	if every <= 0 {
		every = defaultServiceRepairInterval
	}
	for {
		if _, err := s.repairServiceAddresses(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("repairing the service range records", "err", fmt.Errorf("repair: %w", err))
		}
		if !sleep(ctx, every) {
			return
		}
	}
}
