// Package crd is the CustomResourceDefinition controller: what Kubernetes'
// apiextensions-apiserver runs as its naming, establishing and finalizer
// controllers, in one reconcile loop over CRD names.
//
//   - Names: a CRD's requested names (plural, singular, short names, kind,
//     list kind) are accepted into status.acceptedNames unless another CRD
//     of the same group has already accepted one of them; NamesAccepted
//     says which conflicted, with Kubernetes' reasons and messages.
//   - Established: True (InitialNamesAccepted) once the names are accepted,
//     as Kubernetes' establishing controller sets it: the API service serves
//     a CRD's resource as soon as its names are accepted.
//   - Deletion: a deleted CRD carries the cleanup finalizer (the API
//     service adds it, and deletes the CRD's custom objects itself, as
//     kube-apiserver's finalizer does from inside the API server); the
//     controller waits until none is left (listing them through the
//     generic resource service), Terminating says how that goes, then the
//     finalizer is removed and the CRD goes.
package crd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	"github.com/kplane/kplane/services/client"
)

// CleanupFinalizer holds a deleted CRD until its custom resources are gone.
const CleanupFinalizer = "customresourcecleanup.apiextensions.k8s.io"

// Condition types of a CRD.
const (
	NamesAccepted = "NamesAccepted"
	Established   = "Established"
	Terminating   = "Terminating"
)

// EstablishedReason and EstablishedMessage are Established's (True) once
// the names are accepted, as Kubernetes words them.
const (
	EstablishedReason  = "InitialNamesAccepted"
	EstablishedMessage = "the initial names have been accepted"
)

// CRDClient writes CRDs (*client.Client[*apiextensionsv1.CustomResourceDefinition]).
type CRDClient interface {
	Update(ctx context.Context, obj *apiextensionsv1.CustomResourceDefinition) (*apiextensionsv1.CustomResourceDefinition, error)
	UpdateStatus(ctx context.Context, obj *apiextensionsv1.CustomResourceDefinition) (*apiextensionsv1.CustomResourceDefinition, error)
}

// ResourceClient lists custom objects (dynamicv1.ResourceServiceClient).
type ResourceClient interface {
	List(ctx context.Context, in *dynamicv1.ListRequest, opts ...grpc.CallOption) (*dynamicv1.ListResponse, error)
}

// Config wires a Controller; New adds handlers to the informer.
type Config struct {
	CRDs CRDClient
	// Resources lists a deleted CRD's custom objects (nil: the
	// controller does not wait for them).
	Resources ResourceClient
	Informer  *client.Informer[*apiextensionsv1.CustomResourceDefinition]
	Logger    *slog.Logger
	// TracerProvider records a span per reconcile; nil uses the global one.
	TracerProvider trace.TracerProvider
	// Now is the clock of the conditions' lastTransitionTime (default
	// time.Now).
	Now func() time.Time
}

// Controller is the CRD controller. Its queue holds CRD names.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
}

// New returns a controller and registers its handlers: every added or
// updated CRD is reconciled; a deleted one frees its names, so the other
// CRDs of its group are reconciled again.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "crd"), queue: client.NewQueue("crd", 0, 0)}
	cfg.Informer.AddEventHandler(client.Handler[*apiextensionsv1.CustomResourceDefinition]{
		OnAdd:    func(o *apiextensionsv1.CustomResourceDefinition) { c.queue.Add(o.GetMetadata().GetName()) },
		OnUpdate: func(_, o *apiextensionsv1.CustomResourceDefinition) { c.queue.Add(o.GetMetadata().GetName()) },
		OnDelete: func(o *apiextensionsv1.CustomResourceDefinition) {
			for _, other := range cfg.Informer.Store().List() {
				if other.GetSpec().GetGroup() == o.GetSpec().GetGroup() {
					c.queue.Add(other.GetMetadata().GetName())
				}
			}
		},
	})
	return c
}

// Run waits for the cache, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.Informer) {
		return
	}
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "crd.reconcile",
		Annotations: client.StoreAnnotations(c.cfg.Informer.Store())}
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
}

// Reconcile brings the CRD named name to its wanted status, or finishes
// its deletion.
func (c *Controller) Reconcile(ctx context.Context, name string) (client.Result, error) {
	cached, ok := c.cfg.Informer.Store().Get(name)
	if !ok {
		return client.Result{}, nil
	}
	crd := proto.Clone(cached).(*apiextensionsv1.CustomResourceDefinition)
	if crd.Status == nil {
		crd.Status = &apiextensionsv1.CustomResourceDefinitionStatus{}
	}
	if crd.GetMetadata().GetDeletionTimestamp() != nil {
		return client.Result{}, c.finalize(ctx, crd)
	}
	names, accepted, established := c.namesAndConditions(crd)
	want := proto.Clone(crd).(*apiextensionsv1.CustomResourceDefinition)
	want.Status.AcceptedNames = names
	c.setCondition(want.Status, accepted)
	c.setCondition(want.Status, established)
	if accepted.GetStatus() == "True" {
		// Kubernetes' establishing controller sets it True once the
		// names are accepted (and the kind's handler serves, which the
		// API service does from then on).
		c.setCondition(want.Status, &apiextensionsv1.CustomResourceDefinitionCondition{
			Type: Established, Status: "True", Reason: EstablishedReason, Message: EstablishedMessage})
	}
	if proto.Equal(want.Status, crd.Status) {
		return client.Result{}, nil
	}
	_, err := c.cfg.CRDs.UpdateStatus(ctx, want)
	switch {
	case err == nil:
		c.log.DebugContext(ctx, "status updated", "crd", name, "namesAccepted", accepted.GetStatus())
		return client.Result{}, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return client.Result{}, nil // changed meanwhile: the informer brings it back
	default:
		return client.Result{}, fmt.Errorf("crd %s: update status: %w", name, err)
	}
}

// namesAndConditions is Kubernetes' naming decision: each requested name
// is taken unless another CRD of the group (or this one, under another
// name) has accepted it; a conflict keeps the previously accepted name
// and sets NamesAccepted False with the conflict's reason.
func (c *Controller) namesAndConditions(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensionsv1.CustomResourceDefinitionNames, *apiextensionsv1.CustomResourceDefinitionCondition, *apiextensionsv1.CustomResourceDefinitionCondition) {
	resources, kinds := map[string]bool{}, map[string]bool{}
	for _, o := range c.cfg.Informer.Store().List() {
		if o.GetSpec().GetGroup() != crd.GetSpec().GetGroup() {
			continue
		}
		an := o.GetStatus().GetAcceptedNames()
		for _, n := range append([]string{an.GetPlural(), an.GetSingular()}, an.GetShortNames()...) {
			resources[n] = true
		}
		kinds[an.GetKind()], kinds[an.GetListKind()] = true, true
	}
	req := crd.GetSpec().GetNames()
	old := crd.GetStatus().GetAcceptedNames()
	names := proto.Clone(old).(*apiextensionsv1.CustomResourceDefinitionNames)
	if old == nil {
		names = &apiextensionsv1.CustomResourceDefinitionNames{}
	}
	cond := &apiextensionsv1.CustomResourceDefinitionCondition{Type: NamesAccepted, Status: "Unknown"}
	conflict := func(reason string, err error) {
		cond.Status, cond.Reason, cond.Message = "False", reason, err.Error()
	}
	if err := freshOrSame(req.GetPlural(), old.GetPlural(), resources); err != nil {
		conflict("PluralConflict", err)
	} else {
		names.Plural = req.GetPlural()
	}
	if err := freshOrSame(req.GetSingular(), old.GetSingular(), resources); err != nil {
		conflict("SingularConflict", err)
	} else {
		names.Singular = req.GetSingular()
	}
	if !slices.Equal(req.GetShortNames(), old.GetShortNames()) {
		var msgs []string
		for _, sn := range req.GetShortNames() {
			if slices.Contains(old.GetShortNames(), sn) {
				continue
			}
			if err := freshOrSame(sn, "", resources); err != nil {
				msgs = append(msgs, err.Error())
			}
		}
		switch len(msgs) {
		case 0:
			names.ShortNames = req.GetShortNames()
		case 1:
			conflict("ShortNamesConflict", fmt.Errorf("%s", msgs[0]))
		default:
			// apimachinery's aggregate error prints a list as [a, b].
			conflict("ShortNamesConflict", fmt.Errorf("[%s]", strings.Join(msgs, ", ")))
		}
	}
	if err := freshOrSame(req.GetKind(), old.GetKind(), kinds); err != nil {
		conflict("KindConflict", err)
	} else {
		names.Kind = req.GetKind()
	}
	if err := freshOrSame(req.GetListKind(), old.GetListKind(), kinds); err != nil {
		conflict("ListKindConflict", err)
	} else {
		names.ListKind = req.GetListKind()
	}
	names.Categories = req.GetCategories()
	if cond.Status == "Unknown" {
		cond.Status, cond.Reason, cond.Message = "True", "NoConflicts", "no conflicts found"
	}
	est := &apiextensionsv1.CustomResourceDefinitionCondition{Type: Established, Status: "False", Reason: "NotAccepted", Message: "not all names are accepted"}
	if prev := findCondition(crd.GetStatus(), Established); prev != nil {
		est = prev
	}
	if est.GetStatus() != "True" && cond.Status == "True" {
		est = &apiextensionsv1.CustomResourceDefinitionCondition{Type: Established, Status: "False", Reason: "Installing", Message: "the initial names have been accepted"}
	}
	return names, cond, est
}

func freshOrSame(requested, accepted string, used map[string]bool) error {
	if requested == accepted || !used[requested] {
		return nil
	}
	return fmt.Errorf("%q is already in use", requested)
}

// finalize waits until a deleted CRD's custom objects are gone (the API
// service deletes them), says so in Terminating, and removes the cleanup
// finalizer once none is left (as Kubernetes' finalizer controller;
// objects that finalizers hold keep the CRD until they go, the error
// requeuing it with back-off).
func (c *Controller) finalize(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	name := crd.GetMetadata().GetName()
	if !slices.Contains(crd.GetMetadata().GetFinalizers(), CleanupFinalizer) {
		return nil
	}
	term := &apiextensionsv1.CustomResourceDefinitionCondition{Type: Terminating, Status: "False", Reason: "NeverEstablished", Message: "resource was never established"}
	if findCondition(crd.Status, Established).GetStatus() == "True" {
		if err := c.waitInstancesGone(ctx, crd); err != nil {
			return err
		}
		term = &apiextensionsv1.CustomResourceDefinitionCondition{Type: Terminating, Status: "False", Reason: "InstanceDeletionCompleted", Message: "removed all instances"}
	}
	c.setCondition(crd.Status, term)
	st, err := c.cfg.CRDs.UpdateStatus(ctx, crd)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil
	case err != nil:
		return fmt.Errorf("crd %s: update status: %w", name, err)
	}
	st.Metadata.Finalizers = slices.DeleteFunc(st.Metadata.Finalizers, func(f string) bool { return f == CleanupFinalizer })
	_, err = c.cfg.CRDs.Update(ctx, st)
	switch {
	case err == nil:
		c.log.InfoContext(ctx, "custom resources deleted; finalizer removed", "crd", name)
		return nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil
	default:
		return fmt.Errorf("crd %s: remove finalizer: %w", name, err)
	}
}

func findCondition(st *apiextensionsv1.CustomResourceDefinitionStatus, typ string) *apiextensionsv1.CustomResourceDefinitionCondition {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

// setCondition puts cond into st as Kubernetes' SetCRDCondition does: the
// lastTransitionTime changes only with the status.
func (c *Controller) setCondition(st *apiextensionsv1.CustomResourceDefinitionStatus, cond *apiextensionsv1.CustomResourceDefinitionCondition) {
	cond = proto.Clone(cond).(*apiextensionsv1.CustomResourceDefinitionCondition)
	for i, old := range st.Conditions {
		if old.GetType() != cond.GetType() {
			continue
		}
		cond.LastTransitionTime = old.GetLastTransitionTime()
		if old.GetStatus() != cond.GetStatus() || cond.LastTransitionTime == nil {
			cond.LastTransitionTime = timestamppb.New(c.cfg.Now().Truncate(time.Second))
		}
		st.Conditions[i] = cond
		return
	}
	cond.LastTransitionTime = timestamppb.New(c.cfg.Now().Truncate(time.Second))
	st.Conditions = append(st.Conditions, cond)
}

// errInstancesRemain is waitInstancesGone's error while custom objects
// of a deleted CRD are still there (being deleted, or held by
// finalizers).
var errInstancesRemain = errors.New("crd: custom resources remain")

// waitInstancesGone reports whether a deleted CRD's custom objects are
// gone: nil once none is left; errInstancesRemain (the CRD requeued with
// back-off) while some are, with Terminating True saying so —
// InstanceDeletionInProgress at first, then InstanceDeletionCheck with how
// many remain.
func (c *Controller) waitInstancesGone(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	name := crd.GetMetadata().GetName()
	if c.cfg.Resources == nil {
		return nil
	}
	var version string
	for _, v := range crd.GetSpec().GetVersions() {
		if v.GetStorage() {
			version = v.GetName()
		}
	}
	plural := crd.GetStatus().GetAcceptedNames().GetPlural()
	if plural == "" {
		plural = crd.GetSpec().GetNames().GetPlural()
	}
	resp, err := c.cfg.Resources.List(ctx, &dynamicv1.ListRequest{Target: &dynamicv1.Target{Group: crd.GetSpec().GetGroup(), Version: version, Resource: plural}})
	if apierrors.IsNotFound(err) {
		return nil // not served: no object of it can be left
	}
	if err != nil {
		return fmt.Errorf("crd %s: list custom resources: %w", name, err)
	}
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(resp.GetList(), &l); err != nil {
		return fmt.Errorf("crd %s: list custom resources: %w", name, err)
	}
	if len(l.Items) == 0 {
		return nil
	}
	cond := &apiextensionsv1.CustomResourceDefinitionCondition{Type: Terminating, Status: "True", Reason: "InstanceDeletionInProgress", Message: "CustomResource deletion is in progress"}
	if findCondition(crd.Status, Terminating).GetReason() == cond.Reason {
		cond = &apiextensionsv1.CustomResourceDefinitionCondition{Type: Terminating, Status: "True", Reason: "InstanceDeletionCheck",
			Message: fmt.Sprintf("could not confirm zero CustomResources remaining: %d remaining", len(l.Items))}
	}
	c.setCondition(crd.Status, cond)
	if _, err := c.cfg.CRDs.UpdateStatus(ctx, crd); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("crd %s: update status: %w", name, err)
	}
	return fmt.Errorf("crd %s: %w (%d)", name, errInstancesRemain, len(l.Items))
}
