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
	"path"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/internal/placement"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
	"github.com/kplane/kplane/services/apiserver/apierrors"
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

func (c *Controller) reconcile(ctx context.Context, key string) error {
	if k, ok := strings.CutPrefix(key, claimPrefix); ok {
		return c.syncClaim(ctx, k)
	}
	if k, ok := strings.CutPrefix(key, volumePrefix); ok {
		return c.syncVolume(ctx, k)
	}
	return nil
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

// findVolume is the smallest volume pvc may bind: pre-bound to it, or
// Available, of its class, big enough, with its access modes and volume
// mode, matching its selector and, when node is set, usable on that node.
func (c *Controller) findVolume(pvc *corev1.PersistentVolumeClaim, class, node string) *corev1.PersistentVolume {
	want, err := resource.ParseQuantity(pvc.GetSpec().GetResources().GetRequests()["storage"])
	if err != nil {
		return nil
	}
	sel, err := ctrl.Selector(pvc.GetSpec().GetSelector())
	if err != nil {
		return nil
	}
	var nodeObj *corev1.Node
	if node != "" {
		nodeObj, _ = c.cfg.NodeInformer.Store().Get(node)
	}
	var best *corev1.PersistentVolume
	var bestSize resource.Quantity
	for _, pv := range c.cfg.VolumeInf.Store().List() {
		if pv.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if r := pv.GetSpec().GetClaimRef(); r != nil {
			if r.GetNamespace() != pvc.GetMetadata().GetNamespace() || r.GetName() != pvc.GetMetadata().GetName() ||
				(r.GetUid() != "" && r.GetUid() != pvc.GetMetadata().GetUid()) {
				continue
			}
			return pv // pre-bound to this claim
		}
		if ph := pv.GetStatus().GetPhase(); ph != "Available" && ph != "Pending" && ph != "" {
			continue
		}
		if volumeClassOf(pv) != class || pv.GetSpec().GetVolumeMode() != pvc.GetSpec().GetVolumeMode() {
			continue
		}
		size, err := resource.ParseQuantity(pv.GetSpec().GetCapacity()["storage"])
		if err != nil || size.Cmp(want) < 0 {
			continue
		}
		if !hasModes(pv.GetSpec().GetAccessModes(), pvc.GetSpec().GetAccessModes()) {
			continue
		}
		if pvc.GetSpec().GetSelector() != nil && !sel.Matches(labels.Set(pv.GetMetadata().GetLabels())) {
			continue
		}
		if node != "" && !volumeFits(pv, nodeObj) {
			continue
		}
		if best == nil || size.Cmp(bestSize) < 0 || size.Cmp(bestSize) == 0 && pv.GetMetadata().GetName() < best.GetMetadata().GetName() {
			best, bestSize = pv, size
		}
	}
	return best
}

// VolumeFits reports whether pv's node affinity allows node (a volume
// without one fits everywhere; an unknown node nowhere it names).
func volumeFits(pv *corev1.PersistentVolume, node *corev1.Node) bool {
	terms := pv.GetSpec().GetNodeAffinity().GetRequired().GetNodeSelectorTerms()
	if len(terms) == 0 {
		return true
	}
	if node == nil {
		return false
	}
	return slices.ContainsFunc(terms, func(t *corev1.NodeSelectorTerm) bool { return placement.TermMatches(t, node) })
}

func hasModes(have, want []string) bool {
	for _, m := range want {
		if !slices.Contains(have, m) {
			return false
		}
	}
	return true
}

// bind points pv at pvc, then pvc at pv, then writes both statuses, as
// Kubernetes' binder does (each step is repeated by the next sync should a
// later one fail).
func (c *Controller) bind(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	v := proto.Clone(pv).(*corev1.PersistentVolume)
	if v.GetSpec().GetClaimRef().GetUid() != pvc.GetMetadata().GetUid() {
		v.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", ApiVersion: "v1", Namespace: pvc.GetMetadata().GetNamespace(),
			Name: pvc.GetMetadata().GetName(), Uid: pvc.GetMetadata().GetUid(), ResourceVersion: pvc.GetMetadata().GetResourceVersion()}
		if v.Metadata.Annotations == nil {
			v.Metadata.Annotations = map[string]string{}
		}
		v.Metadata.Annotations[BoundByControllerAnnot] = "yes"
		var err error
		if v, err = c.cfg.Volumes.Update(ctx, v); err != nil {
			return ignoreGone(err, "volume %s: bind to %s", pv.GetMetadata().GetName(), client.Key(pvc))
		}
	}
	if err := c.volumeStatus(ctx, v, "Bound", ""); err != nil {
		return err
	}
	p := proto.Clone(pvc).(*corev1.PersistentVolumeClaim)
	if p.GetSpec().GetVolumeName() != v.GetMetadata().GetName() || p.GetMetadata().GetAnnotations()[BindCompletedAnnotation] != "yes" {
		p.Spec.VolumeName = v.GetMetadata().GetName()
		if p.Metadata.Annotations == nil {
			p.Metadata.Annotations = map[string]string{}
		}
		p.Metadata.Annotations[BindCompletedAnnotation] = "yes"
		if v.GetMetadata().GetAnnotations()[BoundByControllerAnnot] == "yes" {
			p.Metadata.Annotations[BoundByControllerAnnot] = "yes"
		}
		var err error
		if p, err = c.cfg.Claims.Update(ctx, p); err != nil {
			return ignoreGone(err, "claim %s: bind to %s", client.Key(pvc), v.GetMetadata().GetName())
		}
	}
	return c.claimBound(ctx, p, v)
}

// claimBound writes a bound claim's status: Bound, with the volume's
// access modes and capacity.
func (c *Controller) claimBound(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	if pv.GetStatus().GetPhase() != "Bound" {
		if err := c.volumeStatus(ctx, pv, "Bound", ""); err != nil {
			return err
		}
	}
	return c.claimStatus(ctx, pvc, "Bound", pv)
}

func (c *Controller) claimStatus(ctx context.Context, pvc *corev1.PersistentVolumeClaim, phase string, pv *corev1.PersistentVolume) error {
	st := proto.Clone(pvc.GetStatus()).(*corev1.PersistentVolumeClaimStatus)
	if st == nil {
		st = &corev1.PersistentVolumeClaimStatus{}
	}
	st.Phase = phase
	if pv != nil {
		st.AccessModes = pv.GetSpec().GetAccessModes()
		st.Capacity = pv.GetSpec().GetCapacity()
	} else if phase == "Pending" {
		st.AccessModes, st.Capacity = nil, nil
	}
	if proto.Equal(st, pvc.GetStatus()) || (pvc.GetStatus() == nil && proto.Equal(st, &corev1.PersistentVolumeClaimStatus{})) {
		return nil
	}
	u := proto.Clone(pvc).(*corev1.PersistentVolumeClaim)
	u.Status = st
	_, err := c.cfg.Claims.UpdateStatus(ctx, u)
	return ignoreGone(err, "claim %s: status %s", client.Key(pvc), phase)
}

func (c *Controller) volumeStatus(ctx context.Context, pv *corev1.PersistentVolume, phase, reason string) error {
	if pv.GetStatus().GetPhase() == phase && pv.GetStatus().GetReason() == reason {
		return nil
	}
	u := proto.Clone(pv).(*corev1.PersistentVolume)
	u.Status = &corev1.PersistentVolumeStatus{Phase: phase, Reason: reason}
	_, err := c.cfg.Volumes.UpdateStatus(ctx, u)
	return ignoreGone(err, "volume %s: status %s", pv.GetMetadata().GetName(), phase)
}

// provision makes a node-local directory volume for pvc on node (the
// scheduler's choice; none for a class binding immediately, whose volume
// then has no node affinity) and binds it.
func (c *Controller) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass, node string) error {
	p := proto.Clone(pvc).(*corev1.PersistentVolumeClaim)
	if p.GetMetadata().GetAnnotations()[ProvisionerAnnotation] != Provisioner {
		if p.Metadata.Annotations == nil {
			p.Metadata.Annotations = map[string]string{}
		}
		p.Metadata.Annotations[ProvisionerAnnotation] = Provisioner
		p.Metadata.Annotations[BetaProvisionerAnnot] = Provisioner
		var err error
		if p, err = c.cfg.Claims.Update(ctx, p); err != nil {
			return ignoreGone(err, "claim %s: provisioner annotation", client.Key(pvc))
		}
	}
	name := "pvc-" + p.GetMetadata().GetUid()
	mode := "Filesystem"
	if p.GetSpec().VolumeMode != nil {
		mode = p.GetSpec().GetVolumeMode()
	}
	pv := &corev1.PersistentVolume{
		ApiVersion: "v1", Kind: "PersistentVolume",
		Metadata: &metav1.ObjectMeta{Name: name, Annotations: map[string]string{ProvisionedByAnnotation: Provisioner},
			Finalizers: []string{VolumeProtectionFinalize}},
		Spec: &corev1.PersistentVolumeSpec{
			Capacity:                      map[string]string{"storage": p.GetSpec().GetResources().GetRequests()["storage"]},
			AccessModes:                   p.GetSpec().GetAccessModes(),
			PersistentVolumeReclaimPolicy: sc.GetReclaimPolicy(),
			StorageClassName:              sc.GetMetadata().GetName(),
			MountOptions:                  sc.GetMountOptions(),
			VolumeMode:                    proto.String(mode),
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", ApiVersion: "v1", Namespace: p.GetMetadata().GetNamespace(),
				Name: p.GetMetadata().GetName(), Uid: p.GetMetadata().GetUid(), ResourceVersion: p.GetMetadata().GetResourceVersion()},
			PersistentVolumeSource: &corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: path.Join(c.cfg.VolumeDir, p.GetMetadata().GetNamespace()+"_"+p.GetMetadata().GetName()+"_"+name),
				Type: proto.String("DirectoryOrCreate")}},
		},
	}
	if pv.Spec.PersistentVolumeReclaimPolicy == "" {
		pv.Spec.PersistentVolumeReclaimPolicy = "Delete"
	}
	if node != "" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []*corev1.NodeSelectorTerm{{
			MatchExpressions: []*corev1.NodeSelectorRequirement{{Key: hostnameLabel, Operator: "In", Values: []string{node}}}}}}}
	}
	got, err := c.cfg.Volumes.Create(ctx, pv)
	if apierrors.IsAlreadyExists(err) {
		got, err = c.cfg.Volumes.Get(ctx, "", name)
	}
	if err != nil {
		ctrl.Eventf(c.cfg.Recorder, pvc, "Warning", "ProvisioningFailed", "failed to provision volume with StorageClass %q: %v", sc.GetMetadata().GetName(), err)
		return fmt.Errorf("persistentvolume: provision for %s: %w", client.Key(pvc), err)
	}
	ctrl.Eventf(c.cfg.Recorder, pvc, "Normal", "ProvisioningSucceeded", "Successfully provisioned volume %s", name)
	return c.bind(ctx, p, got)
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
