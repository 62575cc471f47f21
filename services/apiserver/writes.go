// This file holds the write verbs on the request path: create (with
// generateName), update and the guaranteed-update loop that patches and
// status writes share, status updates, and namespace finalization.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	certificatesv1 "github.com/kplane/kplane/proto/kplane/certificates/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

const generateNameChars = "bcdfghjklmnpqrstvwxz2456789"

func generateName(prefix string) string {
	b := make([]byte, 5)
	for i := range b {
		b[i] = generateNameChars[rand.IntN(len(generateNameChars))]
	}
	return prefix + string(b)
}

func (s *Server) create(ctx context.Context, r *resourceInfo, ns string, obj proto.Message, wo writeOptions) (_ proto.Message, err error) {
	c := s.begin(ctx, "create", r, "", ns, "")
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, apierrors.NewBadRequest("the request has no object")
	}
	dry, err := wo.dryRun()
	if err != nil {
		return nil, err
	}
	obj = proto.Clone(obj)
	m := meta(obj)
	if r.Namespaced {
		if m.Namespace == "" {
			m.Namespace = ns
		}
		if ns != "" && m.Namespace != ns {
			return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		if ns == "" {
			return nil, apierrors.NewBadRequest("a namespace is required to create " + r.Resource)
		}
	} else if m.Namespace != "" {
		m.Namespace = ""
	}
	setTypeMeta(r, obj)
	generated := m.Name == "" && m.GenerateName != ""
	prepareForCreate(r, obj)
	if o, ok := obj.(*dynamicv1.Object); ok && statusServedAt(ctx, r) {
		o.Status = nil // written through the status subresource only
	}
	if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
		prepareCSRCreate(csr, c.attrs.User)
	}
	for attempt := 0; ; attempt++ {
		try := obj
		if generated {
			// Each attempt starts from the request's object: defaults and
			// a Job's generated labels name the attempt's name.
			try = proto.Clone(obj)
			meta(try).Name = generateName(m.GenerateName)
		}
		c.attrs.Name = meta(try).Name
		out, err := s.createOnce(ctx, c, r, try, dry)
		if generated && apierrors.IsAlreadyExists(err) && attempt < 8 {
			continue
		}
		return out, err
	}
}

func prepareForCreate(r *resourceInfo, obj proto.Message) {
	m := meta(obj)
	m.Uid = uuid.NewString()
	m.CreationTimestamp = now()
	m.ResourceVersion = ""
	m.Generation = 1
	m.DeletionTimestamp = nil
	m.DeletionGracePeriodSeconds = nil
	switch o := obj.(type) {
	case *corev1.Event, *certificatesv1.CertificateSigningRequest:
		// Kubernetes' Event and CertificateSigningRequest strategies keep
		// no generation: it stays 0 (omitted) through every write.
		m.Generation = 0
	case *corev1.Pod:
		// Status belongs to the node agent; a new pod is Pending.
		o.Status = &corev1.PodStatus{Phase: "Pending"}
	case *appsv1.Deployment:
		o.Status = nil
	case *appsv1.ReplicaSet:
		o.Status = nil
	case *corev1.ReplicationController:
		o.Status = nil
	case *appsv1.DaemonSet:
		prepareDaemonSetCreate(o)
	case *apiextensionsv1.CustomResourceDefinition:
		prepareCRDCreate(o)
	case *appsv1.StatefulSet:
		prepareStatefulSet(o, nil)
	case *corev1.PersistentVolumeClaim, *corev1.PersistentVolume:
		prepareVolumeCreate(o)
	case *policyv1.PodDisruptionBudget:
		// As Kubernetes' strategy: a new budget's status is empty (its
		// counts written as zeros) until the disruption controller's.
		o.Status = &policyv1.PodDisruptionBudgetStatus{}
	case *discoveryv1.EndpointSlice:
		prepareEndpointSliceWrite(o, nil)
	default:
		prepareMoreKinds(obj, nil)
	case *batchv1.CronJob:
		o.Status = nil // a Job's is cleared with its generated selector
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		o.Status = nil // then written by typeCheckPolicy
	case *corev1.ResourceQuota:
		// The resource quota controller fills it.
		o.Status = nil
	case *corev1.Namespace:
		o.Status = &corev1.NamespaceStatus{Phase: "Active"}
		// As in Kubernetes: every new namespace is held, once deleted, until
		// the namespace controller has emptied it and finalized it.
		if o.Spec == nil {
			o.Spec = &corev1.NamespaceSpec{}
		}
		if !slices.Contains(o.Spec.Finalizers, namespaceFinalizer) {
			o.Spec.Finalizers = append(o.Spec.Finalizers, namespaceFinalizer)
		}
	}
}

func (s *Server) createOnce(ctx context.Context, c *call, r *resourceInfo, obj proto.Message, dry bool) (proto.Message, error) {
	adm := s.admission(c, request.Create, obj, nil, dry)
	if err := s.mutate(ctx, c, adm); err != nil {
		return nil, err
	}
	if p, ok := obj.(*corev1.Pod); ok {
		p.Status.QosClass = podQOSClass(p.GetSpec())
	}
	if j, ok := obj.(*batchv1.Job); ok {
		generateJobSelector(j)
	}
	if err := s.validate(ctx, c, r, obj, nil); err != nil {
		return nil, err
	}
	if err := s.typeCheckPolicy(obj); err != nil {
		return nil, err
	}
	if err := s.admitValidating(ctx, c, adm); err != nil {
		return nil, err
	}
	q, err := s.newQuotaCharge(ctx, c, r, request.Create, obj, nil, dry)
	if err != nil {
		return nil, err
	}
	if dry {
		if err := q.dryRun(ctx); err != nil {
			return nil, err
		}
		return obj, s.dryRunAddresses(ctx, obj, nil)
	}
	m := meta(obj)
	setTraceAnnotation(ctx, m)
	var rev int64
	err = s.storeStage(ctx, c, func(ctx context.Context) (err error) {
		rev, err = s.storeCreate(ctx, r, obj, q)
		return err
	})
	if err != nil {
		return nil, err
	}
	m.ResourceVersion = formatRV(rev)
	return obj, nil
}

// checkTarget fills an object's name and namespace from the request, or
// refuses a mismatch.
func checkTarget(r *resourceInfo, obj proto.Message, ns, name string) error {
	m := meta(obj)
	if m.Name == "" {
		m.Name = name
	}
	if m.Name != name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.Name, name))
	}
	if r.Namespaced {
		if m.Namespace == "" {
			m.Namespace = ns
		}
		if m.Namespace != ns {
			return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
	}
	return nil
}

// beginUpdate is the common start of a write to an existing object
// (update, updateStatus): the request's audit record, authentication and
// authorization, then the request's own checks — an object, a valid dryRun,
// a name and namespace that match the URL. It returns a copy of obj with
// its TypeMeta set.
func (s *Server) beginUpdate(ctx context.Context, r *resourceInfo, sub, ns, name string, obj proto.Message, wo writeOptions) (*call, proto.Message, bool, error) {
	c := s.begin(ctx, "update", r, sub, ns, name)
	if err := s.authnz(ctx, c); err != nil {
		return c, nil, false, err
	}
	if obj == nil {
		return c, nil, false, apierrors.NewBadRequest("the request has no object")
	}
	dry, err := wo.dryRun()
	if err != nil {
		return c, nil, false, err
	}
	obj = proto.Clone(obj)
	if err := checkTarget(r, obj, ns, name); err != nil {
		return c, nil, false, err
	}
	setTypeMeta(r, obj)
	return c, obj, dry, nil
}

func (s *Server) update(ctx context.Context, r *resourceInfo, ns, name string, obj proto.Message, wo writeOptions) (_ proto.Message, err error) {
	c, obj, dry, err := s.beginUpdate(ctx, r, "", ns, name, obj, wo)
	defer func() { s.end(ctx, c, err) }()
	if err != nil {
		return nil, err
	}
	clientRV := meta(obj).GetResourceVersion()
	return s.guaranteedUpdate(ctx, c, r, ns, name, clientRV, dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		// Checked once the object is known to exist, as kube-apiserver's
		// update does: an update of an absent object is NotFound.
		if clientRV == "" && !r.AllowUnconditionalUpdate {
			return nil, nil, invalid(r, name, fieldErrRequiredRV())
		}
		if err := s.uidPrecondition(r, ns, name, obj, old); err != nil {
			return nil, nil, err
		}
		n := proto.Clone(obj)
		prepareForUpdate(r, n, old)
		writeStatusAtVersion(ctx, r, n, obj, old)
		return n, s.admission(c, request.Update, n, old, dry), nil
	})
}

// uidPrecondition refuses, as kube-apiserver does, a write whose object
// names a uid other than the stored object's: the uid is a precondition
// (the object may have been deleted and created again), never a change. An
// object without a uid writes whatever is stored.
func (s *Server) uidPrecondition(r *resourceInfo, ns, name string, obj, old proto.Message) error {
	want, have := meta(obj).GetUid(), meta(old).GetUid()
	if want == "" || want == have {
		return nil
	}
	return apierrors.NewConflict(r.Group, r.Resource, name, fmt.Sprintf(
		"StorageError: invalid object, Code: 4, Key: %s, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: %s, UID in object meta: %s",
		s.store.key(r, ns, name), want, have))
}

// prepareForUpdate carries over what a client may not change through the
// main resource: identity, timestamps, status (for resources with a status
// subresource), and bumps generation when the spec changed.
func prepareForUpdate(r *resourceInfo, obj, old proto.Message) {
	m, om := meta(obj), meta(old)
	m.Uid = om.GetUid()
	m.CreationTimestamp = om.GetCreationTimestamp()
	m.DeletionTimestamp = om.GetDeletionTimestamp()
	m.DeletionGracePeriodSeconds = om.DeletionGracePeriodSeconds
	m.Generation = om.GetGeneration()
	if r.HasStatus {
		copyField(obj, old, "status")
	}
	if ns, ok := obj.(*corev1.Namespace); ok {
		// spec.finalizers change only through namespaces/finalize.
		if ns.Spec == nil {
			ns.Spec = &corev1.NamespaceSpec{}
		}
		ns.Spec.Finalizers = old.(*corev1.Namespace).GetSpec().GetFinalizers()
	}
	if ds, ok := obj.(*appsv1.DaemonSet); ok {
		prepareDaemonSetUpdate(ds, old.(*appsv1.DaemonSet))
	}
	if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
		prepareCRDUpdate(crd)
	}
	if ss, ok := obj.(*appsv1.StatefulSet); ok {
		prepareStatefulSet(ss, old.(*appsv1.StatefulSet))
	}
	// As in Kubernetes, where defaults are applied when the request is
	// decoded, before this: a field the client left out and defaulting
	// fills is no change (kubectl apply of a StatefulSet's claim
	// templates, a list it replaces whole, sends them undefaulted).
	defaulted := proto.Clone(obj)
	setDefaults(defaulted)
	if m.Generation != 0 && !specEqual(defaulted, old) {
		m.Generation++
	}
	if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
		prepareCSRUpdate(csr, old.(*certificatesv1.CertificateSigningRequest))
	}
	if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
		prepareEndpointSliceWrite(es, old.(*discoveryv1.EndpointSlice))
	}
	prepareMoreKinds(obj, old)
}

// mutation builds the new object from the current one for one attempt of
// a guaranteed update, with the admission record for it.
type mutation func(old proto.Message) (proto.Message, *request.Admission, error)

// guaranteedUpdate applies f to the current object and writes the result
// with a compare-and-swap on the current object's revision. With a client
// resourceVersion a stale one is a Conflict (never retried on the client's
// behalf); without one (an unconditional update, or a server-side update of
// a subresource) a lost race is retried with the new current object.
func (s *Server) guaranteedUpdate(ctx context.Context, c *call, r *resourceInfo, ns, name, clientRV string, dry bool, f mutation) (proto.Message, error) {
	// The first attempt starts from the watch cache's copy instead of a
	// store read, as Kubernetes' cacher hands its cached object to
	// GuaranteedUpdate: when the copy is current (nearly always) the update
	// costs one store round trip instead of two. When it is stale the
	// compare-and-swap fails and returns the store's current value for the
	// next attempt; and anything decided from a copy not known to be current
	// (a refusal, a conflict, a dry run, "nothing changed") is decided again
	// from the store.
	old, current := s.cachedCopy(r, ns, name), false
	for attempt := 0; ; attempt++ {
		if old == nil {
			var err error
			if old, err = s.store.get(ctx, r, ns, name); err != nil {
				return nil, err
			}
			current = true
		}
		n, err := s.tryUpdate(ctx, c, r, name, clientRV, old, f)
		if err != nil || dry || proto.Equal(n, old) {
			if !current {
				old = nil // decide from the store's value
				continue
			}
			if err != nil {
				return nil, err
			}
			if dry {
				return n, s.dryRunAddresses(ctx, n, old)
			}
			return old, nil // nothing changed: no write, as in Kubernetes
		}
		m := meta(n)
		oldRV := m.GetResourceVersion()
		setTraceAnnotation(ctx, m)
		rev, _ := parseRV(oldRV)
		var newRev int64
		finished := m.DeletionTimestamp != nil && !heldByFinalizers(n) && m.GetDeletionGracePeriodSeconds() == 0
		err = s.storeStage(ctx, c, func(ctx context.Context) (err error) {
			if finished {
				newRev, err = s.storeRemove(ctx, r, ns, name, rev, n)
			} else {
				var q *quotaCharge
				if q, err = s.newQuotaCharge(ctx, c, r, request.Update, n, old, false); err != nil {
					return err
				}
				newRev, err = s.storeUpdate(ctx, r, ns, name, rev, n, old, q)
			}
			return err
		})
		var ce *casError
		if errors.As(err, &ce) {
			if ce.cur == nil {
				return nil, apierrors.NewNotFound(r.Group, r.Resource, name)
			}
			if (clientRV != "" && current) || attempt >= maxGuaranteedAttempts {
				return nil, apierrors.NewConflict(r.Group, r.Resource, name, apierrors.ConflictModified)
			}
			old, current = ce.cur, true
			continue
		}
		if err != nil {
			return nil, err
		}
		m.ResourceVersion = formatRV(newRev)
		return n, nil
	}
}

// tryUpdate is one attempt of guaranteedUpdate from old: the mutation,
// admission and validation; the result carries old's resourceVersion.
func (s *Server) tryUpdate(ctx context.Context, c *call, r *resourceInfo, name, clientRV string, old proto.Message, f mutation) (proto.Message, error) {
	oldRV := meta(old).GetResourceVersion()
	if clientRV != "" && clientRV != oldRV {
		return nil, apierrors.NewConflict(r.Group, r.Resource, name, apierrors.ConflictModified)
	}
	n, adm, err := f(old)
	if err != nil {
		return nil, err
	}
	if err := s.mutate(ctx, c, adm); err != nil {
		return nil, err
	}
	if adm.Subresource == "" || adm.Subresource == "status" || adm.Subresource == "scale" || adm.Subresource == "finalize" || adm.Subresource == "approval" ||
		adm.Subresource == "ephemeralcontainers" {
		if err := s.validate(ctx, c, r, n, old); err != nil {
			return nil, err
		}
	}
	if adm.Subresource == "" {
		if err := s.typeCheckPolicy(n); err != nil {
			return nil, err
		}
	}
	if err := s.admitValidating(ctx, c, adm); err != nil {
		return nil, err
	}
	meta(n).ResourceVersion = oldRV
	return n, nil
}

// cachedCopy is a copy of the object from the watch cache, or nil when the
// cache does not hold it (or is not ready).
func (s *Server) cachedCopy(r *resourceInfo, ns, name string) proto.Message {
	ch := s.cacherFor(r)
	if ch == nil {
		return nil
	}
	select {
	case <-ch.ready:
	default:
		return nil
	}
	ch.mu.Lock()
	obj, ok := ch.state[s.store.key(r, ns, name)]
	ch.mu.Unlock()
	if !ok {
		return nil
	}
	return proto.Clone(obj)
}

func (s *Server) updateStatus(ctx context.Context, r *resourceInfo, ns, name string, obj proto.Message, wo writeOptions) (_ proto.Message, err error) {
	c, obj, dry, err := s.beginUpdate(ctx, r, "status", ns, name, obj, wo)
	defer func() { s.end(ctx, c, err) }()
	if err != nil {
		return nil, err
	}
	clientRV := meta(obj).GetResourceVersion()
	return s.guaranteedUpdate(ctx, c, r, ns, name, clientRV, dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		if err := s.uidPrecondition(r, ns, name, obj, old); err != nil {
			return nil, nil, err
		}
		n := proto.Clone(old)
		copyField(n, obj, "status")
		if csr, ok := n.(*certificatesv1.CertificateSigningRequest); ok {
			prepareCSRStatus(csr, old.(*certificatesv1.CertificateSigningRequest))
		}
		if pv, ok := n.(*corev1.PersistentVolume); ok {
			preparePersistentVolumeStatus(pv, old.(*corev1.PersistentVolume))
		}
		// Labels (but a Deployment's), annotations, finalizers and owner
		// references (but a Pod's) may change through status, as in
		// Kubernetes, whose status strategies reset only those; a custom
		// object's status strategy keeps all of the old metadata.
		_, custom := n.(*dynamicv1.Object)
		if _, ok := n.(*appsv1.Deployment); !ok && !custom {
			meta(n).Labels = meta(obj).GetLabels()
		}
		if !custom {
			meta(n).Annotations = meta(obj).GetAnnotations()
			meta(n).Finalizers = meta(obj).GetFinalizers()
		}
		if _, ok := n.(*corev1.Pod); !ok && !custom {
			meta(n).OwnerReferences = meta(obj).GetOwnerReferences()
		}
		// The gateway records the status writer in managedFields.
		if mf := meta(obj).GetManagedFields(); len(mf) > 0 {
			meta(n).ManagedFields = mf
		}
		return n, s.admission(c, request.Update, n, old, dry), nil
	})
}

// namespaceFinalizer is the spec finalizer every namespace gets at
// creation; the namespace controller removes it once the namespace is empty.
const namespaceFinalizer = "kubernetes"

// heldByFinalizers reports whether obj, once being deleted, must stay: it
// has metadata finalizers, or (a namespace) spec finalizers.
func heldByFinalizers(obj proto.Message) bool {
	if len(meta(obj).GetFinalizers()) > 0 {
		return true
	}
	ns, ok := obj.(*corev1.Namespace)
	return ok && len(ns.GetSpec().GetFinalizers()) > 0
}

// finalize writes a namespace's spec.finalizers (namespaces/finalize): the
// only way to change them after creation. A namespace being deleted goes
// once none are left (nor metadata finalizers).
func (s *Server) finalize(ctx context.Context, r *resourceInfo, name string, obj proto.Message, wo writeOptions) (_ proto.Message, err error) {
	c, obj, dry, err := s.beginUpdate(ctx, r, "finalize", "", name, obj, wo)
	defer func() { s.end(ctx, c, err) }()
	if err != nil {
		return nil, err
	}
	want := obj.(*corev1.Namespace).GetSpec().GetFinalizers()
	return s.guaranteedUpdate(ctx, c, r, "", name, meta(obj).GetResourceVersion(), dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		n := proto.Clone(old).(*corev1.Namespace)
		if n.Spec == nil {
			n.Spec = &corev1.NamespaceSpec{}
		}
		n.Spec.Finalizers = slices.Clone(want)
		return n, s.admission(c, request.Update, n, old, dry), nil
	})
}
