// Package persistentvolume is the controller of volumes and their claims:
// the binder (a claim is bound to the smallest Available volume of its
// class whose capacity, access modes, volume mode, selector and, for a
// claim waiting for its first consumer, node affinity fit; claims and
// volumes go Pending, Bound, Released or Lost as in Kubernetes, a released
// volume is kept (Retain) or deleted (Delete)); kplane's built-in
// provisioner, which for classes naming it makes node-local directory
// volumes (hostPath under Config.VolumeDir with a node affinity on the node
// the scheduler picked, recorded in the claim's
// volume.kubernetes.io/selected-node annotation); the default StorageClass
// "standard" created at start when absent; and the protection finalizers
// (kubernetes.io/pvc-protection held while a pod uses the claim,
// kubernetes.io/pv-protection while the volume is bound).
package persistentvolume

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// Names Kubernetes and kplane use.
const (
	// Provisioner is the built-in provisioner's name.
	Provisioner = "kplane.io/node-local"
	// DefaultClass is the StorageClass created at start.
	DefaultClass = "standard"
	// DefaultVolumeDir is where node-local volumes live on their node.
	DefaultVolumeDir = "/var/lib/kplane/volumes"

	SelectedNodeAnnotation   = "volume.kubernetes.io/selected-node"
	ProvisionerAnnotation    = "volume.kubernetes.io/storage-provisioner"
	BetaProvisionerAnnot     = "volume.beta.kubernetes.io/storage-provisioner"
	ProvisionedByAnnotation  = "pv.kubernetes.io/provisioned-by"
	BoundByControllerAnnot   = "pv.kubernetes.io/bound-by-controller"
	BindCompletedAnnotation  = "pv.kubernetes.io/bind-completed"
	DefaultClassAnnotation   = "storageclass.kubernetes.io/is-default-class"
	ClaimProtectionFinalizer = "kubernetes.io/pvc-protection"
	VolumeProtectionFinalize = "kubernetes.io/pv-protection"
	hostnameLabel            = "kubernetes.io/hostname"
)

// Client is what the controller writes through (*client.Client[T]).
type Client[T proto.Message] interface {
	Get(ctx context.Context, namespace, name string) (T, error)
	Create(ctx context.Context, obj T) (T, error)
	Update(ctx context.Context, obj T) (T, error)
	UpdateStatus(ctx context.Context, obj T) (T, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// ClassClient creates the default class (*client.Client[*storagev1.StorageClass]).
type ClassClient interface {
	Create(ctx context.Context, obj *storagev1.StorageClass) (*storagev1.StorageClass, error)
}

// Config wires a Controller; New adds handlers to the shared informers.
type Config struct {
	Claims        Client[*corev1.PersistentVolumeClaim]
	Volumes       Client[*corev1.PersistentVolume]
	Classes       ClassClient
	ClaimInformer *client.Informer[*corev1.PersistentVolumeClaim]
	VolumeInf     *client.Informer[*corev1.PersistentVolume]
	ClassInformer *client.Informer[*storagev1.StorageClass]
	PodInformer   *client.Informer[*corev1.Pod]
	NodeInformer  *client.Informer[*corev1.Node]
	Recorder      *client.Recorder
	// VolumeDir is the parent of the provisioned directories (default
	// DefaultVolumeDir).
	VolumeDir string
	// NoDefaultClass leaves the "standard" class uncreated.
	NoDefaultClass bool
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
}

// Controller is the volume controller.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
}

// Keys in the queue: "claim:<ns>/<name>" and "volume:<name>".
const (
	claimPrefix  = "claim:"
	volumePrefix = "volume:"
)

// New returns a controller and registers its informer handlers.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.VolumeDir == "" {
		cfg.VolumeDir = DefaultVolumeDir
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "persistentvolume"), queue: client.NewQueue("persistentvolume", 0, 0)}
	claim := func(p *corev1.PersistentVolumeClaim) {
		c.queue.Add(claimPrefix + client.Key(p))
		if v := p.GetSpec().GetVolumeName(); v != "" {
			c.queue.Add(volumePrefix + v)
		}
	}
	volume := func(v *corev1.PersistentVolume) {
		c.queue.Add(volumePrefix + v.GetMetadata().GetName())
		if r := v.GetSpec().GetClaimRef(); r != nil {
			c.queue.Add(claimPrefix + client.KeyOf(r.GetNamespace(), r.GetName()))
		}
	}
	cfg.ClaimInformer.AddEventHandler(client.Handler[*corev1.PersistentVolumeClaim]{OnAdd: claim,
		OnUpdate: func(_, p *corev1.PersistentVolumeClaim) { claim(p) }, OnDelete: claim})
	cfg.VolumeInf.AddEventHandler(client.Handler[*corev1.PersistentVolume]{OnAdd: volume,
		OnUpdate: func(_, v *corev1.PersistentVolume) {
			volume(v)
			// A volume becoming available may bind any waiting claim.
			if v.GetSpec().GetClaimRef() == nil {
				c.enqueuePendingClaims()
			}
		}, OnDelete: volume})
	// A pod gone or finished may release a claim being deleted.
	pod := func(p *corev1.Pod) {
		for _, v := range p.GetSpec().GetVolumes() {
			if n := v.GetPersistentVolumeClaim().GetClaimName(); n != "" {
				c.queue.Add(claimPrefix + client.KeyOf(p.GetMetadata().GetNamespace(), n))
			}
		}
	}
	cfg.PodInformer.AddEventHandler(client.Handler[*corev1.Pod]{OnAdd: pod, OnUpdate: func(_, p *corev1.Pod) { pod(p) }, OnDelete: pod})
	cfg.ClassInformer.AddEventHandler(client.Handler[*storagev1.StorageClass]{OnAdd: func(*storagev1.StorageClass) { c.enqueuePendingClaims() }})
	return c
}

func (c *Controller) enqueuePendingClaims() {
	for _, p := range c.cfg.ClaimInformer.Store().List() {
		if p.GetSpec().GetVolumeName() == "" {
			c.queue.Add(claimPrefix + client.Key(p))
		}
	}
}

// Run creates the default class if asked, waits for the caches, then
// reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.ClaimInformer, c.cfg.VolumeInf, c.cfg.ClassInformer, c.cfg.PodInformer, c.cfg.NodeInformer) {
		return
	}
	if !c.cfg.NoDefaultClass {
		if _, ok := c.cfg.ClassInformer.Store().Get(DefaultClass); !ok {
			_, err := c.cfg.Classes.Create(ctx, &storagev1.StorageClass{
				Metadata:          &metav1.ObjectMeta{Name: DefaultClass, Annotations: map[string]string{DefaultClassAnnotation: "true"}},
				Provisioner:       Provisioner,
				ReclaimPolicy:     proto.String("Delete"),
				VolumeBindingMode: proto.String("WaitForFirstConsumer"),
			})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				c.log.Warn("default storage class not created", "err", err)
			}
		}
	}
	traced := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "persistentvolume.reconcile", Annotations: c.annotations}.Reconciler(c.reconcile)
	client.RunWorkers(ctx, c.queue, workers, traced, c.log)
}

// annotations reads the annotations of the object a key names, for the
// reconcile span's parent trace.
func (c *Controller) annotations(key string) map[string]string {
	if k, ok := strings.CutPrefix(key, claimPrefix); ok {
		if p, ok := c.cfg.ClaimInformer.Store().Get(k); ok {
			return p.GetMetadata().GetAnnotations()
		}
	}
	if k, ok := strings.CutPrefix(key, volumePrefix); ok {
		if v, ok := c.cfg.VolumeInf.Store().Get(k); ok {
			return v.GetMetadata().GetAnnotations()
		}
	}
	return nil
}

func (c *Controller) reconcile(ctx context.Context, key string) (client.Result, error) {
	if k, ok := strings.CutPrefix(key, claimPrefix); ok {
		return client.Result{}, c.syncClaim(ctx, k)
	}
	if k, ok := strings.CutPrefix(key, volumePrefix); ok {
		return client.Result{}, c.syncVolume(ctx, k)
	}
	return client.Result{}, nil
}

// classOf is the name of a claim's class ("" for none).
func classOf(p *corev1.PersistentVolumeClaim) string {
	if v, ok := p.GetMetadata().GetAnnotations()["volume.beta.kubernetes.io/storage-class"]; ok {
		return v
	}
	return p.GetSpec().GetStorageClassName()
}

func volumeClassOf(v *corev1.PersistentVolume) string {
	if c, ok := v.GetMetadata().GetAnnotations()["volume.beta.kubernetes.io/storage-class"]; ok {
		return c
	}
	return v.GetSpec().GetStorageClassName()
}

// syncClaim binds, provisions for, or reports the claim named by key.
func (c *Controller) syncClaim(ctx context.Context, key string) error {
	cached, ok := c.cfg.ClaimInformer.Store().Get(key)
	if !ok {
		return nil
	}
	pvc := proto.Clone(cached).(*corev1.PersistentVolumeClaim)
	if pvc.GetMetadata().GetDeletionTimestamp() != nil {
		return c.releaseClaimProtection(ctx, pvc)
	}
	if !ctrl.HasFinalizer(pvc.GetMetadata(), ClaimProtectionFinalizer) {
		pvc.Metadata.Finalizers = append(pvc.Metadata.Finalizers, ClaimProtectionFinalizer)
		got, err := c.cfg.Claims.Update(ctx, pvc)
		if err != nil {
			return ignoreGone(err, "claim %s: protection finalizer", key)
		}
		pvc = got
	}
	if name := pvc.GetSpec().GetVolumeName(); name != "" {
		pv, ok := c.cfg.VolumeInf.Store().Get(name)
		switch {
		case !ok:
			if pvc.GetStatus().GetPhase() == "Bound" {
				ctrl.Eventf(c.cfg.Recorder, pvc, "Warning", "ClaimLost", "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!")
			}
			return c.claimStatus(ctx, pvc, "Lost", nil)
		case pv.GetSpec().GetClaimRef().GetUid() == pvc.GetMetadata().GetUid():
			return c.claimBound(ctx, pvc, pv)
		case pv.GetSpec().GetClaimRef() == nil:
			// Pre-bound by the user to this volume: take it.
			return c.bind(ctx, pvc, pv)
		default:
			ctrl.Eventf(c.cfg.Recorder, pvc, "Warning", "FailedBinding", "volume %q already bound to a different claim.", name)
			return c.claimStatus(ctx, pvc, "Pending", nil)
		}
	}
	if pvc.GetSpec().StorageClassName == nil && pvc.GetMetadata().GetAnnotations()["volume.beta.kubernetes.io/storage-class"] == "" {
		// As Kubernetes' retroactive default class: an unbound claim made
		// while there was no default class gets the one there is now.
		if def := c.defaultClass(); def != "" {
			pvc.Spec.StorageClassName = proto.String(def)
			_, err := c.cfg.Claims.Update(ctx, pvc)
			return ignoreGone(err, "claim %s: default class", key)
		}
	}
	class := classOf(pvc)
	var sc *storagev1.StorageClass
	if class != "" {
		sc, _ = c.cfg.ClassInformer.Store().Get(class)
	}
	waitForConsumer := sc.GetVolumeBindingMode() == "WaitForFirstConsumer"
	node := pvc.GetMetadata().GetAnnotations()[SelectedNodeAnnotation]
	if waitForConsumer && node == "" {
		ctrl.Eventf(c.cfg.Recorder, pvc, "Normal", "WaitForFirstConsumer", "waiting for first consumer to be created before binding")
		return c.claimStatus(ctx, pvc, "Pending", nil)
	}
	if pv := c.findVolume(pvc, class, node); pv != nil {
		return c.bind(ctx, pvc, pv)
	}
	switch {
	case class == "" || sc == nil && class != "":
		if class != "" {
			ctrl.Eventf(c.cfg.Recorder, pvc, "Warning", "ProvisioningFailed", "storageclass.storage.k8s.io %q not found", class)
		} else {
			ctrl.Eventf(c.cfg.Recorder, pvc, "Normal", "FailedBinding", "no persistent volumes available for this claim and no storage class is set")
		}
	case sc.GetProvisioner() == Provisioner:
		return c.provision(ctx, pvc, sc, node)
	default:
		ctrl.Eventf(c.cfg.Recorder, pvc, "Normal", "ExternalProvisioning",
			"Waiting for a volume to be created either by the external provisioner '%s' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.",
			sc.GetProvisioner())
	}
	return c.claimStatus(ctx, pvc, "Pending", nil)
}

// defaultClass is the name of the default StorageClass (the newest if
// several), or "".
func (c *Controller) defaultClass() string {
	var best *storagev1.StorageClass
	for _, sc := range c.cfg.ClassInformer.Store().List() {
		if sc.GetMetadata().GetAnnotations()[DefaultClassAnnotation] != "true" {
			continue
		}
		if best == nil || sc.GetMetadata().GetCreationTimestamp().AsTime().After(best.GetMetadata().GetCreationTimestamp().AsTime()) {
			best = sc
		}
	}
	return best.GetMetadata().GetName()
}

// releaseClaimProtection removes the claim's protection finalizer once no
// pod that is not finished uses it.
func (c *Controller) releaseClaimProtection(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if !ctrl.HasFinalizer(pvc.GetMetadata(), ClaimProtectionFinalizer) {
		return nil
	}
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(pvc.GetMetadata().GetNamespace()) {
		if ph := p.GetStatus().GetPhase(); ph == "Succeeded" || ph == "Failed" {
			continue
		}
		for _, v := range p.GetSpec().GetVolumes() {
			if v.GetPersistentVolumeClaim().GetClaimName() == pvc.GetMetadata().GetName() {
				return nil // requeued when the pod changes
			}
		}
	}
	ctrl.RemoveFinalizer(pvc.Metadata, ClaimProtectionFinalizer)
	_, err := c.cfg.Claims.Update(ctx, pvc)
	return ignoreGone(err, "claim %s: remove protection", client.Key(pvc))
}

// syncVolume keeps a volume's phase and applies its reclaim policy once
// its claim is gone.
func (c *Controller) syncVolume(ctx context.Context, name string) error {
	cached, ok := c.cfg.VolumeInf.Store().Get(name)
	if !ok {
		return nil
	}
	pv := proto.Clone(cached).(*corev1.PersistentVolume)
	if pv.GetMetadata().GetDeletionTimestamp() != nil {
		if ctrl.HasFinalizer(pv.GetMetadata(), VolumeProtectionFinalize) && pv.GetStatus().GetPhase() != "Bound" {
			ctrl.RemoveFinalizer(pv.Metadata, VolumeProtectionFinalize)
			_, err := c.cfg.Volumes.Update(ctx, pv)
			return ignoreGone(err, "volume %s: remove protection", name)
		}
		return nil
	}
	if !ctrl.HasFinalizer(pv.GetMetadata(), VolumeProtectionFinalize) {
		pv.Metadata.Finalizers = append(pv.Metadata.Finalizers, VolumeProtectionFinalize)
		got, err := c.cfg.Volumes.Update(ctx, pv)
		if err != nil {
			return ignoreGone(err, "volume %s: protection finalizer", name)
		}
		pv = got
	}
	ref := pv.GetSpec().GetClaimRef()
	if ref == nil || ref.GetUid() == "" {
		return c.volumeStatus(ctx, pv, "Available", "")
	}
	claim, ok := c.cfg.ClaimInformer.Store().Get(client.KeyOf(ref.GetNamespace(), ref.GetName()))
	if ok && claim.GetMetadata().GetUid() == ref.GetUid() {
		if claim.GetSpec().GetVolumeName() == "" || claim.GetSpec().GetVolumeName() == name {
			if claim.GetSpec().GetVolumeName() == name {
				return c.volumeStatus(ctx, pv, "Bound", "")
			}
			return nil // the claim's sync completes the binding
		}
	}
	if ok && claim.GetMetadata().GetUid() == ref.GetUid() {
		return nil
	}
	// The claim is gone: the volume is released and reclaimed.
	if pv.GetStatus().GetPhase() != "Released" && pv.GetStatus().GetPhase() != "Failed" {
		if err := c.volumeStatus(ctx, pv, "Released", ""); err != nil {
			return err
		}
	}
	switch pv.GetSpec().GetPersistentVolumeReclaimPolicy() {
	case "Delete":
		err := c.cfg.Volumes.Delete(ctx, "", name, client.DeleteOptions{})
		return ignoreGone(err, "volume %s: delete", name)
	case "Recycle":
		ctrl.Eventf(c.cfg.Recorder, pv, "Warning", "VolumeFailedRecycle", "Recycle is not supported by kplane")
		return c.volumeStatus(ctx, pv, "Failed", "VolumeFailedRecycle")
	}
	return nil
}

func ignoreGone(err error, format string, args ...any) error {
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// A conflict means a newer version is on its way through the
		// informer, which requeues the object.
		return nil
	}
	return fmt.Errorf("persistentvolume: "+format+": %w", append(args, err)...)
}
