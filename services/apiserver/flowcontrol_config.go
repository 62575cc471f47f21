// This file holds what every API service replica keeps in place for API
// Priority and Fairness, as kube-apiserver's APF bootstrap ensurer and
// configuration controller do: the mandatory FlowSchemas and priority
// levels (exempt, catch-all) always restored to their fixed specs, the
// suggested ones created when missing and kept current while their
// apf.kubernetes.io/autoupdate-spec annotation says so, bootstrap objects
// no longer wanted removed, and each FlowSchema's Dangling condition.
package apiserver

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	kubeflowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"

	"github.com/kplane/kplane/proto/apierrors"
	flowcontrolv1 "github.com/kplane/kplane/proto/kplane/flowcontrol/v1"
)

const (
	// apfEnsureInterval is kube-apiserver's: the bootstrap configuration
	// is checked once a minute, and at every change of a flowcontrol object.
	apfEnsureInterval = time.Minute
	// autoUpdateAnnotation is apf.kubernetes.io/autoupdate-spec.
	autoUpdateAnnotation = kubeflowcontrolv1.AutoUpdateAnnotationKey
	danglingCondition    = string(kubeflowcontrolv1.FlowSchemaConditionDangling)
)

func bootstrapMandatoryFlowSchemas() []*kubeflowcontrolv1.FlowSchema {
	return bootstrap.MandatoryFlowSchemas
}

func bootstrapMandatoryPriorityLevels() []*kubeflowcontrolv1.PriorityLevelConfiguration {
	return bootstrap.MandatoryPriorityLevelConfigurations
}

// apfState is this replica's view of the flowcontrol objects, fed from the
// watch caches; every change wakes the configuration loop and calls
// onChange (which rebuilds the request classifier).
type apfState struct {
	mu       sync.Mutex
	fs       map[string]*flowcontrolv1.FlowSchema
	pl       map[string]*flowcontrolv1.PriorityLevelConfiguration
	changed  chan struct{}
	onChange func()
}

func newAPFState() *apfState {
	return &apfState{fs: map[string]*flowcontrolv1.FlowSchema{}, pl: map[string]*flowcontrolv1.PriorityLevelConfiguration{},
		changed: make(chan struct{}, 1)}
}

// apfSink feeds one of the two kinds into an apfState.
type apfSink struct{ st *apfState }

func (k apfSink) Upsert(obj any) { k.st.apply(obj, false) }
func (k apfSink) Delete(obj any) { k.st.apply(obj, true) }

func (st *apfState) apply(obj any, deleted bool) {
	st.mu.Lock()
	switch o := obj.(type) {
	case *flowcontrolv1.FlowSchema:
		if deleted {
			delete(st.fs, o.GetMetadata().GetName())
		} else {
			st.fs[o.GetMetadata().GetName()] = o
		}
	case *flowcontrolv1.PriorityLevelConfiguration:
		if deleted {
			delete(st.pl, o.GetMetadata().GetName())
		} else {
			st.pl[o.GetMetadata().GetName()] = o
		}
	}
	st.mu.Unlock()
	select {
	case st.changed <- struct{}{}:
	default:
	}
	if st.onChange != nil {
		st.onChange()
	}
}

// snapshot copies the maps (the objects are shared and read-only).
func (st *apfState) snapshot() (map[string]*flowcontrolv1.FlowSchema, map[string]*flowcontrolv1.PriorityLevelConfiguration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	fs := make(map[string]*flowcontrolv1.FlowSchema, len(st.fs))
	for k, v := range st.fs {
		fs[k] = v
	}
	pl := make(map[string]*flowcontrolv1.PriorityLevelConfiguration, len(st.pl))
	for k, v := range st.pl {
		pl[k] = v
	}
	return fs, pl
}

// runAPFConfig keeps the bootstrap configuration and the Dangling
// conditions in place until ctx ends: at start, at every change and once a
// minute. configured is called after the first round that succeeded.
func (s *Server) runAPFConfig(ctx context.Context, configured func()) {
	t := time.NewTicker(apfEnsureInterval)
	defer t.Stop()
	for {
		if err := s.ensureAPF(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("APF bootstrap configuration not in place yet; will retry", "err", err)
			if !sleep(ctx, time.Second) {
				return
			}
			continue
		}
		if configured != nil {
			configured()
			configured = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-s.apf.changed:
		case <-t.C:
		}
	}
}

// ensureAPF is one round: suggested objects, mandatory objects, unwanted
// bootstrap objects, then the Dangling conditions.
func (s *Server) ensureAPF(ctx context.Context) error {
	fs, pl := s.apf.snapshot()
	plRes, fsRes := s.resources["prioritylevelconfigurations"], s.resources["flowschemas"]
	suggestedPL := convertPriorityLevels(bootstrap.SuggestedPriorityLevelConfigurations)
	suggestedFS := convertFlowSchemas(bootstrap.SuggestedFlowSchemas)
	mandatoryPL, mandatoryFS := mandatoryPriorityLevels(), mandatoryFlowSchemas()
	for _, want := range suggestedPL {
		if err := s.ensureAPFObject(ctx, plRes, want, pl[want.GetMetadata().GetName()], false); err != nil {
			return err
		}
	}
	for _, want := range suggestedFS {
		if err := s.ensureAPFObject(ctx, fsRes, want, fs[want.GetMetadata().GetName()], false); err != nil {
			return err
		}
	}
	for _, want := range mandatoryPL {
		if err := s.ensureAPFObject(ctx, plRes, want, pl[want.GetMetadata().GetName()], true); err != nil {
			return err
		}
	}
	for _, want := range mandatoryFS {
		if err := s.ensureAPFObject(ctx, fsRes, want, fs[want.GetMetadata().GetName()], true); err != nil {
			return err
		}
	}
	wanted := map[string]bool{}
	for _, o := range suggestedFS {
		wanted["fs/"+o.GetMetadata().GetName()] = true
	}
	for _, o := range mandatoryFS {
		wanted["fs/"+o.GetMetadata().GetName()] = true
	}
	for _, o := range suggestedPL {
		wanted["pl/"+o.GetMetadata().GetName()] = true
	}
	for _, o := range mandatoryPL {
		wanted["pl/"+o.GetMetadata().GetName()] = true
	}
	for name, o := range fs {
		if err := s.removeUnwantedAPF(ctx, fsRes, o, wanted["fs/"+name]); err != nil {
			return err
		}
	}
	for name, o := range pl {
		if err := s.removeUnwantedAPF(ctx, plRes, o, wanted["pl/"+name]); err != nil {
			return err
		}
	}
	for _, o := range fs {
		if err := s.setDangling(ctx, fsRes, o, pl); err != nil {
			return err
		}
	}
	return nil
}

// ensureAPFObject creates want when absent, or, when cur's spec is to be
// kept current (always for a mandatory object; for a suggested one while
// its annotation says true, or it has none and was never changed), puts
// want's spec back, and sets the annotation to what was decided.
func (s *Server) ensureAPFObject(ctx context.Context, r *resourceInfo, want, cur proto.Message, mandatory bool) error {
	name := meta(want).GetName()
	if cur == nil || !cur.ProtoReflect().IsValid() { // absent (a typed nil)
		err := s.writeInternal(ctx, r, want, nil)
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("creating %s %q: %w", r.Kind, name, err)
	}
	m := meta(cur)
	autoUpdate := mandatory
	value, hasValue := m.GetAnnotations()[autoUpdateAnnotation]
	parsed, perr := strconv.ParseBool(value)
	if !mandatory {
		if hasValue && perr == nil {
			autoUpdate = parsed
		} else {
			autoUpdate = m.GetGeneration() == 1
		}
	}
	annotate := !(hasValue && perr == nil && parsed == autoUpdate)
	specChanged := autoUpdate && !apfSpecEqualish(want, cur)
	if !annotate && !specChanged {
		return nil
	}
	n := proto.Clone(cur)
	if specChanged {
		copyField(n, want, "spec")
	}
	nm := meta(n)
	if nm.Annotations == nil {
		nm.Annotations = map[string]string{}
	}
	nm.Annotations[autoUpdateAnnotation] = strconv.FormatBool(autoUpdate)
	err := s.writeInternal(ctx, r, n, cur)
	if err == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // a concurrent change is looked at in the next round
	}
	return fmt.Errorf("updating %s %q: %w", r.Kind, name, err)
}

// apfSpecEqualish compares a bootstrap object's spec with the stored one;
// the exempt priority level's spec.exempt is the operator's.
func apfSpecEqualish(want, cur proto.Message) bool {
	if w, ok := want.(*flowcontrolv1.PriorityLevelConfiguration); ok && w.GetMetadata().GetName() == kubeflowcontrolv1.PriorityLevelConfigurationNameExempt {
		c := cur.(*flowcontrolv1.PriorityLevelConfiguration)
		if c.GetSpec().GetExempt() == nil {
			return false
		}
		ws := proto.Clone(w.GetSpec()).(*flowcontrolv1.PriorityLevelConfigurationSpec)
		ws.Exempt = c.GetSpec().GetExempt()
		return proto.Equal(ws, c.GetSpec())
	}
	return proto.Equal(specOf(want), specOf(cur))
}

func specOf(m proto.Message) proto.Message {
	switch o := m.(type) {
	case *flowcontrolv1.FlowSchema:
		return o.GetSpec()
	case *flowcontrolv1.PriorityLevelConfiguration:
		return o.GetSpec()
	}
	return nil
}

// removeUnwantedAPF deletes an object that is not (or no longer) part of
// the bootstrap configuration but says it is kept by it (autoupdate-spec
// true), as kube-apiserver does with objects an older version created.
func (s *Server) removeUnwantedAPF(ctx context.Context, r *resourceInfo, o proto.Message, wanted bool) error {
	if wanted {
		return nil
	}
	v, ok := meta(o).GetAnnotations()[autoUpdateAnnotation]
	if b, err := strconv.ParseBool(v); !ok || err != nil || !b {
		return nil
	}
	name := meta(o).GetName()
	rev, _ := parseRV(meta(o).GetResourceVersion())
	_, err := s.store.remove(ctx, r, "", name, rev)
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return fmt.Errorf("deleting unwanted %s %q: %w", r.Kind, name, err)
}

// setDangling writes fs's Dangling condition when it does not say whether
// its priority level exists, with kube-apiserver's reasons and messages.
func (s *Server) setDangling(ctx context.Context, r *resourceInfo, fs *flowcontrolv1.FlowSchema, pl map[string]*flowcontrolv1.PriorityLevelConfiguration) error {
	plName := fs.GetSpec().GetPriorityLevelConfiguration().GetName()
	want := &flowcontrolv1.FlowSchemaCondition{Type: danglingCondition, Status: "False", Reason: "Found",
		Message: fmt.Sprintf("This FlowSchema references the PriorityLevelConfiguration object named %q and it exists", plName)}
	if pl[plName] == nil {
		want.Status, want.Reason = "True", "NotFound"
		want.Message = fmt.Sprintf("This FlowSchema references the PriorityLevelConfiguration object named %q but there is no such object", plName)
	}
	conds := fs.GetStatus().GetConditions()
	idx := -1
	for i, c := range conds {
		if c.GetType() == danglingCondition {
			idx = i
			if c.GetStatus() == want.Status && c.GetReason() == want.Reason && c.GetMessage() == want.Message {
				return nil
			}
		}
	}
	n := proto.Clone(fs).(*flowcontrolv1.FlowSchema)
	if n.Status == nil {
		n.Status = &flowcontrolv1.FlowSchemaStatus{}
	}
	want.LastTransitionTime = now()
	if idx >= 0 {
		if conds[idx].GetStatus() == want.Status {
			want.LastTransitionTime = conds[idx].GetLastTransitionTime()
		}
		n.Status.Conditions[idx] = want
	} else {
		n.Status.Conditions = append(n.Status.Conditions, want)
	}
	rev, _ := parseRV(fs.GetMetadata().GetResourceVersion())
	_, err := s.storeUpdate(ctx, r, "", fs.GetMetadata().GetName(), rev, n, fs, nil)
	if err == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("writing the Dangling condition of FlowSchema %q: %w", fs.GetMetadata().GetName(), err)
}
