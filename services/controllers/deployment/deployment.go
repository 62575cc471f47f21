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
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/apimachinery/pkg/util/rand"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/apierrors"
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

// ResolveFenceposts turns maxSurge and maxUnavailable into pod counts for
// replicas desired pods: a percentage of surge rounds up, of unavailable
// down; if both come to 0, unavailable is 1 so the rollout can proceed.
func ResolveFenceposts(surge, unavailable *metav1.IntOrString, replicas int32) (int32, int32, error) {
	s, err := scaled(surge, replicas, true)
	if err != nil {
		return 0, 0, err
	}
	u, err := scaled(unavailable, replicas, false)
	if err != nil {
		return 0, 0, err
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return s, u, nil
}

func scaled(v *metav1.IntOrString, total int32, roundUp bool) (int32, error) {
	if v == nil {
		return 0, nil
	}
	if iv, ok := v.GetValue().(*metav1.IntOrString_IntVal); ok {
		return iv.IntVal, nil
	}
	s := v.GetStrVal()
	if !strings.HasSuffix(s, "%") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("invalid value %q: %w", s, err)
		}
		return int32(n), nil
	}
	p, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil {
		return 0, fmt.Errorf("invalid percentage %q: %w", s, err)
	}
	f := float64(p) * float64(total) / 100
	if roundUp {
		return int32(math.Ceil(f)), nil
	}
	return int32(math.Floor(f)), nil
}

func replicas(rs *appsv1.ReplicaSet) int32 { return rs.GetSpec().GetReplicas() }

func revision(o ctrl.Object) int64 {
	n, _ := strconv.ParseInt(o.GetMetadata().GetAnnotations()[RevisionAnnotation], 10, 64)
	return n
}

// Reconcile syncs the Deployment named by key.
func (c *Controller) Reconcile(ctx context.Context, key string) error {
	cached, ok := c.cfg.DInformer.Store().Get(key)
	if !ok {
		return nil
	}
	d := proto.Clone(cached).(*appsv1.Deployment)
	sel, err := ctrl.Selector(d.GetSpec().GetSelector())
	if err != nil {
		return fmt.Errorf("deployment %s: selector: %w", key, err)
	}
	if sel.Empty() {
		return nil // selects everything: refuse, as Kubernetes does
	}
	all, err := c.replicaSets(ctx, d, sel)
	if err != nil {
		return err
	}
	newRS, old := c.split(d, all)
	if d.GetMetadata().GetDeletionTimestamp() != nil {
		return c.syncStatus(ctx, d, newRS, all, false)
	}
	if d.GetSpec().GetPaused() {
		// Scaling still applies to a paused Deployment, as in Kubernetes.
		scaled, err := c.scaleReplicaSets(ctx, d, newRS, old)
		if err != nil {
			return err
		}
		if err := c.cleanup(ctx, d, old); err != nil {
			return err
		}
		return c.syncStatus(ctx, d, newRS, all, scaled)
	}
	// A scaling event is a step of its own (Recreate has no proportional
	// step: with two active ReplicaSets it goes on with its strategy).
	recreateMidway := d.GetSpec().GetStrategy().GetType() == "Recreate" && len(active(all)) > 1
	if newRS != nil && !recreateMidway && isScalingEvent(d, newRS, old) {
		scaled, err := c.scaleReplicaSets(ctx, d, newRS, old)
		if err != nil {
			return err
		}
		if err := c.cleanup(ctx, d, old); err != nil {
			return err
		}
		return c.syncStatus(ctx, d, newRS, all, scaled)
	}
	if newRS == nil {
		newRS, err = c.createNewRS(ctx, d, old)
		if err != nil {
			return err
		}
		all = append(all, newRS)
	} else if err := c.syncRevision(ctx, d, newRS, old); err != nil {
		return err
	}
	var scaled bool
	if d.GetSpec().GetStrategy().GetType() == "Recreate" {
		scaled, err = c.recreate(ctx, d, newRS, old)
	} else {
		scaled, err = c.rollingUpdate(ctx, d, newRS, old)
	}
	if err != nil {
		return err
	}
	if err := c.cleanup(ctx, d, old); err != nil {
		return err
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

// newReplicas is how many replicas the new ReplicaSet may have now under
// RollingUpdate: up to spec.replicas, within replicas+maxSurge in total.
func newReplicas(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) int32 {
	want := d.GetSpec().GetReplicas()
	ru := d.GetSpec().GetStrategy().GetRollingUpdate()
	surge, _, err := ResolveFenceposts(ru.GetMaxSurge(), ru.GetMaxUnavailable(), want)
	if err != nil {
		surge = 0
	}
	var cur, total int32
	if newRS != nil {
		cur = replicas(newRS)
		total = cur
	}
	for _, rs := range old {
		total += replicas(rs)
	}
	if cur >= want {
		return want
	}
	maxTotal := want + surge
	if total >= maxTotal {
		return cur
	}
	return cur + min(maxTotal-total, want-cur)
}

// maxSurge is d's maxSurge in pods (0 for Recreate).
func maxSurge(d *appsv1.Deployment) int32 {
	if d.GetSpec().GetStrategy().GetType() == "Recreate" {
		return 0
	}
	ru := d.GetSpec().GetStrategy().GetRollingUpdate()
	s, _, err := ResolveFenceposts(ru.GetMaxSurge(), ru.GetMaxUnavailable(), d.GetSpec().GetReplicas())
	if err != nil {
		return 0
	}
	return s
}

// setReplicasAnnotations records d's replicas and replicas+maxSurge in a
// ReplicaSet's annotations; it reports whether they changed.
func setReplicasAnnotations(a map[string]string, d *appsv1.Deployment) bool {
	desired := strconv.Itoa(int(d.GetSpec().GetReplicas()))
	maxR := strconv.Itoa(int(d.GetSpec().GetReplicas() + maxSurge(d)))
	if a[DesiredReplicasAnnotation] == desired && a[MaxReplicasAnnotation] == maxR {
		return false
	}
	a[DesiredReplicasAnnotation], a[MaxReplicasAnnotation] = desired, maxR
	return true
}

// scale sets rs's replicas to n and its replicas annotations to d's; it
// writes nothing if both are already so.
func (c *Controller) scale(ctx context.Context, d *appsv1.Deployment, rs *appsv1.ReplicaSet, n int32) (*appsv1.ReplicaSet, error) {
	u := proto.Clone(rs).(*appsv1.ReplicaSet)
	if u.Metadata.Annotations == nil {
		u.Metadata.Annotations = map[string]string{}
	}
	if !setReplicasAnnotations(u.Metadata.Annotations, d) && replicas(rs) == n {
		return rs, nil
	}
	from := replicas(rs)
	u.Spec.Replicas = proto.Int32(n)
	got, err := c.cfg.ReplicaSets.Update(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("deployment %s: scale %s to %d: %w", client.Key(d), client.Key(rs), n, err)
	}
	if n != from {
		dir := "up"
		if n < from {
			dir = "down"
		}
		ctrl.Eventf(c.cfg.Recorder, d, client.EventNormal, "ScalingReplicaSet", "Scaled %s replica set %s from %d to %d", dir, rs.GetMetadata().GetName(), from, n)
	}
	return got, nil
}

// isScalingEvent reports whether d was scaled since one of its active
// ReplicaSets was last sized (its desired-replicas annotation differs).
func isScalingEvent(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) bool {
	for _, rs := range append([]*appsv1.ReplicaSet{newRS}, old...) {
		if rs == nil || replicas(rs) == 0 {
			continue
		}
		v, ok := rs.GetMetadata().GetAnnotations()[DesiredReplicasAnnotation]
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(v); err == nil && int32(n) != d.GetSpec().GetReplicas() {
			return true
		}
	}
	return false
}

// active are the ReplicaSets with replicas > 0.
func active(rss []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range rss {
		if rs != nil && replicas(rs) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

// scaleReplicaSets applies a change of d's replicas to its ReplicaSets as
// Kubernetes does: with one active ReplicaSet (or none: the newest) it
// gets all replicas; with a saturated new ReplicaSet the old ones go to 0;
// otherwise, under RollingUpdate, the pods to add (or remove) up to
// replicas+maxSurge are shared among the active ReplicaSets in proportion
// to their sizes (ProportionalSizes). old is oldest first.
func (c *Controller) scaleReplicaSets(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) (bool, error) {
	want := d.GetSpec().GetReplicas()
	act := active(append(append([]*appsv1.ReplicaSet{}, old...), newRS))
	var only *appsv1.ReplicaSet
	switch {
	case len(act) == 1:
		only = act[0]
	case len(act) == 0 && newRS != nil:
		only = newRS
	case len(act) == 0 && len(old) > 0:
		only = old[len(old)-1]
	}
	if only != nil {
		if _, err := c.scale(ctx, d, only, want); err != nil {
			return false, err
		}
		return replicas(only) != want, nil
	}
	if len(act) == 0 {
		return false, nil
	}
	if newRS != nil && replicas(newRS) == want && newRS.GetMetadata().GetAnnotations()[DesiredReplicasAnnotation] == strconv.Itoa(int(want)) &&
		newRS.GetStatus().GetAvailableReplicas() == want {
		changed := false
		for _, rs := range active(old) {
			if _, err := c.scale(ctx, d, rs, 0); err != nil {
				return changed, err
			}
			changed = true
		}
		return changed, nil
	}
	if d.GetSpec().GetStrategy().GetType() == "Recreate" {
		return false, nil
	}
	sizes := ProportionalSizes(d, act)
	changed := false
	for _, rs := range act {
		n := sizes[rs.GetMetadata().GetName()]
		if _, err := c.scale(ctx, d, rs, n); err != nil {
			return changed, err
		}
		changed = changed || n != replicas(rs)
	}
	return changed, nil
}

// ProportionalSizes shares the change of d's replicas among its active
// ReplicaSets act (Kubernetes' proportional scaling): the room to fill is
// replicas+maxSurge (0 if replicas is 0) minus the pods the ReplicaSets
// have now; each ReplicaSet gets round(size × newMax / oldMax) − size of
// it, oldMax being its max-replicas annotation (or d's status.replicas),
// largest first (newer first on ties when growing, older first when
// shrinking), never more than what is left; the rounding leftover goes to
// the largest. It returns the new size of each by name.
func ProportionalSizes(d *appsv1.Deployment, act []*appsv1.ReplicaSet) map[string]int32 {
	want := d.GetSpec().GetReplicas()
	var total int32
	for _, rs := range act {
		total += replicas(rs)
	}
	var allowed int32
	if want > 0 {
		allowed = want + maxSurge(d)
	}
	toAdd := allowed - total
	sorted := append([]*appsv1.ReplicaSet(nil), act...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if a, b := replicas(sorted[i]), replicas(sorted[j]); a != b {
			return a > b
		}
		ti, tj := sorted[i].GetMetadata().GetCreationTimestamp().AsTime(), sorted[j].GetMetadata().GetCreationTimestamp().AsTime()
		if toAdd > 0 {
			return ti.After(tj)
		}
		return ti.Before(tj)
	})
	sizes := map[string]int32{}
	var added int32
	for _, rs := range sorted {
		n := replicas(rs)
		if toAdd != 0 && added != toAdd {
			var fraction int32
			if want == 0 {
				fraction = -n
			} else {
				before := d.GetStatus().GetReplicas()
				if v, err := strconv.Atoi(rs.GetMetadata().GetAnnotations()[MaxReplicasAnnotation]); err == nil && v > 0 {
					before = int32(v)
				}
				if before > 0 {
					fraction = int32(math.Round(float64(n)*float64(allowed)/float64(before))) - n
				}
			}
			left := toAdd - added
			p := max(fraction, left)
			if toAdd > 0 {
				p = min(fraction, left)
			}
			n += p
			added += p
		}
		sizes[rs.GetMetadata().GetName()] = n
	}
	if len(sorted) > 0 && toAdd != 0 {
		first := sorted[0].GetMetadata().GetName()
		sizes[first] = max(sizes[first]+toAdd-added, 0)
	}
	return sizes
}

// rollingUpdate takes one step of a RollingUpdate: grow the new ReplicaSet
// within maxSurge, shrink the old ones within maxUnavailable.
func (c *Controller) rollingUpdate(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) (bool, error) {
	want := d.GetSpec().GetReplicas()
	changed := false
	if n := replicas(newRS); n > want {
		if _, err := c.scale(ctx, d, newRS, want); err != nil {
			return false, err
		}
		return true, nil
	}
	if n := newReplicas(d, newRS, old); n != replicas(newRS) {
		got, err := c.scale(ctx, d, newRS, n)
		if err != nil {
			return false, err
		}
		proto.Reset(newRS)
		proto.Merge(newRS, got)
		return true, nil
	}
	ru := d.GetSpec().GetStrategy().GetRollingUpdate()
	_, maxUnavail, err := ResolveFenceposts(ru.GetMaxSurge(), ru.GetMaxUnavailable(), want)
	if err != nil {
		return false, fmt.Errorf("deployment %s: %w", client.Key(d), err)
	}
	var oldCount, all int32 = 0, replicas(newRS)
	for _, rs := range old {
		oldCount += replicas(rs)
		all += replicas(rs)
	}
	if oldCount == 0 {
		return false, nil
	}
	minAvailable := want - maxUnavail
	newUnavailable := replicas(newRS) - newRS.GetStatus().GetAvailableReplicas()
	maxScaleDown := all - minAvailable - newUnavailable
	if maxScaleDown <= 0 {
		return false, nil
	}
	// First the old ReplicaSets' unavailable pods: they cost no availability.
	for _, rs := range old {
		if maxScaleDown <= 0 {
			break
		}
		unhealthy := replicas(rs) - rs.GetStatus().GetAvailableReplicas()
		if replicas(rs) == 0 || unhealthy <= 0 || rs.GetStatus().GetObservedGeneration() < rs.GetMetadata().GetGeneration() {
			continue
		}
		down := min(unhealthy, maxScaleDown)
		got, err := c.scale(ctx, d, rs, replicas(rs)-down)
		if err != nil {
			return changed, err
		}
		maxScaleDown -= down
		proto.Reset(rs)
		proto.Merge(rs, got)
		changed = true
	}
	// Then available pods, as long as minAvailable stays available. A
	// ReplicaSet's status may not yet show a scale-down (its controller
	// deletes the pods, then writes the status; a controller manager that
	// took over from one that crashed in between sees the old count), and
	// its controller keeps at most spec.replicas pods: so count at most
	// that many of its pods available.
	available := min(newRS.GetStatus().GetAvailableReplicas(), replicas(newRS))
	for _, rs := range old {
		available += min(rs.GetStatus().GetAvailableReplicas(), replicas(rs))
	}
	budget := available - minAvailable
	for _, rs := range old {
		if budget <= 0 {
			break
		}
		if replicas(rs) == 0 {
			continue
		}
		down := min(replicas(rs), budget)
		if _, err := c.scale(ctx, d, rs, replicas(rs)-down); err != nil {
			return changed, err
		}
		budget -= down
		changed = true
	}
	return changed, nil
}

// recreate scales every old ReplicaSet to 0, waits for their pods to be
// gone, then scales the new one up.
func (c *Controller) recreate(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) (bool, error) {
	changed := false
	for _, rs := range old {
		if replicas(rs) > 0 {
			if _, err := c.scale(ctx, d, rs, 0); err != nil {
				return changed, err
			}
			changed = true
		}
	}
	if changed {
		return true, nil
	}
	for _, rs := range old {
		if rs.GetStatus().GetReplicas() > 0 || c.podsOf(rs) > 0 {
			return false, nil // old pods still running
		}
	}
	if replicas(newRS) != d.GetSpec().GetReplicas() {
		if _, err := c.scale(ctx, d, newRS, d.GetSpec().GetReplicas()); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}

// podsOf counts the pods (terminating included) rs controls.
func (c *Controller) podsOf(rs *appsv1.ReplicaSet) int {
	if c.cfg.PodInformer == nil {
		return 0
	}
	n := 0
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(rs.GetMetadata().GetNamespace()) {
		if r := ctrl.ControllerRef(p); r != nil && r.GetUid() == rs.GetMetadata().GetUid() {
			n++
		}
	}
	return n
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

func condition(conds []*appsv1.DeploymentCondition, t string) *appsv1.DeploymentCondition {
	for _, c := range conds {
		if c.GetType() == t {
			return c
		}
	}
	return nil
}

// setCondition puts cond into st, keeping lastTransitionTime when the
// status does not change (and lastUpdateTime when nothing changes).
func setCondition(st *appsv1.DeploymentStatus, cond *appsv1.DeploymentCondition) {
	prev := condition(st.Conditions, cond.Type)
	if prev != nil && prev.Status == cond.Status {
		cond.LastTransitionTime = prev.LastTransitionTime
		if prev.Reason == cond.Reason && prev.Message == cond.Message && cond.LastUpdateTime == nil {
			cond.LastUpdateTime = prev.LastUpdateTime
		}
	}
	if cond.LastUpdateTime == nil {
		cond.LastUpdateTime = cond.LastTransitionTime
	}
	out := st.Conditions[:0]
	for _, c := range st.Conditions {
		if c.Type != cond.Type {
			out = append(out, c)
		}
	}
	st.Conditions = append(out, cond)
}

// syncStatus computes and writes d's status; progressed says this sync
// scaled something (progress for the Progressing condition).
func (c *Controller) syncStatus(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, all []*appsv1.ReplicaSet, progressed bool) error {
	// Re-read what this sync changed, so status reflects it.
	fresh := make([]*appsv1.ReplicaSet, 0, len(all))
	for _, rs := range all {
		if got, ok := c.cfg.RSInformer.Store().Get(client.Key(rs)); ok && replicas(got) == replicas(rs) {
			fresh = append(fresh, got)
		} else {
			fresh = append(fresh, rs)
		}
	}
	want := d.GetSpec().GetReplicas()
	now := timestamppb.New(c.now().Truncate(time.Second))
	st := &appsv1.DeploymentStatus{}
	if d.GetStatus() != nil {
		st = proto.Clone(d.GetStatus()).(*appsv1.DeploymentStatus)
	}
	prev := proto.Clone(st).(*appsv1.DeploymentStatus)
	st.ObservedGeneration = d.GetMetadata().GetGeneration()
	st.Replicas, st.ReadyReplicas, st.AvailableReplicas, st.UpdatedReplicas = 0, 0, 0, 0
	for _, rs := range fresh {
		st.Replicas += rs.GetStatus().GetReplicas()
		st.ReadyReplicas += rs.GetStatus().GetReadyReplicas()
		st.AvailableReplicas += rs.GetStatus().GetAvailableReplicas()
	}
	// The new ReplicaSet's count comes from the same copies as the totals,
	// so that updatedReplicas never exceeds replicas (the API service
	// refuses such a status, as Kubernetes does).
	if newRS != nil {
		for _, rs := range fresh {
			if client.Key(rs) == client.Key(newRS) {
				st.UpdatedReplicas = rs.GetStatus().GetReplicas()
			}
		}
	}
	st.UnavailableReplicas = max(want-st.AvailableReplicas, 0)
	_, maxUnavail, _ := ResolveFenceposts(d.GetSpec().GetStrategy().GetRollingUpdate().GetMaxSurge(), d.GetSpec().GetStrategy().GetRollingUpdate().GetMaxUnavailable(), want)
	if d.GetSpec().GetStrategy().GetType() == "Recreate" {
		maxUnavail = want
	}
	if st.AvailableReplicas >= want-maxUnavail {
		setCondition(st, &appsv1.DeploymentCondition{Type: "Available", Status: "True", Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability.", LastTransitionTime: now})
	} else {
		setCondition(st, &appsv1.DeploymentCondition{Type: "Available", Status: "False", Reason: "MinimumReplicasUnavailable", Message: "Deployment does not have minimum availability.", LastTransitionTime: now})
	}
	var requeue time.Duration
	name := ""
	if newRS != nil {
		name = newRS.GetMetadata().GetName()
	}
	complete := newRS != nil && st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want
	deadline := d.GetSpec().ProgressDeadlineSeconds
	switch {
	case d.GetSpec().GetPaused():
		setCondition(st, &appsv1.DeploymentCondition{Type: "Progressing", Status: "Unknown", Reason: "DeploymentPaused", Message: "Deployment is paused", LastTransitionTime: now})
	case complete:
		setCondition(st, &appsv1.DeploymentCondition{Type: "Progressing", Status: "True", Reason: "NewReplicaSetAvailable", Message: fmt.Sprintf("ReplicaSet %q has successfully progressed.", name), LastTransitionTime: now})
	default:
		pc := condition(st.Conditions, "Progressing")
		moved := progressed || prev.GetReplicas() != st.Replicas || prev.GetUpdatedReplicas() != st.UpdatedReplicas ||
			prev.GetReadyReplicas() != st.ReadyReplicas || prev.GetAvailableReplicas() != st.AvailableReplicas ||
			pc == nil || pc.GetReason() == "NewReplicaSetAvailable"
		switch {
		case moved:
			setCondition(st, &appsv1.DeploymentCondition{Type: "Progressing", Status: "True", Reason: "ReplicaSetUpdated", Message: fmt.Sprintf("ReplicaSet %q is progressing.", name), LastTransitionTime: now, LastUpdateTime: now})
		case deadline != nil && pc.GetReason() != "ProgressDeadlineExceeded":
			last := pc.GetLastUpdateTime().AsTime()
			limit := time.Duration(*deadline) * time.Second
			if left := last.Add(limit).Sub(c.now()); left <= 0 {
				setCondition(st, &appsv1.DeploymentCondition{Type: "Progressing", Status: "False", Reason: "ProgressDeadlineExceeded", Message: fmt.Sprintf("ReplicaSet %q has timed out progressing.", name), LastTransitionTime: now, LastUpdateTime: now})
				ctrl.Eventf(c.cfg.Recorder, d, client.EventWarning, "ProgressDeadlineExceeded", "Deployment %q has timed out progressing.", d.GetMetadata().GetName())
			} else {
				requeue = left + time.Second
			}
		}
	}
	if requeue > 0 {
		c.queue.AddAfter(client.Key(d), requeue)
	}
	if proto.Equal(st, d.GetStatus()) {
		return nil
	}
	u := proto.Clone(d).(*appsv1.Deployment)
	u.Status = st
	if _, err := c.cfg.Deployments.UpdateStatus(ctx, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("deployment %s: update status: %w", client.Key(d), err)
	}
	return nil
}

func collisionCount(d *appsv1.Deployment) *int32 {
	if d.GetStatus() == nil {
		return nil
	}
	return d.GetStatus().CollisionCount
}
