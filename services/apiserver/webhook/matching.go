// This file holds which webhooks a request goes to: the rules (groups,
// versions, resources, operations, scope), the namespace and object
// selectors, and the labels they are matched against.

package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"

	arv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// matches applies the webhook's rules, namespaceSelector and objectSelector.
func (w *Webhooks) matches(ctx context.Context, h *hook, a *request.Admission) (bool, error) {
	if !slices.ContainsFunc(h.rules, func(r arv1.RuleWithOperations) bool { return ruleMatches(r, a) }) {
		return false, nil
	}
	if ok, err := w.namespaceMatches(ctx, h, a); err != nil || !ok {
		return false, err
	}
	return objectMatches(h, a)
}

// ruleMatches is Kubernetes' rule matching: operations, apiGroups,
// apiVersions with "*"; resources "pods", "pods/status", "*", "*/status",
// "pods/*", "*/*" (a plain "pods" or "*" does not match subresources); scope.
func ruleMatches(r arv1.RuleWithOperations, a *request.Admission) bool {
	if !slices.ContainsFunc(r.Operations, func(op arv1.OperationType) bool {
		return op == arv1.OperationAll || string(op) == string(a.Operation)
	}) {
		return false
	}
	if !matchStar(r.APIGroups, a.APIGroup) || !matchStar(r.APIVersions, a.APIVersion) {
		return false
	}
	resOK := false
	for _, res := range r.Resources {
		rr, sub, _ := strings.Cut(res, "/")
		if (rr == "*" || rr == a.Resource) && (sub == "*" || sub == a.Subresource) {
			resOK = true
			break
		}
	}
	if !resOK {
		return false
	}
	scope := arv1.AllScopes
	if r.Scope != nil && *r.Scope != "" {
		scope = *r.Scope
	}
	switch scope {
	case arv1.ClusterScope:
		return a.Namespace == ""
	case arv1.NamespacedScope:
		return a.Namespace != ""
	}
	return true
}

func matchStar(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}

// namespaceMatches: cluster-scoped objects always match, except Namespaces,
// which are matched by their own labels; others by their namespace's labels.
func (w *Webhooks) namespaceMatches(ctx context.Context, h *hook, a *request.Admission) (bool, error) {
	sel, err := metav1.LabelSelectorAsSelector(h.namespaceSelector)
	if err != nil {
		return false, apierrors.NewInternalError(fmt.Errorf("webhook %q: invalid namespaceSelector: %w", h.name, err))
	}
	if sel.Empty() {
		return true, nil
	}
	if a.APIGroup == "" && a.Resource == "namespaces" {
		return sel.Matches(labels.Set(objectLabels(a.Object))) || sel.Matches(labels.Set(objectLabels(a.OldObject))), nil
	}
	if a.Namespace == "" {
		return true, nil
	}
	var l map[string]string
	if w.cfg.NamespaceLabels != nil {
		l, err = w.cfg.NamespaceLabels(ctx, a.Namespace)
		if err != nil {
			return false, apierrors.NewInternalError(fmt.Errorf("webhook %q: labels of namespace %q: %w", h.name, a.Namespace, err))
		}
	} else {
		w.mu.RLock()
		l = w.nsLabels[a.Namespace]
		w.mu.RUnlock()
	}
	return sel.Matches(labels.Set(l)), nil
}

// objectMatches: the object's labels or, on update and delete, the old
// object's labels match the objectSelector.
func objectMatches(h *hook, a *request.Admission) (bool, error) {
	sel, err := metav1.LabelSelectorAsSelector(h.objectSelector)
	if err != nil {
		return false, apierrors.NewInternalError(fmt.Errorf("webhook %q: invalid objectSelector: %w", h.name, err))
	}
	if sel.Empty() {
		return true, nil
	}
	return sel.Matches(labels.Set(objectLabels(a.Object))) || sel.Matches(labels.Set(objectLabels(a.OldObject))), nil
}

// objectLabels reads metadata.labels from a kplane object without knowing its Go type.
func objectLabels(m proto.Message) map[string]string {
	if m == nil || !m.ProtoReflect().IsValid() {
		return nil
	}
	msg := m.ProtoReflect()
	md := msg.Descriptor().Fields().ByName("metadata")
	if md == nil || md.Message() == nil || !msg.Has(md) {
		return nil
	}
	meta := msg.Get(md).Message()
	lf := meta.Descriptor().Fields().ByName("labels")
	if lf == nil || !lf.IsMap() {
		return nil
	}
	out := map[string]string{}
	meta.Get(lf).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		out[k.String()] = v.String()
		return true
	})
	return out
}
