// Package authz decides whether an authenticated user may do what a request
// asks: RBAC from rbac/v1 roles and bindings held in memory, the Node
// authorizer for node agents, a union of the two, the NodeRestriction
// admission plugin, and Kubernetes' bootstrap roles.
package authz

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/request"
)

// RBAC authorizes requests from Role, ClusterRole, RoleBinding and
// ClusterRoleBinding objects kept in memory. The apiserver feeds it from its
// own watches of the four rbac resources: Upsert on ADDED and MODIFIED,
// Delete on DELETED, Replace after a (re-)list. Members of system:masters
// may do anything, whatever the bindings say.
//
// It is safe for concurrent use. Authorize never blocks on I/O: an object
// not yet seen simply grants nothing.
type RBAC struct {
	log          *slog.Logger
	mu           sync.RWMutex
	roles        map[string]*rbacv1.Role // namespace/name
	clusterRoles map[string]*rbacv1.ClusterRole
	// aggregated holds, for each ClusterRole with an aggregationRule, its own
	// rules plus those of every ClusterRole its selectors match; rebuilt on
	// every ClusterRole change.
	aggregated          map[string][]rbacv1.PolicyRule
	roleBindings        map[string]map[string]*rbacv1.RoleBinding // namespace → name → binding
	clusterRoleBindings map[string]*rbacv1.ClusterRoleBinding
}

// NewRBAC returns an RBAC authorizer that grants nothing until fed objects.
// A nil logger discards.
func NewRBAC(log *slog.Logger) *RBAC {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RBAC{
		log:                 log.With("component", "authz.rbac"),
		roles:               map[string]*rbacv1.Role{},
		clusterRoles:        map[string]*rbacv1.ClusterRole{},
		roleBindings:        map[string]map[string]*rbacv1.RoleBinding{},
		clusterRoleBindings: map[string]*rbacv1.ClusterRoleBinding{},
	}
}

// Upsert adds or replaces one rbac object. obj is kplane's proto message
// (kplane.rbac.v1.Role, ClusterRole, RoleBinding or ClusterRoleBinding) or the
// matching k8s.io/api/rbac/v1 type (pointer). Other types are logged and
// ignored (see Put for the error). It implements apiserver.ObjectSink.
func (r *RBAC) Upsert(obj any) {
	if err := r.Put(obj); err != nil {
		r.log.Error("rbac cache: ignoring object", "err", err)
	}
}

// Delete removes one rbac object (of the types Upsert takes), by namespace
// and name. Other types are logged and ignored. It implements
// apiserver.ObjectSink.
func (r *RBAC) Delete(obj any) {
	if err := r.Remove(obj); err != nil {
		r.log.Error("rbac cache: ignoring object", "err", err)
	}
}

// Put is Upsert returning the error for an object of the wrong type.
func (r *RBAC) Put(obj any) error {
	k, err := ToK8s(obj)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.put(k)
	return nil
}

// Remove is Delete returning the error for an object of the wrong type.
func (r *RBAC) Remove(obj any) error {
	k, err := ToK8s(obj)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch o := k.(type) {
	case *rbacv1.Role:
		delete(r.roles, o.Namespace+"/"+o.Name)
	case *rbacv1.ClusterRole:
		delete(r.clusterRoles, o.Name)
		r.aggregate()
	case *rbacv1.RoleBinding:
		delete(r.roleBindings[o.Namespace], o.Name)
		if len(r.roleBindings[o.Namespace]) == 0 {
			delete(r.roleBindings, o.Namespace)
		}
	case *rbacv1.ClusterRoleBinding:
		delete(r.clusterRoleBindings, o.Name)
	}
	return nil
}

// Replace swaps in a complete set of objects of the given kind ("Role",
// "ClusterRole", "RoleBinding" or "ClusterRoleBinding"), as after a list: every
// object of that kind not in objs is forgotten. Objects of another kind are an
// error and nothing changes.
func (r *RBAC) Replace(kind string, objs []any) error {
	ks := make([]any, 0, len(objs))
	for _, o := range objs {
		k, err := ToK8s(o)
		if err != nil {
			return err
		}
		if got := kindOf(k); got != kind {
			return fmt.Errorf("authz: replace %s: got a %s", kind, got)
		}
		ks = append(ks, k)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch kind {
	case "Role":
		r.roles = map[string]*rbacv1.Role{}
	case "ClusterRole":
		r.clusterRoles = map[string]*rbacv1.ClusterRole{}
	case "RoleBinding":
		r.roleBindings = map[string]map[string]*rbacv1.RoleBinding{}
	case "ClusterRoleBinding":
		r.clusterRoleBindings = map[string]*rbacv1.ClusterRoleBinding{}
	default:
		return fmt.Errorf("authz: replace: unknown kind %q", kind)
	}
	for _, k := range ks {
		r.put(k)
	}
	r.aggregate()
	return nil
}

func (r *RBAC) put(k any) {
	switch o := k.(type) {
	case *rbacv1.Role:
		r.roles[o.Namespace+"/"+o.Name] = o
	case *rbacv1.ClusterRole:
		r.clusterRoles[o.Name] = o
		r.aggregate()
	case *rbacv1.RoleBinding:
		if r.roleBindings[o.Namespace] == nil {
			r.roleBindings[o.Namespace] = map[string]*rbacv1.RoleBinding{}
		}
		r.roleBindings[o.Namespace][o.Name] = o
	case *rbacv1.ClusterRoleBinding:
		r.clusterRoleBindings[o.Name] = o
	}
}

// clusterRoleRules is cr's effective rules (aggregated ones included).
func (r *RBAC) clusterRoleRules(cr *rbacv1.ClusterRole) []rbacv1.PolicyRule {
	if agg, ok := r.aggregated[cr.Name]; ok {
		return agg
	}
	return cr.Rules
}

// aggregate rebuilds r.aggregated, as Kubernetes' clusterrole-aggregation
// controller would fill the rules in (see AggregatedRules). Callers hold r.mu.
func (r *RBAC) aggregate() {
	r.aggregated = map[string][]rbacv1.PolicyRule{}
	for name, cr := range r.clusterRoles {
		if !HasAggregationRule(cr) {
			continue
		}
		rules, err := AggregatedRules(cr, maps.Values(r.clusterRoles))
		if err != nil {
			r.log.Error("invalid aggregation selector; ignored", "clusterrole", name, "err", err)
		}
		r.aggregated[name] = rules
	}
}

// HasAggregationRule reports whether cr gathers its rules from other
// ClusterRoles (an aggregationRule with at least one selector).
func HasAggregationRule(cr *rbacv1.ClusterRole) bool {
	return cr.AggregationRule != nil && len(cr.AggregationRule.ClusterRoleSelectors) > 0
}

// AggregatedRules is cr's own rules followed by the rules of every other
// ClusterRole in all whose labels match one of cr's aggregation selectors.
// A selector that does not parse is skipped; the first such error is
// returned with the rules the others gathered.
func AggregatedRules(cr *rbacv1.ClusterRole, all iter.Seq[*rbacv1.ClusterRole]) ([]rbacv1.PolicyRule, error) {
	var sels []labels.Selector
	var firstErr error
	if cr.AggregationRule != nil {
		for i := range cr.AggregationRule.ClusterRoleSelectors {
			sel, err := metav1.LabelSelectorAsSelector(&cr.AggregationRule.ClusterRoleSelectors[i])
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("authz: clusterrole %s: aggregation selector: %w", cr.Name, err)
				}
				continue
			}
			sels = append(sels, sel)
		}
	}
	rules := append([]rbacv1.PolicyRule(nil), cr.Rules...)
	for other := range all {
		if other.Name == cr.Name {
			continue
		}
		for _, sel := range sels {
			if sel.Matches(labels.Set(other.Labels)) {
				rules = append(rules, other.Rules...)
				break
			}
		}
	}
	return rules, firstErr
}

func kindOf(k any) string {
	switch k.(type) {
	case *rbacv1.Role:
		return "Role"
	case *rbacv1.ClusterRole:
		return "ClusterRole"
	case *rbacv1.RoleBinding:
		return "RoleBinding"
	case *rbacv1.ClusterRoleBinding:
		return "ClusterRoleBinding"
	}
	return fmt.Sprintf("%T", k)
}

// ToK8s turns obj into the k8s.io/api/rbac/v1 type of the same kind. kplane's
// proto messages carry Kubernetes' JSON names, so their Kubernetes JSON (kubejson) decodes
// straight into the Kubernetes types; this keeps authz independent of the
// generated Go types.
func ToK8s(obj any) (any, error) {
	switch o := obj.(type) {
	case *rbacv1.Role, *rbacv1.ClusterRole, *rbacv1.RoleBinding, *rbacv1.ClusterRoleBinding:
		return o, nil
	case proto.Message:
		var into any
		switch name := string(o.ProtoReflect().Descriptor().Name()); name {
		case "Role":
			into = &rbacv1.Role{}
		case "ClusterRole":
			into = &rbacv1.ClusterRole{}
		case "RoleBinding":
			into = &rbacv1.RoleBinding{}
		case "ClusterRoleBinding":
			into = &rbacv1.ClusterRoleBinding{}
		default:
			return nil, fmt.Errorf("authz: %s is not an rbac object", o.ProtoReflect().Descriptor().FullName())
		}
		b, err := kubejson.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("authz: encode %s: %w", o.ProtoReflect().Descriptor().FullName(), err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			return nil, fmt.Errorf("authz: decode %s: %w", o.ProtoReflect().Descriptor().FullName(), err)
		}
		return into, nil
	}
	return nil, fmt.Errorf("authz: %T is not an rbac object", obj)
}

// Authorize allows the request if a binding that names the user (or one of
// its groups, or its service account) grants a rule that covers it. A denial
// has an empty reason, as Kubernetes' RBAC gives none.
func (r *RBAC) Authorize(_ context.Context, a request.Attributes) (request.Decision, error) {
	if slices.Contains(a.User.Groups, request.MastersGroup) {
		return request.Decision{Allowed: true, Reason: "member of " + request.MastersGroup}, nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, b := range r.clusterRoleBindings {
		if b.RoleRef.Kind != "ClusterRole" || !anySubjectMatches(b.Subjects, a.User, "") {
			continue
		}
		if cr := r.clusterRoles[b.RoleRef.Name]; cr != nil && rulesAllow(r.clusterRoleRules(cr), a) {
			return request.Decision{Allowed: true, Reason: fmt.Sprintf("RBAC: allowed by ClusterRoleBinding %q of ClusterRole %q", b.Name, cr.Name)}, nil
		}
	}
	if a.Namespace == "" {
		return request.Decision{}, nil
	}
	for _, b := range r.roleBindings[a.Namespace] {
		if !anySubjectMatches(b.Subjects, a.User, b.Namespace) {
			continue
		}
		var rules []rbacv1.PolicyRule
		switch b.RoleRef.Kind {
		case "Role":
			if role := r.roles[b.Namespace+"/"+b.RoleRef.Name]; role != nil {
				rules = role.Rules
			}
		case "ClusterRole":
			if cr := r.clusterRoles[b.RoleRef.Name]; cr != nil {
				rules = r.clusterRoleRules(cr)
			}
		}
		if rulesAllow(rules, a) {
			return request.Decision{Allowed: true, Reason: fmt.Sprintf("RBAC: allowed by RoleBinding %q of %s %q to %s", b.Name, b.RoleRef.Kind, b.RoleRef.Name, a.User.Name)}, nil
		}
	}
	return request.Decision{}, nil
}

// serviceAccountPrefix prefixes a service account's user name:
// system:serviceaccount:<namespace>:<name>.
const serviceAccountPrefix = "system:serviceaccount:"

func anySubjectMatches(subjects []rbacv1.Subject, u request.User, bindingNamespace string) bool {
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			if s.Name == u.Name {
				return true
			}
		case rbacv1.GroupKind:
			if slices.Contains(u.Groups, s.Name) {
				return true
			}
		case rbacv1.ServiceAccountKind:
			ns := s.Namespace
			if ns == "" {
				ns = bindingNamespace
			}
			if ns != "" && u.Name == serviceAccountPrefix+ns+":"+s.Name {
				return true
			}
		}
	}
	return false
}

// rulesAllow reports whether any rule covers the resource request a.
func rulesAllow(rules []rbacv1.PolicyRule, a request.Attributes) bool {
	for i := range rules {
		if ruleAllows(&rules[i], a) {
			return true
		}
	}
	return false
}

// ruleAllows implements Kubernetes' rule matching for resource requests:
// verbs, apiGroups and resources with "*"; a subresource is requested as
// "pods/status" and matched by "pods/status", "*/status" or "*"; resourceNames,
// when set, restrict the rule to those names (so they never cover a request
// without a name, such as list or create).
func ruleAllows(r *rbacv1.PolicyRule, a request.Attributes) bool {
	if a.Resource == "" && a.Path != "" {
		return matchesAny(r.Verbs, a.Verb) && nonResourceURLMatches(r.NonResourceURLs, a.Path)
	}
	if !matchesAny(r.Verbs, a.Verb) || !matchesAny(r.APIGroups, a.APIGroup) {
		return false
	}
	combined := a.Resource
	if a.Subresource != "" {
		combined += "/" + a.Subresource
	}
	resourceOK := false
	for _, res := range r.Resources {
		if res == rbacv1.ResourceAll || res == combined ||
			(a.Subresource != "" && res == "*/"+a.Subresource) {
			resourceOK = true
			break
		}
	}
	if !resourceOK {
		return false
	}
	return len(r.ResourceNames) == 0 || (a.Name != "" && slices.Contains(r.ResourceNames, a.Name))
}

// nonResourceURLMatches implements Kubernetes' nonResourceURLs: "*", the
// exact path, or a prefix ending in "*" ("/apis/*" covers "/apis/apps").
func nonResourceURLMatches(urls []string, path string) bool {
	for _, u := range urls {
		if u == "*" || u == path {
			return true
		}
		if prefix, ok := strings.CutSuffix(u, "*"); ok && strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

func matchesAny(list []string, v string) bool {
	for _, x := range list {
		if x == "*" || x == v {
			return true
		}
	}
	return false
}

// ForbiddenMessage is Kubernetes' wording for a denied resource request, e.g.
// `User "bob" cannot list resource "pods" in API group "" in the namespace "default"`
// or `... at the cluster scope`, followed by ": <reason>" when there is one.
func ForbiddenMessage(a request.Attributes, reason string) string {
	res := a.Resource
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	var msg string
	if a.Namespace != "" {
		msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", a.User.Name, a.Verb, res, a.APIGroup, a.Namespace)
	} else {
		msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", a.User.Name, a.Verb, res, a.APIGroup)
	}
	if reason = strings.TrimSpace(reason); reason != "" {
		msg += ": " + reason
	}
	return msg
}
