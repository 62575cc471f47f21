// This file holds the ResourceQuota admission plugin. A write that a quota
// of its namespace tracks is checked by k8s.io/apiserver's CheckRequest
// (Kubernetes' own rules and messages) against the quotas' status, and the
// usage it adds is written to the quotas' status.used in the same store
// transaction as the object itself, each quota compared on its
// mod_revision: of two API-service replicas charging one quota at once,
// one transaction fails, reads the quota again and is checked against the
// new usage, so a quota is never overspent. Usage is given back by the
// resource quota controller, which recounts the namespace's objects.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	k8scorev1 "k8s.io/api/core/v1"
	k8serrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	"k8s.io/apiserver/pkg/authentication/user"
	quotav1 "k8s.io/apiserver/pkg/quota/v1"

	"github.com/kplane/kplane/internal/quota"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// maxQuotaAttempts bounds how often a write is checked again after
// another writer changed one of its quotas first.
const maxQuotaAttempts = 32

// quotaCharge is one write's quota check: the request as Kubernetes'
// admission sees it, and the evaluator of its resource.
type quotaCharge struct {
	s     *Server
	attrs admission.Attributes
	eval  quotav1.Evaluator
	ns    string
}

// newQuotaCharge returns the check of a create or update of obj (old: the
// object updated), or nil when no quota can apply: a cluster-scoped or
// ignored resource, a namespace, a write the evaluator does not handle, or
// a namespace without quotas.
func (s *Server) newQuotaCharge(ctx context.Context, c *call, r *resourceInfo, op request.Operation, obj, old proto.Message, dry bool) (*quotaCharge, error) {
	gr := schema.GroupResource{Group: r.Group, Resource: r.Resource}
	ns := meta(obj).GetNamespace()
	if !r.Namespaced || ns == "" || quota.Ignored(gr) || (op != request.Create && op != request.Update) {
		return nil, nil
	}
	quotas, err := s.namespaceQuotas(ctx, ns, false)
	if err != nil || len(quotas) == 0 {
		return nil, err
	}
	k8sObj, err := quota.ToK8s(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var k8sOld runtime.Object
	if old != nil {
		if k8sOld, err = quota.ToK8s(old); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
	}
	aop := admission.Create
	if op == request.Update {
		aop = admission.Update
	}
	var u user.Info
	if c.attrs.User.Name != "" {
		u = &user.DefaultInfo{Name: c.attrs.User.Name, Groups: c.attrs.User.Groups}
	}
	attrs := admission.NewAttributesRecord(k8sObj, k8sOld, schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind},
		ns, c.attrs.Name, gr.WithVersion(r.Version), c.attrs.Subresource, aop, nil, dry, u)
	eval := quota.Evaluator(gr, nil, time.Now)
	if !eval.Handles(attrs) {
		return nil, nil
	}
	return &quotaCharge{s: s, attrs: attrs, eval: eval, ns: ns}, nil
}

// namespaceQuotas are ns's ResourceQuotas, from the watch cache or (fresh)
// from the store, each with its resourceVersion (its mod_revision).
func (s *Server) namespaceQuotas(ctx context.Context, ns string, fresh bool) ([]*corev1.ResourceQuota, error) {
	r := s.resources["resourcequotas"]
	var items []proto.Message
	if fresh {
		page, err := s.store.list(ctx, r, ns, 0, "", 0, nil)
		if err != nil {
			return nil, err
		}
		items = page.items
	} else {
		ch := s.cachers["resourcequotas"]
		if err := ch.waitReady(ctx); err != nil {
			return nil, err
		}
		items, _ = ch.snapshot(func(m proto.Message) bool { return meta(m).GetNamespace() == ns })
	}
	out := make([]*corev1.ResourceQuota, len(items))
	for i, it := range items {
		out[i] = it.(*corev1.ResourceQuota)
	}
	return out, nil
}

// check runs Kubernetes' quota check against quotas and returns what the
// write must add to its transaction: for each quota whose usage grows, a
// comparison on its mod_revision and the put of its new status.
func (q *quotaCharge) check(quotas []*corev1.ResourceQuota) (*txnExtra, map[string]int64, error) {
	k8s := make([]k8scorev1.ResourceQuota, len(quotas))
	for i, rq := range quotas {
		o, err := quota.ToK8s(rq)
		if err != nil {
			return nil, nil, apierrors.NewInternalError(err)
		}
		k8s[i] = *o.(*k8scorev1.ResourceQuota)
	}
	out, err := resourcequota.CheckRequest(k8s, q.attrs, q.eval, nil)
	if err != nil {
		return nil, nil, q.refusal(err)
	}
	r := q.s.resources["resourcequotas"]
	x := &txnExtra{}
	revs := map[string]int64{}
	for i := range out {
		if quotav1.Equals(out[i].Status.Used, k8s[i].Status.Used) {
			continue
		}
		n := proto.Clone(quotas[i]).(*corev1.ResourceQuota)
		if n.Status == nil {
			n.Status = &corev1.ResourceQuotaStatus{}
		}
		n.Status.Used = quota.Quantities(out[i].Status.Used)
		m := meta(n)
		rev, err := parseRV(m.GetResourceVersion())
		if err != nil {
			return nil, nil, apierrors.NewInternalError(fmt.Errorf("quota %s: %w", m.GetName(), err))
		}
		key := q.s.store.key(r, m.GetNamespace(), m.GetName())
		val, err := q.s.store.encode(r, key, n)
		if err != nil {
			return nil, nil, err
		}
		x.cmps = append(x.cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
		x.ops = append(x.ops, clientv3.OpPut(key, string(val)))
		x.reads = append(x.reads, key)
		revs[key] = rev
	}
	return x, revs, nil
}

// refusal turns CheckRequest's error into kplane's: its Forbidden keeps
// Kubernetes' message.
func (q *quotaCharge) refusal(err error) error {
	var se *k8serrors.StatusError
	if errors.As(err, &se) && se.ErrStatus.Reason == "Forbidden" {
		out := apierrors.NewForbidden(q.attrs.GetResource().Group, q.attrs.GetResource().Resource, q.attrs.GetName(), "")
		out.Message = se.ErrStatus.Message
		return out
	}
	return apierrors.NewInternalError(err)
}

// wrap returns write with the quota charge added to its transaction,
// checked again from the store's quotas whenever one of them changed
// before the transaction: the write fails with the refusal should the
// quota no longer allow it. A conflict on anything else (a Service's
// addresses) is returned for the caller to resolve.
func (q *quotaCharge) wrap(ctx context.Context, write func(*txnExtra) (int64, error)) func(*txnExtra) (int64, error) {
	if q == nil {
		return write
	}
	return func(outer *txnExtra) (int64, error) {
		ctx, span := q.s.tracer.Start(ctx, "admission.ResourceQuota")
		defer span.End()
		quotas, err := q.s.namespaceQuotas(ctx, q.ns, false)
		if err != nil {
			return 0, err
		}
		fresh := false
		for attempt := 0; ; attempt++ {
			x, revs, err := q.check(quotas)
			if err != nil && !fresh {
				// A refusal decided from the watch cache is decided again
				// from the store: the cache may not have the usage the
				// controller gave back yet.
				if quotas, err = q.s.namespaceQuotas(ctx, q.ns, true); err != nil {
					return 0, err
				}
				fresh = true
				x, revs, err = q.check(quotas)
			}
			if err != nil {
				return 0, err
			}
			if outer != nil {
				x.cmps = append(x.cmps, outer.cmps...)
				x.ops = append(x.ops, outer.ops...)
				x.reads = append(x.reads, outer.reads...)
			}
			rev, err := write(x)
			var ec *extraConflict
			if !errors.As(err, &ec) || !quotaMoved(ec, revs) {
				return rev, err
			}
			if attempt >= maxQuotaAttempts {
				return 0, apierrors.NewConflict(q.attrs.GetResource().Group, q.attrs.GetResource().Resource, q.attrs.GetName(),
					"the namespace's resource quotas kept changing; try again")
			}
			if quotas, err = q.s.namespaceQuotas(ctx, q.ns, true); err != nil {
				return 0, err
			}
			fresh = true
		}
	}
}

// quotaMoved reports whether one of the quotas compared changed (or went).
func quotaMoved(ec *extraConflict, revs map[string]int64) bool {
	for k, rev := range revs {
		kv := ec.current[k]
		if kv == nil || kv.ModRevision != rev {
			return true
		}
	}
	return false
}

// dryRun checks a dry-run write against the cached quotas, writing
// nothing.
func (q *quotaCharge) dryRun(ctx context.Context) error {
	if q == nil {
		return nil
	}
	quotas, err := q.s.namespaceQuotas(ctx, q.ns, false)
	if err != nil {
		return err
	}
	if _, _, err = q.check(quotas); err == nil {
		return nil
	}
	if quotas, err = q.s.namespaceQuotas(ctx, q.ns, true); err != nil {
		return err
	}
	_, _, err = q.check(quotas)
	return err
}
