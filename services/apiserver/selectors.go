// This file holds label and field selectors: parsed in Kubernetes' syntax,
// matched against objects, keyed so watchers with the same selection can
// share work, and the name a metadata.name selector authorizes.

package apiserver

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/proto/apierrors"
	certificatesv1 "github.com/kplane/kplane/proto/kplane/certificates/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// fieldSet is the set of fields a field selector may name for an object, as
// Kubernetes exposes them per kind.
func fieldSet(obj proto.Message) fields.Set {
	m := meta(obj)
	set := fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()}
	switch o := obj.(type) {
	case *corev1.Pod:
		set["spec.nodeName"] = o.GetSpec().GetNodeName()
		set["spec.restartPolicy"] = o.GetSpec().GetRestartPolicy()
		set["spec.schedulerName"] = o.GetSpec().GetSchedulerName()
		set["spec.serviceAccountName"] = o.GetSpec().GetServiceAccountName()
		set["spec.hostNetwork"] = strconv.FormatBool(o.GetSpec().GetHostNetwork())
		set["status.phase"] = o.GetStatus().GetPhase()
		set["status.podIP"] = o.GetStatus().GetPodIp()
		set["status.nominatedNodeName"] = o.GetStatus().GetNominatedNodeName()
	case *corev1.Event:
		io := o.GetInvolvedObject()
		set["involvedObject.kind"] = io.GetKind()
		set["involvedObject.namespace"] = io.GetNamespace()
		set["involvedObject.name"] = io.GetName()
		set["involvedObject.uid"] = io.GetUid()
		set["involvedObject.apiVersion"] = io.GetApiVersion()
		set["involvedObject.resourceVersion"] = io.GetResourceVersion()
		set["involvedObject.fieldPath"] = io.GetFieldPath()
		set["reason"] = o.GetReason()
		set["reportingComponent"] = o.GetReportingController()
		// As Kubernetes: an Event without a source (written through
		// events.k8s.io/v1) is selected by its reporting controller.
		set["source"] = o.GetSource().GetComponent()
		if set["source"] == "" {
			set["source"] = o.GetReportingController()
		}
		set["type"] = o.GetType()
	case *certificatesv1.CertificateSigningRequest:
		set["spec.signerName"] = o.GetSpec().GetSignerName()
	case *corev1.Node:
		set["spec.unschedulable"] = strconv.FormatBool(o.GetSpec().GetUnschedulable())
	case *corev1.Namespace:
		set["status.phase"] = o.GetStatus().GetPhase()
	case *corev1.Secret:
		set["type"] = o.GetType()
	case *dynamicv1.Object:
		for k, v := range o.GetSelectableFields() {
			set[k] = v
		}
	}
	return set
}

// selector is a parsed label and field selector plus a namespace.
type selector struct {
	namespace string
	labels    labels.Selector
	fields    fields.Selector
}

// parseSelector parses Kubernetes' selector syntax (labels: =, ==, !=, in,
// notin, exists, !exists; fields: =, ==, != on the fields fieldSet exposes)
// for objects like sample.
func parseSelector(r *resourceInfo, ns, labelSel, fieldSel string) (*selector, error) {
	return parseSelectorFor(r, ns, labelSel, fieldSel, nil)
}

// parseSelectorFor is parseSelector with a custom resource's fields those
// of selectable (nil: its storage version's selectableFields).
func parseSelectorFor(r *resourceInfo, ns, labelSel, fieldSel string, selectable []string) (*selector, error) {
	s := &selector{namespace: ns, labels: labels.Everything(), fields: fields.Everything()}
	if labelSel != "" {
		ls, err := labels.Parse(labelSel)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("unable to parse requirement: %v", err))
		}
		s.labels = ls
	}
	if fieldSel != "" {
		fs, err := fields.ParseSelector(fieldSel)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid field selector: %v", err))
		}
		if r.fieldLabel != nil {
			// A view's labels name its own fields: turned into the stored
			// resource's, as Kubernetes' field label conversion does.
			fs, err = fs.Transform(func(label, value string) (string, string, error) {
				l, ok := r.fieldLabel(label)
				if !ok {
					return "", "", fmt.Errorf("field label not supported: %s", label)
				}
				return l, value, nil
			})
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
		}
		known := fieldSet(r.New())
		if r.custom != nil {
			// A custom resource: its CRD's selectableFields, and
			// metadata.namespace only when it is namespaced.
			if sch := r.custom.schema.Load(); sch != nil && selectable == nil {
				selectable = sch.selectable
			}
			for _, f := range selectable {
				known[f] = ""
			}
			if !r.Namespaced {
				delete(known, "metadata.namespace")
			}
		}
		for _, req := range fs.Requirements() {
			if _, ok := known[req.Field]; !ok {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
			}
		}
		s.fields = fs
	}
	return s, nil
}

// empty reports whether the selector selects everything in its namespace.
func (s *selector) empty() bool { return s.labels.Empty() && s.fields.Empty() }

// key is the same string for selectors that select the same objects as
// written (labels and fields in canonical order), so that watchers with
// equal selectors share one match per event.
func (s *selector) key() string {
	return s.namespace + "\x00" + s.labels.String() + "\x00" + s.fields.String()
}

// matchesMeta reports whether an object with metadata m passes the
// selector's namespace and labels (its field selector is not applied).
func (s *selector) matchesMeta(m *metav1.ObjectMeta) bool {
	if s.namespace != "" && m.GetNamespace() != s.namespace {
		return false
	}
	return s.labels.Empty() || s.labels.Matches(labels.Set(m.GetLabels()))
}

// matches reports whether obj is selected.
func (s *selector) matches(obj proto.Message) bool { return s.matchesWith(obj, nil) }

// matchesWith is matches with obj's field set taken from memo (nil: built
// here), for callers that match one object against many selectors.
func (s *selector) matchesWith(obj proto.Message, memo *objectFields) bool {
	if !s.matchesMeta(meta(obj)) {
		return false
	}
	if s.fields.Empty() {
		return true
	}
	if memo == nil {
		return s.fields.Matches(fieldSet(obj))
	}
	return s.fields.Matches(memo.get(obj))
}

// objectFields is an object's fieldSet, built on first use and kept. A watch
// event is matched against every distinct selector watching the resource —
// with one node agent per node, one spec.nodeName selector per node — and
// building the set once per event instead of once per selector is what
// Kubernetes' watch cache does too (its events carry ObjFields and
// PrevObjFields). Not safe for concurrent use: the cacher's mu guards it.
type objectFields struct {
	set fields.Set
}

func (f *objectFields) get(obj proto.Message) fields.Set {
	if f.set == nil {
		f.set = fieldSet(obj)
	}
	return f.set
}

// selectorName is the name a list or watch is authorized and audited with:
// as kube-apiserver's request info, the one name a field selector requires
// with metadata.name=NAME (so a role limited by resourceNames may list or
// watch that one object), else "".
func selectorName(fieldSelector string) string {
	sel, err := fields.ParseSelector(fieldSelector)
	if err != nil {
		return ""
	}
	name, ok := sel.RequiresExactMatch("metadata.name")
	if !ok || len(path.IsValidPathSegmentName(name)) != 0 {
		return ""
	}
	return name
}
