// Package replicaset is the ReplicaSet controller: it keeps spec.replicas
// pods matching each ReplicaSet's template, owned by it (controller
// ownerReference), and reports status through replicasets/status. Its logic
// runs other kinds too through a Kind that converts them to ReplicaSets
// (services/controllers/replicationcontroller).
//
// Creations go in slow-start batches (1, 2, 4, ... up to BurstReplicas per
// sync) so a failing template costs one failed create, not hundreds.
// Expectations hold a ReplicaSet back until the informer has seen the
// creations and deletions it asked for, so a lagging watch never makes it
// create or delete twice; after a restart the informer's list is the truth.
package replicaset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubeconv"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// PodClient is what the controller writes pods with (*client.Client[*corev1.Pod]).
type PodClient interface {
	Create(ctx context.Context, obj *corev1.Pod) (*corev1.Pod, error)
	Update(ctx context.Context, obj *corev1.Pod) (*corev1.Pod, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// ReplicaSetClient is what the controller writes status with.
type ReplicaSetClient interface {
	UpdateStatus(ctx context.Context, obj *appsv1.ReplicaSet) (*appsv1.ReplicaSet, error)
}

// Kind adapts a kind of object that keeps a number of pods to this
// package's logic, which reasons about ReplicaSets: another kind (the
// ReplicationController) is run as the ReplicaSet it converts to, and its
// status written back from the ReplicaSet's, as Kubernetes runs it.
type Kind[T proto.Message] struct {
	// Name names the controller: its work queue, log attribute and span
	// ("<Name>.reconcile").
	Name string
	// APIVersion and Kind are what the pods' controller ownerReferences name.
	APIVersion, Kind string
	// ToReplicaSet is obj as a ReplicaSet with obj's metadata; it must not
	// share anything with obj (obj is the informer's).
	ToReplicaSet func(obj T) *appsv1.ReplicaSet
	// Selector is obj's pod selector.
	Selector func(obj T) (labels.Selector, error)
	// UpdateStatus writes st as obj's status (obj is the informer's: copy it).
	UpdateStatus func(ctx context.Context, obj T, st *appsv1.ReplicaSetStatus) error
}

// ReplicaSets is the Kind of apps/v1 ReplicaSets, written with c.
func ReplicaSets(c ReplicaSetClient) Kind[*appsv1.ReplicaSet] {
	return Kind[*appsv1.ReplicaSet]{
		Name: "replicaset", APIVersion: "apps/v1", Kind: "ReplicaSet",
		ToReplicaSet: func(rs *appsv1.ReplicaSet) *appsv1.ReplicaSet { return proto.Clone(rs).(*appsv1.ReplicaSet) },
		Selector: func(rs *appsv1.ReplicaSet) (labels.Selector, error) {
			return kubeconv.Selector(rs.GetSpec().GetSelector())
		},
		UpdateStatus: func(ctx context.Context, rs *appsv1.ReplicaSet, st *appsv1.ReplicaSetStatus) error {
			out := proto.Clone(rs).(*appsv1.ReplicaSet)
			out.Status = st
			_, err := c.UpdateStatus(ctx, out)
			return err
		},
	}
}

// Config wires a ReplicaSet Controller. The informers are shared with
// other controllers; New adds its handlers, the caller runs them.
type Config struct {
	Pods        PodClient
	ReplicaSets ReplicaSetClient
	PodInformer *client.Informer[*corev1.Pod]
	RSInformer  *client.Informer[*appsv1.ReplicaSet]
	Recorder    *client.Recorder // nil records nothing
	// BurstReplicas caps the creations or deletions of one sync (default 500).
	BurstReplicas int
	Logger        *slog.Logger
	// TracerProvider records a span per reconcile, in the trace of the
	// object's last change; nil uses the global one.
	TracerProvider trace.TracerProvider
}

// KindConfig wires a KindController: Config for any Kind.
type KindConfig[T proto.Message] struct {
	Kind          Kind[T]
	Pods          PodClient
	PodInformer   *client.Informer[*corev1.Pod]
	Informer      *client.Informer[T]
	Recorder      *client.Recorder // nil records nothing
	BurstReplicas int              // default 500
	Logger        *slog.Logger
	// TracerProvider: nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the ReplicaSet controller.
type Controller = KindController[*appsv1.ReplicaSet]

// KindController is the ReplicaSet controller's logic over the objects of
// one Kind.
type KindController[T proto.Message] struct {
	cfg   KindConfig[T]
	log   *slog.Logger
	queue client.Queue
	exp   *ctrl.Expectations
	now   func() time.Time
}

// New returns a ReplicaSet controller and registers its informer handlers.
func New(cfg Config) *Controller {
	return NewForKind(KindConfig[*appsv1.ReplicaSet]{Kind: ReplicaSets(cfg.ReplicaSets), Pods: cfg.Pods,
		PodInformer: cfg.PodInformer, Informer: cfg.RSInformer, Recorder: cfg.Recorder, BurstReplicas: cfg.BurstReplicas,
		Logger: cfg.Logger, TracerProvider: cfg.TracerProvider})
}

// NewForKind returns a controller of cfg.Kind's objects and registers its
// informer handlers.
func NewForKind[T proto.Message](cfg KindConfig[T]) *KindController[T] {
	if cfg.BurstReplicas <= 0 {
		cfg.BurstReplicas = 500
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &KindController[T]{cfg: cfg, log: log.With("controller", cfg.Kind.Name), queue: client.NewQueue(cfg.Kind.Name, 0, 0), exp: ctrl.NewExpectations(), now: time.Now}
	cfg.Informer.AddEventHandler(client.EnqueueHandler[T](c.queue))
	cfg.PodInformer.AddEventHandler(client.Handler[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) {
			if k := c.ownerKey(p); k != "" {
				if p.GetMetadata().GetDeletionTimestamp() != nil {
					c.exp.DeletionObserved(k, client.Key(p))
				} else {
					c.exp.CreationObserved(k)
				}
				c.queue.Add(k)
			} else {
				c.enqueueMatching(p)
			}
		},
		OnUpdate: func(o, p *corev1.Pod) {
			ok, nk := c.ownerKey(o), c.ownerKey(p)
			if nk != "" && p.GetMetadata().GetDeletionTimestamp() != nil && o.GetMetadata().GetDeletionTimestamp() == nil {
				c.exp.DeletionObserved(nk, client.Key(p))
			}
			if ok != "" && ok != nk {
				c.queue.Add(ok)
			}
			if nk != "" {
				c.queue.Add(nk)
			} else {
				c.enqueueMatching(p)
			}
		},
		OnDelete: func(p *corev1.Pod) {
			if k := c.ownerKey(p); k != "" {
				c.exp.DeletionObserved(k, client.Key(p))
				c.queue.Add(k)
			}
		},
	})
	return c
}

// ownerKey is the key of the object of our Kind controlling p, or "".
func (c *KindController[T]) ownerKey(p *corev1.Pod) string {
	r := ctrl.ControllerRef(p)
	if r == nil || r.GetKind() != c.cfg.Kind.Kind {
		return ""
	}
	return client.KeyOf(p.GetMetadata().GetNamespace(), r.GetName())
}

// enqueueMatching enqueues the objects whose selector matches an orphan pod.
func (c *KindController[T]) enqueueMatching(p *corev1.Pod) {
	if !ctrl.PodActive(p) {
		return
	}
	for _, o := range c.cfg.Informer.Store().ByNamespace(p.GetMetadata().GetNamespace()) {
		if sel, err := c.cfg.Kind.Selector(o); err == nil && sel.Matches(labels.Set(p.GetMetadata().GetLabels())) {
			c.queue.Add(client.Key(o))
		}
	}
}

// Run waits for the informers' caches, then reconciles with workers
// goroutines until ctx ends.
func (c *KindController[T]) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.PodInformer, c.cfg.Informer) {
		return
	}
	client.RunWorkers(ctx, c.queue, workers, client.TracedReconciler(c.cfg.TracerProvider, c.cfg.Kind.Name+".reconcile", c.cfg.Informer.Store(), c.Reconcile), c.log)
}

// Reconcile brings the object named by key to its desired pod count and
// writes its status.
func (c *KindController[T]) Reconcile(ctx context.Context, key string) (client.Result, error) {
	cached, ok := c.cfg.Informer.Store().Get(key)
	if !ok {
		c.exp.Delete(key)
		return client.Result{}, nil
	}
	rs := c.cfg.Kind.ToReplicaSet(cached)
	sel, err := c.cfg.Kind.Selector(cached)
	if err != nil {
		return client.Result{}, fmt.Errorf("%s %s: selector: %w", c.cfg.Kind.Name, key, err)
	}
	pods, err := c.claimPods(ctx, rs, sel)
	if err != nil {
		return client.Result{}, err
	}
	var manageErr error
	if c.exp.Satisfied(key) && rs.GetMetadata().GetDeletionTimestamp() == nil {
		manageErr = c.manageReplicas(ctx, key, cached, rs, pods)
	}
	requeue, err := c.updateStatus(ctx, cached, rs, pods, manageErr)
	if err != nil {
		return client.Result{}, errors.Join(manageErr, err)
	}
	return client.Result{}.Sooner(requeue), manageErr
}

// claimPods returns the active pods rs controls, as Kubernetes' ClaimPods:
// orphans matching its selector are adopted, and pods it controls whose
// labels no longer match are released (while rs is not being deleted).
func (c *KindController[T]) claimPods(ctx context.Context, rs *appsv1.ReplicaSet, sel labels.Selector) ([]*corev1.Pod, error) {
	uid := rs.GetMetadata().GetUid()
	deleting := rs.GetMetadata().GetDeletionTimestamp() != nil
	var out []*corev1.Pod
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(rs.GetMetadata().GetNamespace()) {
		if !ctrl.PodActive(p) {
			continue
		}
		ref := ctrl.ControllerRef(p)
		matches := sel.Matches(labels.Set(p.GetMetadata().GetLabels()))
		switch {
		case ref != nil && ref.GetUid() == uid && matches:
			out = append(out, p)
		case ref != nil && ref.GetUid() == uid:
			if deleting {
				continue
			}
			released := proto.Clone(p).(*corev1.Pod)
			released.Metadata.OwnerReferences = slices.DeleteFunc(released.Metadata.OwnerReferences,
				func(r *metav1.OwnerReference) bool { return r.GetUid() == uid })
			if _, err := c.cfg.Pods.Update(ctx, released); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return nil, fmt.Errorf("release pod %s: %w", client.Key(p), err)
			}
		case ref == nil && !deleting && matches && p.GetMetadata().GetDeletionTimestamp() == nil:
			adopted := proto.Clone(p).(*corev1.Pod)
			adopted.Metadata.OwnerReferences = append(adopted.Metadata.OwnerReferences, ctrl.NewControllerRef(rs, c.cfg.Kind.APIVersion, c.cfg.Kind.Kind))
			got, err := c.cfg.Pods.Update(ctx, adopted)
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue // gone or changed: the next event brings us back
			}
			if err != nil {
				return nil, fmt.Errorf("adopt pod %s: %w", client.Key(p), err)
			}
			out = append(out, got)
		}
	}
	return out, nil
}

// manageReplicas creates or deletes pods toward spec.replicas.
// Events are about obj, the object rs was converted from.
func (c *KindController[T]) manageReplicas(ctx context.Context, key string, obj T, rs *appsv1.ReplicaSet, pods []*corev1.Pod) error {
	want := int(rs.GetSpec().GetReplicas())
	diff := len(pods) - want
	switch {
	case diff < 0:
		n := min(-diff, c.cfg.BurstReplicas)
		c.exp.ExpectCreations(key, n)
		created, err := slowStart(ctx, n, 1, func(ctx context.Context) error {
			p := podFromTemplate(rs, c.cfg.Kind.APIVersion, c.cfg.Kind.Kind)
			got, err := c.cfg.Pods.Create(ctx, p)
			if err != nil {
				c.exp.CreationObserved(key)
				if !apierrors.IsAlreadyExists(err) {
					ctrl.Eventf(c.cfg.Recorder, obj, client.EventWarning, "FailedCreate", "Error creating: %v", err)
				}
				return err
			}
			ctrl.Eventf(c.cfg.Recorder, obj, client.EventNormal, "SuccessfulCreate", "Created pod: %s", got.GetMetadata().GetName())
			return nil
		})
		// Creations never attempted will never be observed.
		for range n - created {
			c.exp.CreationObserved(key)
		}
		if err != nil {
			return fmt.Errorf("%s %s: create pods: %w", c.cfg.Kind.Name, key, err)
		}
	case diff > 0:
		n := min(diff, c.cfg.BurstReplicas)
		victims := PodsToDelete(pods, n)
		keys := make([]string, len(victims))
		for i, p := range victims {
			keys[i] = client.Key(p)
		}
		c.exp.ExpectDeletions(key, keys)
		var mu sync.Mutex
		var errs []error
		var wg sync.WaitGroup
		for _, p := range victims {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := c.cfg.Pods.Delete(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), client.DeleteOptions{UID: p.GetMetadata().GetUid()})
				if err != nil {
					c.exp.DeletionObserved(key, client.Key(p))
					if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
						return
					}
					ctrl.Eventf(c.cfg.Recorder, obj, client.EventWarning, "FailedDelete", "Error deleting: %v", err)
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				ctrl.Eventf(c.cfg.Recorder, obj, client.EventNormal, "SuccessfulDelete", "Deleted pod: %s", p.GetMetadata().GetName())
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("%s %s: delete pods: %w", c.cfg.Kind.Name, key, err)
		}
	}
	return nil
}

// slowStart calls fn count times in batches of growing size (start, 2*start,
// 4*start, ...), each batch in parallel; it stops after the first batch
// with an error and returns how many calls succeeded.
func slowStart(ctx context.Context, count, start int, fn func(context.Context) error) (int, error) {
	done := 0
	for batch := min(count, start); done < count; batch = min(2*batch, count-done) {
		var wg sync.WaitGroup
		errs := make(chan error, batch)
		for range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fn(ctx); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		failed := len(errs)
		done += batch - failed
		if failed > 0 {
			return done, <-errs
		}
	}
	return done, nil
}

// podFromTemplate is a new pod for rs: its template's labels, annotations
// and spec, a generated name, and rs (as apiVersion and kind) as controller
// owner.
func podFromTemplate(rs *appsv1.ReplicaSet, apiVersion, kind string) *corev1.Pod {
	t := rs.GetSpec().GetTemplate()
	m := &metav1.ObjectMeta{
		GenerateName:    rs.GetMetadata().GetName() + "-",
		Namespace:       rs.GetMetadata().GetNamespace(),
		Labels:          map[string]string{},
		Annotations:     map[string]string{},
		OwnerReferences: []*metav1.OwnerReference{ctrl.NewControllerRef(rs, apiVersion, kind)},
	}
	for k, v := range t.GetMetadata().GetLabels() {
		m.Labels[k] = v
	}
	for k, v := range t.GetMetadata().GetAnnotations() {
		m.Annotations[k] = v
	}
	spec, _ := proto.Clone(t.GetSpec()).(*corev1.PodSpec)
	return &corev1.Pod{ApiVersion: "v1", Kind: "Pod", Metadata: m, Spec: spec}
}

// PodsToDelete picks n of pods to delete, in Kubernetes' order of
// preference: unscheduled before scheduled, pending before unknown before
// running, not ready before ready, ready for less time before longer, more
// restarts before fewer, newer before older.
func PodsToDelete(pods []*corev1.Pod, n int) []*corev1.Pod {
	s := append([]*corev1.Pod(nil), pods...)
	sort.SliceStable(s, func(i, j int) bool { return deleteBefore(s[i], s[j]) })
	return s[:min(n, len(s))]
}

func phaseRank(p string) int {
	switch p {
	case "Pending":
		return 0
	case "Unknown", "":
		return 1
	default: // Running
		return 2
	}
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.GetStatus().GetContainerStatuses() {
		n = max(n, s.GetRestartCount())
	}
	return n
}

func deleteBefore(a, b *corev1.Pod) bool {
	as, bs := a.GetSpec().GetNodeName() != "", b.GetSpec().GetNodeName() != ""
	if as != bs {
		return !as
	}
	if ar, br := phaseRank(a.GetStatus().GetPhase()), phaseRank(b.GetStatus().GetPhase()); ar != br {
		return ar < br
	}
	ar, at := ctrl.PodReady(a)
	br, bt := ctrl.PodReady(b)
	if ar != br {
		return !ar
	}
	if ar && !at.Equal(bt) {
		return at.After(bt)
	}
	if ra, rb := restarts(a), restarts(b); ra != rb {
		return ra > rb
	}
	ac, bc := a.GetMetadata().GetCreationTimestamp().AsTime(), b.GetMetadata().GetCreationTimestamp().AsTime()
	return ac.After(bc)
}

// updateStatus writes obj's status (rs's, converted) from pods if it
// changed. It returns how soon to look again when a ready pod will become
// available later.
func (c *KindController[T]) updateStatus(ctx context.Context, obj T, rs *appsv1.ReplicaSet, pods []*corev1.Pod, manageErr error) (time.Duration, error) {
	now := c.now()
	minReady := rs.GetSpec().GetMinReadySeconds()
	tmplLabels := labels.SelectorFromSet(rs.GetSpec().GetTemplate().GetMetadata().GetLabels())
	st := &appsv1.ReplicaSetStatus{Replicas: int32(len(pods)), ObservedGeneration: rs.GetMetadata().GetGeneration()}
	var requeue time.Duration
	for _, p := range pods {
		if tmplLabels.Matches(labels.Set(p.GetMetadata().GetLabels())) {
			st.FullyLabeledReplicas++
		}
		ready, since := ctrl.PodReady(p)
		if !ready {
			continue
		}
		st.ReadyReplicas++
		if ctrl.PodAvailable(p, minReady, now) {
			st.AvailableReplicas++
		} else if d := since.Add(time.Duration(minReady)*time.Second).Sub(now) + time.Second; requeue == 0 || d < requeue {
			requeue = d
		}
	}
	// ReplicaFailure condition while creates or deletes fail: as
	// Kubernetes', set once (FailedCreate or FailedDelete, the first
	// failure's message) and kept as it is until a sync succeeds.
	var prev *appsv1.ReplicaSetCondition
	for _, cond := range rs.GetStatus().GetConditions() {
		if cond.GetType() != "ReplicaFailure" {
			st.Conditions = append(st.Conditions, cond)
		} else {
			prev = cond
		}
	}
	switch {
	case manageErr != nil && prev != nil:
		st.Conditions = append(st.Conditions, prev)
	case manageErr != nil:
		reason := "FailedCreate"
		if len(pods) > int(rs.GetSpec().GetReplicas()) {
			reason = "FailedDelete"
		}
		st.Conditions = append(st.Conditions, &appsv1.ReplicaSetCondition{Type: "ReplicaFailure", Status: "True", Reason: reason,
			Message: manageErr.Error(), LastTransitionTime: timestamppbNow(now)})
	}
	if proto.Equal(st, rs.GetStatus()) {
		return requeue, nil
	}
	if err := c.cfg.Kind.UpdateStatus(ctx, obj, st); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("%s %s: update status: %w", c.cfg.Kind.Name, client.Key(rs), err)
	}
	return requeue, nil
}
