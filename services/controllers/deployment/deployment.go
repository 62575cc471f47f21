// Package deployment is the Deployment controller: one ReplicaSet per pod
// template, named <deployment>-<pod-template-hash>, rolled forward with the
// RollingUpdate (maxSurge, maxUnavailable) or Recreate strategy; old
// ReplicaSets beyond revisionHistoryLimit are deleted; status and the
// Progressing and Available conditions are what `kubectl rollout status`
// reads. Each sync recomputes everything from the informer caches, so a
// controller restarted in the middle of a rollout resumes it.
package deployment

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubeconv"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// Well-known names.
const (
	HashLabel          = "pod-template-hash"
	RevisionAnnotation = "deployment.kubernetes.io/revision"
	// DesiredReplicasAnnotation and MaxReplicasAnnotation record, on each
	// ReplicaSet, the Deployment's replicas and replicas+maxSurge when the
	// ReplicaSet was last scaled: a difference means the Deployment was
	// scaled since, and the annotated maximum is the base of proportional
	// scaling.
	DesiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	MaxReplicasAnnotation     = "deployment.kubernetes.io/max-replicas"
)

// DeploymentClient writes Deployments (*client.Client[*appsv1.Deployment]).
type DeploymentClient interface {
	Update(ctx context.Context, obj *appsv1.Deployment) (*appsv1.Deployment, error)
	UpdateStatus(ctx context.Context, obj *appsv1.Deployment) (*appsv1.Deployment, error)
}

// ReplicaSetClient writes ReplicaSets (*client.Client[*appsv1.ReplicaSet]).
type ReplicaSetClient interface {
	Create(ctx context.Context, obj *appsv1.ReplicaSet) (*appsv1.ReplicaSet, error)
	Update(ctx context.Context, obj *appsv1.ReplicaSet) (*appsv1.ReplicaSet, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// Config wires a Controller; New adds handlers to the shared informers.
type Config struct {
	Deployments DeploymentClient
	ReplicaSets ReplicaSetClient
	DInformer   *client.Informer[*appsv1.Deployment]
	RSInformer  *client.Informer[*appsv1.ReplicaSet]
	PodInformer *client.Informer[*corev1.Pod]
	Recorder    *client.Recorder
	Logger      *slog.Logger
	// TracerProvider records a span per reconcile, in the trace of the
	// object's last change; nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the Deployment controller.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
	now   func() time.Time
}

// New returns a controller and registers its informer handlers.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "deployment"), queue: client.NewQueue("deployment", 0, 0), now: time.Now}
	cfg.DInformer.AddEventHandler(client.EnqueueHandler[*appsv1.Deployment](c.queue))
	owner := func(rs *appsv1.ReplicaSet) {
		if r := ctrl.ControllerRef(rs); r != nil && r.GetKind() == "Deployment" {
			c.queue.Add(client.KeyOf(rs.GetMetadata().GetNamespace(), r.GetName()))
		}
	}
	cfg.RSInformer.AddEventHandler(client.Handler[*appsv1.ReplicaSet]{
		OnAdd:    owner,
		OnUpdate: func(o, n *appsv1.ReplicaSet) { owner(o); owner(n) },
		OnDelete: owner,
	})
	if cfg.PodInformer != nil {
		// Recreate waits for old pods to be gone.
		cfg.PodInformer.AddEventHandler(client.Handler[*corev1.Pod]{OnDelete: func(p *corev1.Pod) {
			r := ctrl.ControllerRef(p)
			if r == nil || r.GetKind() != "ReplicaSet" {
				return
			}
			if rs, ok := cfg.RSInformer.Store().GetByName(p.GetMetadata().GetNamespace(), r.GetName()); ok {
				owner(rs)
			}
		}})
	}
	return c
}

// Run waits for the caches, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	syncers := []client.Syncer{c.cfg.DInformer, c.cfg.RSInformer}
	if c.cfg.PodInformer != nil {
		syncers = append(syncers, c.cfg.PodInformer)
	}
	if !client.WaitForCacheSync(ctx, syncers...) {
		return
	}
	client.RunWorkers(ctx, c.queue, workers, client.TracedReconciler(c.cfg.TracerProvider, "deployment.reconcile", c.cfg.DInformer.Store(), c.Reconcile), c.log)
}

// TemplateHash is the pod-template-hash of a template, computed as
// Kubernetes' controller.ComputeHash computes it: the template is rendered
// as Kubernetes JSON into k8s.io/api's core/v1 PodTemplateSpec, dumped as
// Kubernetes dumps objects for hashing (k8s.io/apimachinery's
// dump.ForHash) into FNV-32a, followed by the collision count (8 bytes,
// little-endian) if set, and the decimal sum is safe-encoded (consonants
// and digits). It depends only on the template's content, not on the
// protobuf encoding (field numbers or order), so it is stable across
// restarts and rebuilds; it changes only when k8s.io/api's types gain
// fields, as Kubernetes' does across versions. A field kplane has and
// k8s.io/api lacks does not enter the hash; two templates differing only
// there share a hash and the collision count separates them. The result
// equals Kubernetes' for the same template content
// (TestTemplateHashIsKubernetes); a real cluster's hash of "the same"
// manifest can still differ where its API service defaults fields that
// kplane's types lack (it adds securityContext: {} to every pod spec).
// Changing this function does not restart rollouts: the current
// ReplicaSet is found by comparing templates, not names.
func TemplateHash(t *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	var kt k8scorev1.PodTemplateSpec
	b, err := kubejson.Marshal(t)
	if err == nil {
		err = json.Unmarshal(b, &kt)
	}
	if err != nil {
		// Not expected for a template the API service accepted; hash the
		// deterministic protobuf encoding instead.
		b, _ = proto.MarshalOptions{Deterministic: true}.Marshal(t)
		_, _ = h.Write(b)
	} else {
		_, _ = io.WriteString(h, dump.ForHash(kt))
	}
	if collisionCount != nil {
		cc := make([]byte, 8)
		binary.LittleEndian.PutUint32(cc, uint32(*collisionCount))
		_, _ = h.Write(cc)
	}
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// templateWithoutHash is t with the pod-template-hash label removed.
func templateWithoutHash(t *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	c := proto.Clone(t).(*corev1.PodTemplateSpec)
	if c.GetMetadata() != nil {
		delete(c.Metadata.Labels, HashLabel)
		if len(c.Metadata.Labels) == 0 {
			c.Metadata.Labels = nil
		}
	}
	return c
}

// EqualIgnoreHash reports whether two templates differ at most in their
// pod-template-hash label.
func EqualIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	return proto.Equal(templateWithoutHash(a), templateWithoutHash(b))
}

func replicas(rs *appsv1.ReplicaSet) int32 { return rs.GetSpec().GetReplicas() }

func revision(o ctrl.Object) int64 {
	n, _ := strconv.ParseInt(o.GetMetadata().GetAnnotations()[RevisionAnnotation], 10, 64)
	return n
}

// Reconcile syncs the Deployment named by key.
func (c *Controller) Reconcile(ctx context.Context, key string) (client.Result, error) {
	cached, ok := c.cfg.DInformer.Store().Get(key)
	if !ok {
		return client.Result{}, nil
	}
	d := proto.Clone(cached).(*appsv1.Deployment)
	sel, err := kubeconv.Selector(d.GetSpec().GetSelector())
	if err != nil {
		return client.Result{}, fmt.Errorf("deployment %s: selector: %w", key, err)
	}
	if sel.Empty() {
		return client.Result{}, nil // selects everything: refuse, as Kubernetes does
	}
	all, err := c.replicaSets(ctx, d, sel)
	if err != nil {
		return client.Result{}, err
	}
	newRS, old := c.split(d, all)
	if d.GetMetadata().GetDeletionTimestamp() != nil {
		return c.syncStatus(ctx, d, newRS, all, false)
	}
	if d.GetSpec().GetPaused() {
		// Scaling still applies to a paused Deployment, as in Kubernetes.
		scaled, err := c.scaleReplicaSets(ctx, d, newRS, old)
		if err != nil {
			return client.Result{}, err
		}
		if err := c.cleanup(ctx, d, old); err != nil {
			return client.Result{}, err
		}
		return c.syncStatus(ctx, d, newRS, all, scaled)
	}
	// A scaling event is a step of its own (Recreate has no proportional
	// step: with two active ReplicaSets it goes on with its strategy).
	recreateMidway := d.GetSpec().GetStrategy().GetType() == "Recreate" && len(active(all)) > 1
	if newRS != nil && !recreateMidway && isScalingEvent(d, newRS, old) {
		scaled, err := c.scaleReplicaSets(ctx, d, newRS, old)
		if err != nil {
			return client.Result{}, err
		}
		if err := c.cleanup(ctx, d, old); err != nil {
			return client.Result{}, err
		}
		return c.syncStatus(ctx, d, newRS, all, scaled)
	}
	if newRS == nil {
		newRS, err = c.createNewRS(ctx, d, old)
		if err != nil {
			return client.Result{}, err
		}
		all = append(all, newRS)
	} else if err := c.syncRevision(ctx, d, newRS, old); err != nil {
		return client.Result{}, err
	}
	var scaled bool
	if d.GetSpec().GetStrategy().GetType() == "Recreate" {
		scaled, err = c.recreate(ctx, d, newRS, old)
	} else {
		scaled, err = c.rollingUpdate(ctx, d, newRS, old)
	}
	if err != nil {
		return client.Result{}, err
	}
	if err := c.cleanup(ctx, d, old); err != nil {
		return client.Result{}, err
	}
	return c.syncStatus(ctx, d, newRS, all, scaled)
}

// replicaSets are copies of the ReplicaSets d controls, after adopting
// the orphans its selector matches (as after an orphaning delete of an
// earlier Deployment of the same name).
func (c *Controller) replicaSets(ctx context.Context, d *appsv1.Deployment, sel labels.Selector) ([]*appsv1.ReplicaSet, error) {
	var out []*appsv1.ReplicaSet
	for _, rs := range c.cfg.RSInformer.Store().ByNamespace(d.GetMetadata().GetNamespace()) {
		r := ctrl.ControllerRef(rs)
		switch {
		case r != nil && r.GetUid() == d.GetMetadata().GetUid():
			out = append(out, proto.Clone(rs).(*appsv1.ReplicaSet))
		case r == nil && d.GetMetadata().GetDeletionTimestamp() == nil && rs.GetMetadata().GetDeletionTimestamp() == nil &&
			sel.Matches(labels.Set(rs.GetMetadata().GetLabels())):
			u := proto.Clone(rs).(*appsv1.ReplicaSet)
			u.Metadata.OwnerReferences = append(u.Metadata.OwnerReferences, ctrl.NewControllerRef(d, "apps/v1", "Deployment"))
			got, err := c.cfg.ReplicaSets.Update(ctx, u)
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("deployment %s: adopt %s: %w", client.Key(d), client.Key(rs), err)
			}
			out = append(out, got)
		}
	}
	return out, nil
}

// split finds the ReplicaSet whose template is d's (the oldest if several)
// and returns the others, oldest first.
func (c *Controller) split(d *appsv1.Deployment, all []*appsv1.ReplicaSet) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet) {
	sort.SliceStable(all, func(i, j int) bool {
		ti, tj := all[i].GetMetadata().GetCreationTimestamp().AsTime(), all[j].GetMetadata().GetCreationTimestamp().AsTime()
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return all[i].GetMetadata().GetName() < all[j].GetMetadata().GetName()
	})
	var newRS *appsv1.ReplicaSet
	var old []*appsv1.ReplicaSet
	for _, rs := range all {
		if newRS == nil && EqualIgnoreHash(rs.GetSpec().GetTemplate(), d.GetSpec().GetTemplate()) {
			newRS = rs
			continue
		}
		old = append(old, rs)
	}
	return newRS, old
}

func maxRevision(rss []*appsv1.ReplicaSet) int64 {
	var m int64
	for _, rs := range rss {
		m = max(m, revision(rs))
	}
	return m
}

// createNewRS creates the ReplicaSet for d's current template.
func (c *Controller) createNewRS(ctx context.Context, d *appsv1.Deployment, old []*appsv1.ReplicaSet) (*appsv1.ReplicaSet, error) {
	hash := TemplateHash(d.GetSpec().GetTemplate(), collisionCount(d))
	tmpl := proto.Clone(d.GetSpec().GetTemplate()).(*corev1.PodTemplateSpec)
	if tmpl.Metadata == nil {
		tmpl.Metadata = &metav1.ObjectMeta{}
	}
	if tmpl.Metadata.Labels == nil {
		tmpl.Metadata.Labels = map[string]string{}
	}
	tmpl.Metadata.Labels[HashLabel] = hash
	sel := proto.Clone(d.GetSpec().GetSelector()).(*metav1.LabelSelector)
	if sel.MatchLabels == nil {
		sel.MatchLabels = map[string]string{}
	}
	sel.MatchLabels[HashLabel] = hash
	lbls := map[string]string{}
	for k, v := range tmpl.Metadata.Labels {
		lbls[k] = v
	}
	rev := strconv.FormatInt(maxRevision(old)+1, 10)
	var initial int32
	if d.GetSpec().GetStrategy().GetType() != "Recreate" {
		initial = newReplicas(d, nil, old)
	}
	annotations := map[string]string{RevisionAnnotation: rev}
	setReplicasAnnotations(annotations, d)
	rs := &appsv1.ReplicaSet{
		ApiVersion: "apps/v1", Kind: "ReplicaSet",
		Metadata: &metav1.ObjectMeta{
			Name: d.GetMetadata().GetName() + "-" + hash, Namespace: d.GetMetadata().GetNamespace(),
			Labels:          lbls,
			Annotations:     annotations,
			OwnerReferences: []*metav1.OwnerReference{ctrl.NewControllerRef(d, "apps/v1", "Deployment")},
		},
		Spec: &appsv1.ReplicaSetSpec{Replicas: proto.Int32(initial), MinReadySeconds: d.GetSpec().GetMinReadySeconds(), Selector: sel, Template: tmpl},
	}
	got, err := c.cfg.ReplicaSets.Create(ctx, rs)
	if apierrors.IsAlreadyExists(err) {
		// Ours but not yet in the cache, or a hash collision: bump the
		// collision count only if the existing one is not ours with our template.
		if ex, ok := c.cfg.RSInformer.Store().GetByName(rs.Metadata.Namespace, rs.Metadata.Name); ok {
			if r := ctrl.ControllerRef(ex); r != nil && r.GetUid() == d.GetMetadata().GetUid() && EqualIgnoreHash(ex.GetSpec().GetTemplate(), d.GetSpec().GetTemplate()) {
				return proto.Clone(ex).(*appsv1.ReplicaSet), nil
			}
			st := proto.Clone(d).(*appsv1.Deployment)
			if st.Status == nil {
				st.Status = &appsv1.DeploymentStatus{}
			}
			st.Status.CollisionCount = proto.Int32(d.GetStatus().GetCollisionCount() + 1)
			if _, uerr := c.cfg.Deployments.UpdateStatus(ctx, st); uerr != nil {
				return nil, fmt.Errorf("deployment %s: record hash collision: %w", client.Key(d), uerr)
			}
		}
		return nil, fmt.Errorf("deployment %s: replicaset %s exists: %w", client.Key(d), rs.Metadata.Name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("deployment %s: create replicaset: %w", client.Key(d), err)
	}
	if initial > 0 {
		ctrl.Eventf(c.cfg.Recorder, d, client.EventNormal, "ScalingReplicaSet", "Scaled up replica set %s from 0 to %d", got.GetMetadata().GetName(), initial)
	}
	if err := c.setRevision(ctx, d, rev); err != nil {
		return nil, err
	}
	return got, nil
}

// setRevision writes the revision annotation on d.
func (c *Controller) setRevision(ctx context.Context, d *appsv1.Deployment, rev string) error {
	if d.GetMetadata().GetAnnotations()[RevisionAnnotation] == rev {
		return nil
	}
	u := proto.Clone(d).(*appsv1.Deployment)
	if u.Metadata.Annotations == nil {
		u.Metadata.Annotations = map[string]string{}
	}
	u.Metadata.Annotations[RevisionAnnotation] = rev
	got, err := c.cfg.Deployments.Update(ctx, u)
	if err != nil {
		return fmt.Errorf("deployment %s: set revision: %w", client.Key(d), err)
	}
	d.Metadata = got.Metadata
	return nil
}

// syncRevision makes newRS the newest revision (a rollback to an old
// template) and copies its revision to d.
func (c *Controller) syncRevision(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) error {
	rev := revision(newRS)
	if m := maxRevision(old); m >= rev {
		rev = m + 1
		u := proto.Clone(newRS).(*appsv1.ReplicaSet)
		if u.Metadata.Annotations == nil {
			u.Metadata.Annotations = map[string]string{}
		}
		u.Metadata.Annotations[RevisionAnnotation] = strconv.FormatInt(rev, 10)
		if u.Spec.MinReadySeconds != d.GetSpec().GetMinReadySeconds() {
			u.Spec.MinReadySeconds = d.GetSpec().GetMinReadySeconds()
		}
		got, err := c.cfg.ReplicaSets.Update(ctx, u)
		if err != nil {
			return fmt.Errorf("deployment %s: bump revision of %s: %w", client.Key(d), client.Key(newRS), err)
		}
		proto.Reset(newRS)
		proto.Merge(newRS, got)
	}
	return c.setRevision(ctx, d, strconv.FormatInt(rev, 10))
}

// cleanup deletes the oldest empty old ReplicaSets beyond revisionHistoryLimit.
func (c *Controller) cleanup(ctx context.Context, d *appsv1.Deployment, old []*appsv1.ReplicaSet) error {
	limit := d.GetSpec().RevisionHistoryLimit
	if limit == nil {
		return nil
	}
	var empty []*appsv1.ReplicaSet
	for _, rs := range old {
		if replicas(rs) == 0 && rs.GetStatus().GetReplicas() == 0 && rs.GetMetadata().GetDeletionTimestamp() == nil {
			empty = append(empty, rs)
		}
	}
	sort.SliceStable(empty, func(i, j int) bool { return revision(empty[i]) < revision(empty[j]) })
	var errs []error
	for i := 0; i < len(empty)-int(*limit); i++ {
		rs := empty[i]
		err := c.cfg.ReplicaSets.Delete(ctx, rs.GetMetadata().GetNamespace(), rs.GetMetadata().GetName(), client.DeleteOptions{UID: rs.GetMetadata().GetUid()})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deployment %s: clean up old replicasets: %w", client.Key(d), err)
	}
	return nil
}

func collisionCount(d *appsv1.Deployment) *int32 {
	if d.GetStatus() == nil {
		return nil
	}
	return d.GetStatus().CollisionCount
}
