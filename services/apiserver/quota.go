// This file holds the ResourceQuota admission plugin. A write that a quota
// of its namespace tracks is checked by k8s.io/apiserver's CheckRequest
// (Kubernetes' own rules and messages) against the quotas' status, and the
// usage it adds is written to the quotas' status.used in the same store
// transaction as the object itself, which holds only if no quota of the
// namespace was written (or created) after the quotas were read: of two
// API-service replicas charging one quota at once, one transaction fails,
// reads the quotas again from the store and is checked against the new
// usage, so a quota is never overspent, and a write reaching a replica
// whose watch cache has not seen a new quota yet is checked against it
// all the same. Usage is given back by the
// resource quota controller, which recounts the namespace's objects.

package apiserver

import (
	"context"
	"errors"
	"slices"
	"strings"
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
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// maxQuotaAttempts bounds how often a write is checked again after
// another writer changed one of its quotas first.
const maxQuotaAttempts = 32

// quotaCharge is one write's quota check: the request as Kubernetes'
// admission sees it, and the evaluator of its resource.
type quotaCharge struct {
	s     *Server
	c     *call
	r     *resourceInfo
	op    request.Operation
	obj   proto.Message
	old   proto.Message
	dry   bool
	ns    string
	eval  quotav1.Evaluator
	attrs admission.Attributes // with the objects once a quota is met
}

// newQuotaCharge returns the check of a create or update of obj (old: the
// object updated), or nil when no quota can apply: a cluster-scoped or
// ignored resource, a namespace, or a write the evaluator does not handle.
// A namespace without quotas still gets a charge: its transaction then
// proves that no quota appeared since the watch cache was read.
func (s *Server) newQuotaCharge(ctx context.Context, c *call, r *resourceInfo, op request.Operation, obj, old proto.Message, dry bool) (*quotaCharge, error) {
	gr := schema.GroupResource{Group: r.Group, Resource: r.Resource}
	ns := meta(obj).GetNamespace()
	if !r.Namespaced || ns == "" || quota.Ignored(gr) || (op != request.Create && op != request.Update) {
		return nil, nil
	}
	q := &quotaCharge{s: s, c: c, r: r, op: op, obj: obj, old: old, dry: dry, ns: ns, eval: quota.Evaluator(gr, nil, time.Now)}
	// Whether the evaluator handles the write depends on the operation,
	// not on the objects: they are converted only when a quota is met.
	if !q.eval.Handles(q.attributes(nil, nil)) {
		return nil, nil
	}
	return q, nil
}

// attributes is the write as Kubernetes' admission sees it, with obj and
// old as given.
func (q *quotaCharge) attributes(obj, old runtime.Object) admission.Attributes {
	r := q.r
	aop := admission.Create
	if q.op == request.Update {
		aop = admission.Update
	}
	var u user.Info
	if q.c.attrs.User.Name != "" {
		u = &user.DefaultInfo{Name: q.c.attrs.User.Name, Groups: q.c.attrs.User.Groups}
	}
	return admission.NewAttributesRecord(obj, old, schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind},
		q.ns, q.c.attrs.Name, schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource},
		q.c.attrs.Subresource, aop, nil, q.dry, u)
}

// convert fills attrs with the objects in Kubernetes' types, once.
func (q *quotaCharge) convert() error {
	if q.attrs != nil {
		return nil
	}
	k8sObj, err := quota.ToK8s(q.obj)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	var k8sOld runtime.Object
	if q.old != nil {
		if k8sOld, err = quota.ToK8s(q.old); err != nil {
			return apierrors.NewInternalError(err)
		}
	}
	q.attrs = q.attributes(k8sObj, k8sOld)
	return nil
}

// quotaView is a namespace's ResourceQuotas as read at rev: from the watch
// cache (which may lag the store) or from the store.
type quotaView struct {
	quotas []*corev1.ResourceQuota
	rev    int64
	fresh  bool
}

// namespaceQuotas are ns's ResourceQuotas, from the watch cache or (fresh)
// from the store, each with its resourceVersion (its mod_revision).
func (s *Server) namespaceQuotas(ctx context.Context, ns string, fresh bool) (quotaView, error) {
	r := s.resources["resourcequotas"]
	if fresh {
		page, err := s.store.list(ctx, r, ns, 0, "", 0, nil)
		if err != nil {
			return quotaView{}, err
		}
		v := quotaView{rev: page.rev, fresh: true}
		for _, it := range page.items {
			v.quotas = append(v.quotas, it.(*corev1.ResourceQuota))
		}
		return v, nil
	}
	ch := s.cachers["resourcequotas"]
	if err := ch.waitReady(ctx); err != nil {
		return quotaView{}, err
	}
	prefix := s.store.collectionKey(r, ns)
	var v quotaView
	ch.mu.Lock()
	for k, obj := range ch.state {
		if strings.HasPrefix(k, prefix) {
			v.quotas = append(v.quotas, obj.(*corev1.ResourceQuota))
		}
	}
	v.rev = ch.rev
	ch.mu.Unlock()
	slices.SortFunc(v.quotas, func(a, b *corev1.ResourceQuota) int {
		return strings.Compare(a.GetMetadata().GetName(), b.GetMetadata().GetName())
	})
	return v, nil
}

// check runs Kubernetes' quota check against the quotas and returns what
// the write must add to its transaction: a comparison proving no quota of
// the namespace changed after the view was read (so a view from a lagging
// watch cache can never let a write past a quota it did not see), and for
// each quota whose usage grows, the put of its new status.
func (q *quotaCharge) check(v quotaView) (*txnExtra, error) {
	r := q.s.resources["resourcequotas"]
	prefix := q.s.store.collectionKey(r, q.ns)
	x := &txnExtra{cmps: []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(prefix), "<", v.rev+1).WithPrefix(),
	}}
	if len(v.quotas) == 0 {
		return x, nil
	}
	if err := q.convert(); err != nil {
		return nil, err
	}
	k8s := make([]k8scorev1.ResourceQuota, len(v.quotas))
	for i, rq := range v.quotas {
		o, err := quota.ToK8s(rq)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		k8s[i] = *o.(*k8scorev1.ResourceQuota)
	}
	out, err := resourcequota.CheckRequest(k8s, q.attrs, q.eval, nil)
	if err != nil {
		return nil, q.refusal(err)
	}
	for i := range out {
		if quotav1.Equals(out[i].Status.Used, k8s[i].Status.Used) {
			continue
		}
		n := proto.Clone(v.quotas[i]).(*corev1.ResourceQuota)
		if n.Status == nil {
			n.Status = &corev1.ResourceQuotaStatus{}
		}
		n.Status.Used = quota.Quantities(out[i].Status.Used)
		m := meta(n)
		key := q.s.store.key(r, m.GetNamespace(), m.GetName())
		val, err := q.s.store.encode(r, key, n)
		if err != nil {
			return nil, err
		}
		x.ops = append(x.ops, clientv3.OpPut(key, string(val)))
	}
	return x, nil
}

// refusal turns CheckRequest's error into kplane's: its Forbidden keeps
// Kubernetes' message.
func (q *quotaCharge) refusal(err error) error {
	var se *k8serrors.StatusError
	if errors.As(err, &se) && se.ErrStatus.Reason == "Forbidden" {
		out := apierrors.NewForbidden(q.r.Group, q.r.Resource, q.c.attrs.Name, "")
		out.Message = se.ErrStatus.Message
		return out
	}
	return apierrors.NewInternalError(err)
}

// wrap returns write with the quota charge added to its transaction,
// checked again from the store's quotas whenever one of them changed
// (or appeared) after they were read: the write fails with the refusal
// should the quotas no longer allow it. A conflict on anything else (a
// Service's addresses) is returned for the caller to resolve.
func (q *quotaCharge) wrap(ctx context.Context, write func(*txnExtra) (int64, error)) func(*txnExtra) (int64, error) {
	if q == nil {
		return write
	}
	return func(outer *txnExtra) (int64, error) {
		ctx, span := q.s.tracer.Start(ctx, "admission.ResourceQuota")
		defer span.End()
		v, err := q.s.namespaceQuotas(ctx, q.ns, false)
		if err != nil {
			return 0, err
		}
		for attempt := 0; ; attempt++ {
			x, err := q.check(v)
			if err != nil && !v.fresh {
				// A refusal decided from the watch cache is decided again
				// from the store: the cache may not have the usage the
				// controller gave back yet.
				if v, err = q.s.namespaceQuotas(ctx, q.ns, true); err != nil {
					return 0, err
				}
				x, err = q.check(v)
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
			if !errors.As(err, &ec) {
				return rev, err
			}
			// One of the comparisons failed: the quotas' (read again to
			// tell) or the caller's.
			cur, rerr := q.s.namespaceQuotas(ctx, q.ns, true)
			if rerr != nil {
				return 0, rerr
			}
			if !quotasMoved(v, cur) {
				return rev, err
			}
			if attempt >= maxQuotaAttempts {
				return 0, apierrors.NewConflict(q.r.Group, q.r.Resource, q.c.attrs.Name,
					"the namespace's resource quotas kept changing; try again")
			}
			v = cur
		}
	}
}

// quotasMoved reports whether a quota of cur was written after was was
// read, or one of was is gone.
func quotasMoved(was, cur quotaView) bool {
	if len(cur.quotas) != len(was.quotas) {
		return true
	}
	for _, rq := range cur.quotas {
		if rev, _ := parseRV(rq.GetMetadata().GetResourceVersion()); rev > was.rev {
			return true
		}
	}
	return false
}

// dryRun checks a dry-run write against the cached quotas (the store's
// when the cache refuses it), writing nothing.
func (q *quotaCharge) dryRun(ctx context.Context) error {
	if q == nil {
		return nil
	}
	v, err := q.s.namespaceQuotas(ctx, q.ns, false)
	if err != nil {
		return err
	}
	if _, err = q.check(v); err == nil {
		return nil
	}
	if v, err = q.s.namespaceQuotas(ctx, q.ns, true); err != nil {
		return err
	}
	_, err = q.check(v)
	return err
}
