// This file holds the watch-based source of the ConfigMaps and Secrets
// the node's pods use, the kubelet's default "Watch" change-detection
// strategy: one single-object watch (a list and watch with the field
// selector metadata.name=<name> in the pod's namespace) per object that a
// registered pod refers to, shared by every pod referring to it, started
// when the first such pod is registered and stopped when the last one is
// unregistered. Reads are served from the watch's cache, so refreshing
// the volumes of a pod costs no API call at all.

package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// Change-detection strategies for ConfigMaps and Secrets, the values of
// the kubelet's configMapAndSecretChangeDetectionStrategy.
const (
	// StrategyWatch keeps a watch on each object the node's pods use and
	// reads from it (the default, as on the kubelet).
	StrategyWatch = "Watch"
	// StrategyCache gets each object from the API service at most once
	// per TTL (half the resync interval) for all the node's pods.
	StrategyCache = "Cache"
	// StrategyGet gets the object from the API service at every read.
	StrategyGet = "Get"
)

// Resources the watches are kept for, as the Node authorizer names them.
const (
	resourceConfigMaps = "configmaps"
	resourceSecrets    = "secrets"
)

// Bounds of the watch-based source, the kubelet's.
const (
	// watchSyncTimeout bounds how long a read waits for a watch that has
	// not listed its object yet.
	watchSyncTimeout = time.Second
	// minWatchIdle is the shortest time a watch that nothing read is
	// kept (see watchedObjects.maxIdle).
	minWatchIdle = time.Minute
	// idleCheckInterval is how often idle watches are looked for.
	idleCheckInterval = time.Minute
)

// errSyncTimeout is a read that found its watch not yet synced in time
// (the kubelet's wording).
var errSyncTimeout = errors.New("timed out waiting for the condition")

// objectKey names one watched object.
type objectKey struct {
	resource, namespace, name string
}

// singular is the resource's name in the kubelet's messages (`configmap
// "x" not found`).
func (k objectKey) singular() string {
	if k.resource == resourceSecrets {
		return "secret"
	}
	return "configmap"
}

// objectCache is one watch's local copy of its object.
type objectCache interface {
	// run lists and watches until ctx is done.
	run(ctx context.Context)
	// synced reports whether the first list was applied.
	synced() bool
	// object is the object, if it exists.
	object(namespace, name string) (proto.Message, bool)
}

// informerCache is an objectCache kept by a client.Informer.
type informerCache[T proto.Message] struct {
	inf *client.Informer[T]
}

func (c informerCache[T]) run(ctx context.Context) { _ = c.inf.Run(ctx) }
func (c informerCache[T]) synced() bool            { return c.inf.HasSynced() }
func (c informerCache[T]) object(namespace, name string) (proto.Message, bool) {
	return c.inf.Store().Get(client.KeyOf(namespace, name))
}

// watchItem is the watch of one object and the pods that refer to it.
type watchItem struct {
	pods  map[string]struct{} // uids
	cache objectCache
	// cancel stops the running watch; nil when none runs (not started
	// yet, or stopped because idle or immutable).
	cancel context.CancelFunc
	// idle: stopped because nothing read it for maxIdle; the next read
	// starts a new watch.
	idle bool
	// immutable: the object was seen immutable, so its watch was stopped
	// for good and the cached object is served from then on.
	immutable  bool
	lastAccess time.Time
}

// watchedObjects is the watch-based envObjects. register and unregister
// are called by the pod syncs; ConfigMap and Secret read only objects a
// registered pod refers to. run owns every watch's goroutine.
type watchedObjects struct {
	configMaps *client.Client[*corev1.ConfigMap]
	secrets    *client.Client[*corev1.Secret]
	log        *slog.Logger
	// syncTimeout bounds a read's wait for its watch's first list.
	syncTimeout time.Duration
	// maxIdle: a watch nothing read for that long is stopped, until the
	// next read (the objects of environments are read only when a
	// container starts; volumes are read at every refresh).
	maxIdle time.Duration
	now     func() time.Time

	mu sync.Mutex
	// base is run's context, the parent of every watch's (the watches
	// start with the pods, after run); nil before run.
	base    context.Context
	stopped bool // run returned
	items   map[objectKey]*watchItem
	pods    map[string]map[objectKey]struct{} // by pod uid
	wg      sync.WaitGroup
}

var _ envObjects = (*watchedObjects)(nil)

// newWatchedObjects returns the watch-based source; watches start once run
// is called. maxIdle is the kubelet's: five resync intervals, at least a
// minute.
func newWatchedObjects(cms *client.Client[*corev1.ConfigMap], secrets *client.Client[*corev1.Secret], resync time.Duration, log *slog.Logger) *watchedObjects {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &watchedObjects{
		configMaps: cms, secrets: secrets, log: log,
		syncTimeout: watchSyncTimeout,
		maxIdle:     max(5*resync, minWatchIdle),
		now:         time.Now,
		items:       map[objectKey]*watchItem{},
		pods:        map[string]map[objectKey]struct{}{},
	}
}

// newCache makes the single-object watch of k (not started).
func (w *watchedObjects) newCache(k objectKey) objectCache {
	sel := fields.OneTermEqualSelector("metadata.name", k.name).String()
	log := w.log.With("watch", k.resource+"/"+k.namespace+"/"+k.name)
	if k.resource == resourceSecrets {
		return informerCache[*corev1.Secret]{client.NewInformer[*corev1.Secret](objectLW[*corev1.Secret]{w.secrets, k.namespace, sel},
			client.InformerOptions[*corev1.Secret]{Logger: log})}
	}
	return informerCache[*corev1.ConfigMap]{client.NewInformer[*corev1.ConfigMap](objectLW[*corev1.ConfigMap]{w.configMaps, k.namespace, sel},
		client.InformerOptions[*corev1.ConfigMap]{Logger: log})}
}

// objectLW lists and watches one object by a metadata.name field
// selector. Its lists ask for resourceVersion "0" (any), which the API
// service answers from its watch cache by the object's key alone, as the
// kubelet's reflectors list: thousands of such watches starting together
// cost no store reads.
type objectLW[T proto.Message] struct {
	c       *client.Client[T]
	ns, sel string // sel: metadata.name=<name>
}

var _ client.ListerWatcher[*corev1.ConfigMap] = objectLW[*corev1.ConfigMap]{}

func (l objectLW[T]) List(ctx context.Context) ([]T, string, error) {
	return l.c.List(ctx, l.ns, client.ListOptions{FieldSelector: l.sel, ResourceVersion: "0"})
}

func (l objectLW[T]) Watch(ctx context.Context, rv string) (client.Watch[T], error) {
	return l.c.Watch(ctx, l.ns, client.ListOptions{FieldSelector: l.sel, ResourceVersion: rv, AllowWatchBookmarks: true})
}

// startLocked starts the watch of it, once run has begun. w.mu is held.
func (w *watchedObjects) startLocked(it *watchItem) {
	if w.base == nil || w.stopped || it.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(w.base)
	it.cancel, it.idle = cancel, false
	c := it.cache
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		c.run(ctx)
	}()
}

// stopLocked stops the watch of it, if one runs. w.mu is held.
func (it *watchItem) stopLocked() {
	if it.cancel != nil {
		it.cancel()
		it.cancel = nil
	}
}

// run starts the watches registered so far and those registered later,
// stops the idle ones every idleCheckInterval, and, when ctx is done,
// stops them all and returns once their goroutines have.
func (w *watchedObjects) run(ctx context.Context) {
	w.mu.Lock()
	w.base = ctx
	for _, it := range w.items {
		w.startLocked(it)
	}
	w.mu.Unlock()
	t := time.NewTicker(idleCheckInterval)
	defer t.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-t.C:
			w.stopIdle(w.now())
		}
	}
	w.mu.Lock()
	w.stopped = true
	for _, it := range w.items {
		it.stopLocked()
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// stopIdle stops the synced watches that nothing read for maxIdle before
// now; the next read starts them again.
func (w *watchedObjects) stopIdle(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, it := range w.items {
		if it.cancel != nil && it.cache.synced() && now.Sub(it.lastAccess) > w.maxIdle {
			it.stopLocked()
			it.idle = true
			w.log.Debug("stopped an idle watch", "resource", k.resource, "namespace", k.namespace, "name", k.name)
		}
	}
}

// register records the ConfigMaps and Secrets pod refers to, starting a
// watch on each that no registered pod referred to yet, and forgets those
// it no longer refers to. It is cheap when nothing changed, so that every
// sync of a pod may call it. A nil w does nothing.
func (w *watchedObjects) register(pod *corev1.Pod) {
	if w == nil {
		return
	}
	uid := pod.GetMetadata().GetUid()
	refs := podObjectRefs(pod)
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.pods[uid]
	for k := range refs {
		if _, ok := prev[k]; ok {
			continue
		}
		it := w.items[k]
		if it == nil {
			it = &watchItem{pods: map[string]struct{}{}, cache: w.newCache(k), lastAccess: w.now()}
			w.items[k] = it
			w.startLocked(it)
		}
		it.pods[uid] = struct{}{}
	}
	for k := range prev {
		if _, ok := refs[k]; !ok {
			w.dropRefLocked(k, uid)
		}
	}
	w.pods[uid] = refs
}

// unregister forgets the pod of uid: the watches no other registered pod
// needs are stopped. A nil w, or a uid not registered, does nothing.
func (w *watchedObjects) unregister(uid string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.pods[uid] {
		w.dropRefLocked(k, uid)
	}
	delete(w.pods, uid)
}

func (w *watchedObjects) dropRefLocked(k objectKey, uid string) {
	it := w.items[k]
	if it == nil {
		return
	}
	delete(it.pods, uid)
	if len(it.pods) == 0 {
		it.stopLocked()
		delete(w.items, k)
	}
}

// get reads k from its watch, waiting (syncTimeout at most) for the
// watch's first list. An object no registered pod refers to is an error,
// a missing one NotFound with the kubelet's wording. An object seen
// immutable stops its watch; the copy it had is served from then on.
func (w *watchedObjects) get(ctx context.Context, k objectKey) (proto.Message, error) {
	w.mu.Lock()
	it := w.items[k]
	if it == nil {
		w.mu.Unlock()
		return nil, fmt.Errorf("object %q/%q not registered", k.namespace, k.name)
	}
	it.lastAccess = w.now()
	if it.idle {
		it.cache = w.newCache(k)
		w.startLocked(it)
	}
	c := it.cache
	w.mu.Unlock()
	if err := waitSynced(ctx, c, w.syncTimeout); err != nil {
		return nil, fmt.Errorf("failed to sync %s cache: %w", k.singular(), err)
	}
	obj, ok := c.object(k.namespace, k.name)
	if !ok {
		return nil, apierrors.NewNotFound("", k.singular(), k.name)
	}
	if immutable(obj) {
		w.mu.Lock()
		if it.cancel != nil && w.items[k] == it && it.cache == c {
			it.stopLocked()
			it.immutable = true
			w.log.Debug("stopped watching an immutable object", "resource", k.resource, "namespace", k.namespace, "name", k.name)
		}
		w.mu.Unlock()
	}
	return obj, nil
}

// immutable reports whether a ConfigMap or Secret is marked immutable.
func immutable(obj proto.Message) bool {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return o.GetImmutable()
	case *corev1.Secret:
		return o.GetImmutable()
	}
	return false
}

// waitSynced waits until c has listed its object, timeout at most.
func waitSynced(ctx context.Context, c objectCache, timeout time.Duration) error {
	if c.synced() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if c.synced() {
				return nil
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return errSyncTimeout
			}
			return ctx.Err()
		case <-t.C:
			if c.synced() {
				return nil
			}
		}
	}
}

// ConfigMap implements envObjects; callers must not change the result.
func (w *watchedObjects) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	obj, err := w.get(ctx, objectKey{resourceConfigMaps, namespace, name})
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.ConfigMap), nil
}

// Secret implements envObjects; callers must not change the result.
func (w *watchedObjects) Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	obj, err := w.get(ctx, objectKey{resourceSecrets, namespace, name})
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Secret), nil
}

// watching is how many watches run (for tests).
func (w *watchedObjects) watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, it := range w.items {
		if it.cancel != nil {
			n++
		}
	}
	return n
}

// podObjectRefs is every ConfigMap and Secret the agent reads for pod, in
// its namespace: those of its configMap, secret and projected volumes, and
// of the env valueFrom and envFrom of its init and app containers (what
// the Node authorizer relates the node to).
func podObjectRefs(pod *corev1.Pod) map[objectKey]struct{} {
	ns := pod.GetMetadata().GetNamespace()
	refs := map[objectKey]struct{}{}
	add := func(resource, name string) {
		if name != "" {
			refs[objectKey{resource, ns, name}] = struct{}{}
		}
	}
	spec := pod.GetSpec()
	for _, v := range spec.GetVolumes() {
		src := v.GetVolumeSource()
		add(resourceConfigMaps, src.GetConfigMap().GetLocalObjectReference().GetName())
		add(resourceSecrets, src.GetSecret().GetSecretName())
		for _, s := range src.GetProjected().GetSources() {
			add(resourceConfigMaps, s.GetConfigMap().GetLocalObjectReference().GetName())
			add(resourceSecrets, s.GetSecret().GetLocalObjectReference().GetName())
		}
	}
	for _, cs := range [][]*corev1.Container{spec.GetInitContainers(), spec.GetContainers()} {
		for _, c := range cs {
			for _, e := range c.GetEnv() {
				add(resourceConfigMaps, e.GetValueFrom().GetConfigMapKeyRef().GetLocalObjectReference().GetName())
				add(resourceSecrets, e.GetValueFrom().GetSecretKeyRef().GetLocalObjectReference().GetName())
			}
			for _, f := range c.GetEnvFrom() {
				add(resourceConfigMaps, f.GetConfigMapRef().GetLocalObjectReference().GetName())
				add(resourceSecrets, f.GetSecretRef().GetLocalObjectReference().GetName())
			}
		}
	}
	return refs
}
