// This file holds the storage layer over the etcd v3 store: objects under
// /registry/ in kube-apiserver's format and layout, with resourceVersion as the key's mod_revision,
// optional encryption at rest and expiry, and compare-and-swap writes and
// paged lists.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/proto/apierrors"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/encryption"
)

// maxObjectBytes bounds a stored object: the store's request limit is
// 1.5 MiB (docs/design.md, "Bounded input"); leave room for the key and
// the Txn.
const maxObjectBytes = 1536*1024 - 4096

// storage keeps objects in an etcd v3 store under
// <prefix><path>/<namespace>/<name> (cluster-scoped: <prefix><path>/<name>;
// path is kubeKeyPath) in kube-apiserver's protobuf envelope
// (storageformat.go); custom resources under <prefix><group>/<plural>/...
// as JSON, as kube-apiserver keys and stores them. resourceVersion is the key's mod_revision; it is never stored in
// the value.
type storage struct {
	cli    *clientv3.Client
	prefix string // "/registry/"
	// enc encrypts the values of some resources at rest (nil: none).
	enc *encryption.Transformers
	// ttls are how long objects of a resource live after each write
	// (events: --event-ttl), through leases; resources not in it live on.
	ttls   map[string]time.Duration
	leases *leaseManager
	// wire holds, per resource, the fields whose protobuf differs from
	// Kubernetes' (storagewire.go).
	wire wirePlans
	// own is this replica's latest write of the resources admission
	// reads from the watch cache (ownwrites.go).
	own *ownWrites
	// progressOrdered: the store sends a watch progress notification only
	// after every event at or below its revision (consistentlist.go).
	progressOrdered atomic.Bool
}

// commitPut commits the transaction txn builds around a put of one of r's
// objects, with the put's options: a lease for resources whose objects
// expire. A shared lease the store no longer knows (revoked, or lost with a
// restored store) is dropped and the write tried once more with a new one.
func (s *storage) commitPut(ctx context.Context, r *resourceInfo, txn func(opts ...clientv3.OpOption) clientv3.Txn) (*clientv3.TxnResponse, error) {
	ttl := s.ttls[r.storedAs().Resource]
	if ttl <= 0 || r.custom != nil {
		return txn().Commit()
	}
	for attempt := 0; ; attempt++ {
		id, err := s.leases.lease(ctx, ttl)
		if err != nil {
			return nil, err
		}
		resp, err := txn(clientv3.WithLease(id)).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			s.leases.forget(id)
			continue
		}
		return resp, err
	}
}

// casError is returned by a compare-and-swap whose comparison failed; cur
// is the object as it stands (nil if gone).
type casError struct {
	cur proto.Message
	rev int64
}

func (e *casError) Error() string { return "compare-and-swap failed" }

func (s *storage) collectionKey(r *resourceInfo, ns string) string {
	if r.Namespaced && ns != "" {
		return s.prefix + r.storagePath() + "/" + ns + "/"
	}
	return s.prefix + r.storagePath() + "/"
}

func (s *storage) key(r *resourceInfo, ns, name string) string {
	if r.Namespaced {
		return s.prefix + r.storagePath() + "/" + ns + "/" + name
	}
	return s.prefix + r.storagePath() + "/" + name
}

// encode marshals obj without its resourceVersion, encrypted if r's
// objects are encrypted at rest.
func (s *storage) encode(r *resourceInfo, key string, obj proto.Message) ([]byte, error) {
	m := meta(obj)
	rv := m.ResourceVersion
	m.ResourceVersion = ""
	var b []byte
	var err error
	if o, ok := obj.(*dynamicv1.Object); ok {
		// Custom objects are stored as their JSON, as kube-apiserver
		// stores them, without the protobuf format's marker.
		b, err = customToJSON(o)
	} else if isCRDs(r) {
		b, err = crdToStored(obj)
	} else {
		b, err = s.marshalStored(r, obj)
	}
	m.ResourceVersion = rv
	if err != nil {
		return nil, fmt.Errorf("encoding object: %w", err)
	}
	if len(b) > maxObjectBytes {
		return nil, apierrors.NewRequestEntityTooLarge(fmt.Sprintf("limit is %d bytes", maxObjectBytes))
	}
	if t := s.enc.For(r.storedAs().Resource, r.storedAs().Group); t != nil {
		if b, err = t.ToStorage(key, b); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
	}
	return b, nil
}

// decode decrypts (if r's objects are encrypted at rest) and unmarshals a
// stored value, and sets its resourceVersion.
func (s *storage) decode(r *resourceInfo, key string, value []byte, rev int64) (proto.Message, error) {
	value, err := s.fromStorage(r, key, value)
	if err != nil {
		return nil, err
	}
	return s.decodePlain(r, value, rev)
}

// marshalStored writes a built-in object in kube-apiserver's storage
// format as r's storage version. Its apiVersion and kind are left out of
// the object's own bytes: kube-apiserver's messages have no such fields,
// the envelope carries them.
func (s *storage) marshalStored(r *resourceInfo, obj proto.Message) ([]byte, error) {
	st := r.storedAs()
	m := obj.ProtoReflect()
	fields := m.Descriptor().Fields()
	for _, name := range []protoreflect.Name{"api_version", "kind"} {
		if fd := fields.ByName(name); fd != nil && m.Has(fd) {
			v := m.Get(fd)
			m.Clear(fd)
			defer m.Set(fd, v)
		}
	}
	if plan := s.wire.planFor(r); plan != nil {
		// Some of its fields differ on the wire: marshal, then rewrite.
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if b, err = plan.transcode(make([]byte, 0, len(b)+len(b)/8), b, true); err != nil {
			return nil, err
		}
		return appendStoredRaw(nil, st.APIVersion(), st.Kind, b), nil
	}
	return appendStored(nil, st.APIVersion(), st.Kind, obj)
}

// fromStorage undoes encryption at rest, if any, and checks and strips the
// storage format's envelope: what it returns is the object's protobuf (a
// custom object's JSON).
func (s *storage) fromStorage(r *resourceInfo, key string, value []byte) ([]byte, error) {
	if t := s.enc.For(r.storedAs().Resource, r.storedAs().Group); t != nil {
		var err error
		if value, err = t.FromStorage(key, value); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
	}
	if r.custom != nil {
		return value, nil // JSON, decoded by decodePlain
	}
	if isCRDs(r) {
		return value, nil // JSON, decoded by decodePlain
	}
	value, err := unmarkStored(r, key, value)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if plan := s.wire.planFor(r); plan != nil {
		if value, err = plan.transcode(make([]byte, 0, len(value)), value, false); err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("%s: %w", key, err))
		}
	}
	return value, nil
}

// decodePlain decodes an object's protobuf, or a custom object's or a
// CustomResourceDefinition's JSON (already decrypted).
func (s *storage) decodePlain(r *resourceInfo, value []byte, rev int64) (proto.Message, error) {
	var obj proto.Message
	switch {
	case r.custom != nil:
		o, err := customFromJSON(r, value)
		if err != nil {
			return nil, err
		}
		obj = o
	case isCRDs(r):
		o, err := crdFromStored(value)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		obj = o
	default:
		obj = r.New()
		if err := proto.Unmarshal(value, obj); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", r.Resource, err)
		}
	}
	meta(obj).ResourceVersion = formatRV(rev)
	setTypeMeta(r, obj)
	return obj, nil
}

// decodeMeta decodes only the metadata of an object's protobuf: num is the
// number of its metadata field. ok is false if value is not well formed
// (the full decode then reports why).
func decodeMeta(value []byte, num protowire.Number) (m *metav1.ObjectMeta, ok bool) {
	m = &metav1.ObjectMeta{}
	for len(value) > 0 {
		n, typ, l := protowire.ConsumeTag(value)
		if l < 0 {
			return nil, false
		}
		value = value[l:]
		if n == num && typ == protowire.BytesType {
			b, l := protowire.ConsumeBytes(value)
			if l < 0 {
				return nil, false
			}
			// Repeated occurrences of a message field merge, as in a full decode.
			if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(b, m); err != nil {
				return nil, false
			}
			value = value[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, value)
		if l < 0 {
			return nil, false
		}
		value = value[l:]
	}
	return m, true
}

// storeErr maps store errors: request too large → RequestEntityTooLarge,
// compacted → Expired, the rest internal.
func storeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), storeTimedOut(err):
		return apierrors.NewTimeout("the request was cancelled or timed out: " + err.Error())
	case errors.Is(err, rpctypes.ErrRequestTooLarge):
		return apierrors.NewRequestEntityTooLarge(err.Error())
	case errors.Is(err, rpctypes.ErrCompacted):
		return apierrors.NewResourceExpired("The resourceVersion for the provided list is too old.")
	case errors.Is(err, rpctypes.ErrFutureRev):
		return apierrors.NewTimeout("Too large resource version")
	}
	return apierrors.NewInternalError(fmt.Errorf("store: %w", err))
}

// storeTimedOut reports whether err is the store giving up on a request in
// time (its own timeouts, or a deadline that reached it over gRPC), which
// the API answers 504 as kube-apiserver does, not 500.
func storeTimedOut(err error) bool {
	for _, t := range []error{rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrTimeoutWaitAppliedIndex} {
		if errors.Is(err, t) {
			return true
		}
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// get reads one object with a linearizable read.
func (s *storage) get(ctx context.Context, r *resourceInfo, ns, name string) (proto.Message, error) {
	resp, err := s.cli.Get(ctx, s.key(r, ns, name))
	if err != nil {
		return nil, storeErr(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, apierrors.NewNotFound(r.Group, r.Resource, name)
	}
	kv := resp.Kvs[0]
	return s.decode(r, string(kv.Key), kv.Value, kv.ModRevision)
}

// txnExtra is what a write of one object adds to the object's own
// transaction: comparisons on other keys that must hold too, the operations
// done with the write, and the keys read back if the transaction fails
// (Service addressing: the members of a range the object claims or gives
// back).
type txnExtra struct {
	cmps  []clientv3.Cmp
	ops   []clientv3.Op
	reads []string
}

// extraConflict is returned when the object's own comparison held but one
// of txnExtra's did not; current holds the read-back keys that exist, by
// key.
type extraConflict struct {
	current map[string]*mvccpb.KeyValue
}

func (e *extraConflict) Error() string { return "a comparison on an allocation failed" }

func (x *txnExtra) readOps() []clientv3.Op {
	ops := make([]clientv3.Op, 0, len(x.reads))
	for _, k := range x.reads {
		ops = append(ops, clientv3.OpGet(k))
	}
	return ops
}

func (x *txnExtra) conflict(resp *clientv3.TxnResponse) *extraConflict {
	ec := &extraConflict{current: map[string]*mvccpb.KeyValue{}}
	for _, r := range resp.Responses[1:] {
		if rr := r.GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
			ec.current[string(rr.Kvs[0].Key)] = rr.Kvs[0]
		}
	}
	return ec
}

// create writes obj if its key is absent and returns the revision written.
func (s *storage) create(ctx context.Context, r *resourceInfo, ns, name string, obj proto.Message) (int64, error) {
	return s.createWith(ctx, r, ns, name, obj, nil)
}

// createWith is create with x's comparisons and operations in the same
// transaction: when one of x's comparisons fails it returns an
// *extraConflict.
func (s *storage) createWith(ctx context.Context, r *resourceInfo, ns, name string, obj proto.Message, x *txnExtra) (int64, error) {
	if x == nil {
		x = &txnExtra{}
	}
	key := s.key(r, ns, name)
	val, err := s.encode(r, key, obj)
	if err != nil {
		return 0, err
	}
	resp, err := s.commitPut(ctx, r, func(opts ...clientv3.OpOption) clientv3.Txn {
		return s.cli.Txn(ctx).
			If(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, x.cmps...)...).
			Then(append([]clientv3.Op{clientv3.OpPut(key, string(val), opts...)}, x.ops...)...).
			Else(append([]clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly())}, x.readOps()...)...)
	})
	if err != nil {
		return 0, storeErr(err)
	}
	if !resp.Succeeded {
		if len(resp.Responses) > 0 && len(resp.Responses[0].GetResponseRange().GetKvs()) == 0 && len(x.cmps) > 0 {
			return 0, x.conflict(resp)
		}
		return 0, apierrors.NewAlreadyExists(r.Group, r.Resource, name)
	}
	s.own.note(r.storedAs().Resource, resp.Header.Revision)
	return resp.Header.Revision, nil
}

// update writes obj if the key's mod_revision is still rev. On a failed
// comparison it returns a *casError with the current object (nil if gone).
func (s *storage) update(ctx context.Context, r *resourceInfo, ns, name string, rev int64, obj proto.Message) (int64, error) {
	return s.updateWith(ctx, r, ns, name, rev, obj, nil)
}

// updateWith is update with x's comparisons and operations in the same
// transaction: when one of x's comparisons fails it returns an
// *extraConflict.
func (s *storage) updateWith(ctx context.Context, r *resourceInfo, ns, name string, rev int64, obj proto.Message, x *txnExtra) (int64, error) {
	if x == nil {
		x = &txnExtra{}
	}
	key := s.key(r, ns, name)
	val, err := s.encode(r, key, obj)
	if err != nil {
		return 0, err
	}
	resp, err := s.commitPut(ctx, r, func(opts ...clientv3.OpOption) clientv3.Txn {
		return s.cli.Txn(ctx).
			If(append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, x.cmps...)...).
			Then(append([]clientv3.Op{clientv3.OpPut(key, string(val), opts...)}, x.ops...)...).
			Else(append([]clientv3.Op{clientv3.OpGet(key)}, x.readOps()...)...)
	})
	if err != nil {
		return 0, storeErr(err)
	}
	if !resp.Succeeded {
		return 0, s.failure(r, rev, x, resp)
	}
	s.own.note(r.storedAs().Resource, resp.Header.Revision)
	return resp.Header.Revision, nil
}

// failure tells a failed comparison on the object (a *casError) from one
// of x's (an *extraConflict).
func (s *storage) failure(r *resourceInfo, rev int64, x *txnExtra, resp *clientv3.TxnResponse) error {
	if len(x.cmps) > 0 && len(resp.Responses) > 0 {
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 && kvs[0].ModRevision == rev {
			return x.conflict(resp)
		}
	}
	return s.casFailure(r, resp)
}

// remove deletes the key if its mod_revision is still rev.
func (s *storage) remove(ctx context.Context, r *resourceInfo, ns, name string, rev int64) (int64, error) {
	return s.removeWith(ctx, r, ns, name, rev, nil)
}

// removeWith is remove with x's comparisons and operations in the same
// transaction: when one of x's comparisons fails it returns an
// *extraConflict.
func (s *storage) removeWith(ctx context.Context, r *resourceInfo, ns, name string, rev int64, x *txnExtra) (int64, error) {
	if x == nil {
		x = &txnExtra{}
	}
	key := s.key(r, ns, name)
	resp, err := s.cli.Txn(ctx).
		If(append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, x.cmps...)...).
		Then(append([]clientv3.Op{clientv3.OpDelete(key)}, x.ops...)...).
		Else(append([]clientv3.Op{clientv3.OpGet(key)}, x.readOps()...)...).
		Commit()
	if err != nil {
		return 0, storeErr(err)
	}
	if !resp.Succeeded {
		return 0, s.failure(r, rev, x, resp)
	}
	s.own.note(r.storedAs().Resource, resp.Header.Revision)
	return resp.Header.Revision, nil
}

func (s *storage) casFailure(r *resourceInfo, resp *clientv3.TxnResponse) error {
	ce := &casError{rev: resp.Header.Revision}
	if len(resp.Responses) > 0 {
		if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
			kv := rr.Kvs[0]
			obj, err := s.decode(r, string(kv.Key), kv.Value, kv.ModRevision)
			if err != nil {
				return err
			}
			ce.cur = obj
		}
	}
	return ce
}

// listPage is one page of a list read from the store.
type listPage struct {
	items []proto.Message
	rev   int64  // the revision the page was read at
	next  string // continue token, "" on the last page
}

// list reads keys under the collection at revision rev (0: latest,
// linearizable), starting at from (inclusive), at most limit matching items
// (0: all). match filters decoded objects; the store is read in chunks so a
// selective filter does not return short pages needlessly.
func (s *storage) list(ctx context.Context, r *resourceInfo, ns string, rev int64, from string, limit int64, sel *selector) (*listPage, error) {
	prefix := s.collectionKey(r, ns)
	start := prefix
	if from != "" {
		if !strings.HasPrefix(from, prefix) {
			return nil, apierrors.NewBadRequest("continue token does not belong to this list")
		}
		start = from
	}
	// A selector on metadata alone (namespace, labels) is tried on the
	// decoded metadata first: an object it rejects is never decoded whole.
	var metaNum protowire.Number
	if sel != nil && sel.fields.Empty() && !sel.labels.Empty() && r.custom == nil && !isCRDs(r) {
		if fd := r.New().ProtoReflect().Descriptor().Fields().ByName("metadata"); fd != nil && fd.Kind() == protoreflect.MessageKind {
			metaNum = fd.Number()
		}
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	page := &listPage{rev: rev}
	chunk := int64(500)
	if limit > 0 && limit < chunk {
		chunk = limit + 1
	}
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(chunk)}
		if page.rev > 0 {
			opts = append(opts, clientv3.WithRev(page.rev))
		}
		resp, err := s.cli.Get(ctx, start, opts...)
		if err != nil {
			return nil, storeErr(err)
		}
		if page.rev == 0 {
			page.rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			value, err := s.fromStorage(r, string(kv.Key), kv.Value)
			if err != nil {
				return nil, err
			}
			if metaNum != 0 {
				if m, ok := decodeMeta(value, metaNum); ok && !sel.matchesMeta(m) {
					continue
				}
			}
			obj, err := s.decodePlain(r, value, kv.ModRevision)
			if err != nil {
				return nil, err
			}
			if sel != nil && !sel.matches(obj) {
				continue
			}
			if limit > 0 && int64(len(page.items)) == limit {
				page.next = encodeContinue(string(kv.Key), page.rev)
				return page, nil
			}
			page.items = append(page.items, obj)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return page, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		// More is needed than the last read gave (a selector filters, or
		// the list is not paged): read more at once, up to 10,000 keys, as
		// Kubernetes does, rather than many small reads, each of which etcd
		// 3.4 answers in time proportional to the rest of the range.
		chunk = min(2*chunk, 10000)
	}
}

// lastModRevision is the highest mod_revision among the resource's keys,
// read linearizably (0 if there are none): a watch cache that has applied
// it holds every object the store has now.
func (s *storage) lastModRevision(ctx context.Context, r *resourceInfo) (int64, error) {
	resp, err := s.cli.Get(ctx, s.collectionKey(r, ""), append(clientv3.WithLastRev(), clientv3.WithKeysOnly())...)
	if err != nil {
		return 0, storeErr(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].ModRevision, nil
}

// revision is the store's current revision, read linearizably.
func (s *storage) revision(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, s.prefix, clientv3.WithCountOnly())
	if err != nil {
		return 0, storeErr(err)
	}
	return resp.Header.Revision, nil
}
