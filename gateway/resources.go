// This file derives the REST resources from the API service's gRPC services
// and their HTTP rules: each resource's paths, verbs, scope, short names and
// categories, in one table by group, version and name.

package gateway

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// The services the gateway serves register their descriptors here.
	_ "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	_ "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	_ "github.com/kplane/kplane/proto/kplane/apps/v1"
	_ "github.com/kplane/kplane/proto/kplane/authentication/v1"
	_ "github.com/kplane/kplane/proto/kplane/authorization/v1"
	_ "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	_ "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	_ "github.com/kplane/kplane/proto/kplane/batch/v1"
	_ "github.com/kplane/kplane/proto/kplane/certificates/v1"
	_ "github.com/kplane/kplane/proto/kplane/coordination/v1"
	_ "github.com/kplane/kplane/proto/kplane/core/v1"
	_ "github.com/kplane/kplane/proto/kplane/discovery/v1"
	_ "github.com/kplane/kplane/proto/kplane/events/v1"
	_ "github.com/kplane/kplane/proto/kplane/flowcontrol/v1"
	_ "github.com/kplane/kplane/proto/kplane/metrics/v1beta1"
	_ "github.com/kplane/kplane/proto/kplane/networking/v1"
	_ "github.com/kplane/kplane/proto/kplane/node/v1"
	_ "github.com/kplane/kplane/proto/kplane/policy/v1"
	_ "github.com/kplane/kplane/proto/kplane/rbac/v1"
	_ "github.com/kplane/kplane/proto/kplane/scheduling/v1"
	_ "github.com/kplane/kplane/proto/kplane/storage/v1"
)

// resource is one REST resource, derived from a gRPC service's methods and
// their google.api.http annotations.
type resource struct {
	Group, Version, Resource, Kind string
	Namespaced                     bool
	// Methods by verb: get, list, watch, create, update, delete,
	// updateStatus, getScale, updateScale; absent verbs are nil.
	Methods map[string]protoreflect.MethodDescriptor
	Object  protoreflect.MessageType
	// List is the list message's full name.
	List protoreflect.FullName
	// Columns are the Table columns kube-apiserver prints it with.
	Columns []columnDefinition
}

// GroupVersion is "v1" or "apps/v1".
func (r *resource) GroupVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// table holds every resource, by group/version and plural name, and by
// the full names of its object and list messages.
type table struct {
	byGV     map[string]map[string]*resource // "apps/v1" -> "deployments"
	byObject map[protoreflect.FullName]*resource
	byList   map[protoreflect.FullName]*resource
	order    []*resource
	// scale is the scale subresource's Scale, for its Tables.
	scale *resource
}

func (t *table) lookup(group, version, res string) *resource {
	gv := version
	if group != "" {
		gv = group + "/" + version
	}
	return t.byGV[gv][res]
}

// groupVersions returns the served group versions, core first.
func (t *table) groupVersions() []string {
	var out []string
	for gv := range t.byGV {
		out = append(out, gv)
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i] == "v1") != (out[j] == "v1") {
			return out[i] == "v1"
		}
		return out[i] < out[j]
	})
	return out
}

func (t *table) resources(gv string) []*resource {
	var out []*resource
	for _, r := range t.byGV[gv] {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out
}

// buildResourceTable reads every kplane.*.v1 service in the global registry.
func buildResourceTable() (*table, error) {
	t := &table{byGV: map[string]map[string]*resource{},
		byObject: map[protoreflect.FullName]*resource{}, byList: map[protoreflect.FullName]*resource{}}
	var err error
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "kplane.") {
			return true
		}
		svcs := fd.Services()
		for i := 0; i < svcs.Len(); i++ {
			r, e := resourceOf(svcs.Get(i))
			if e != nil {
				err = e
				return false
			}
			rs := []*resource{r}
			if r == nil {
				if rs, e = createOnlyResources(svcs.Get(i)); e != nil {
					err = e
					return false
				}
			}
			for _, r := range rs {
				t.add(r)
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if len(t.order) == 0 {
		return nil, fmt.Errorf("gateway: no kplane services registered")
	}
	cols, err := tableColumns()
	if err != nil {
		return nil, err
	}
	for _, r := range t.order {
		// The recorded columns are kube-apiserver's, by plural; the
		// metrics.k8s.io pods and nodes (metrics-server's on Kubernetes,
		// not recorded) get the default ones.
		if r.Columns = cols[r.Resource]; len(r.Columns) == 0 || r.Group == metricsGroup {
			r.Columns = defaultColumns(cols)
		}
	}
	t.scale = &resource{Group: "autoscaling", Version: "v1", Resource: "scale", Kind: "Scale", Columns: cols["scale"]}
	return t, nil
}

func (t *table) add(r *resource) {
	gv := r.GroupVersion()
	if t.byGV[gv] == nil {
		t.byGV[gv] = map[string]*resource{}
	}
	t.byGV[gv][r.Resource] = r
	t.byObject[r.Object.Descriptor().FullName()] = r
	if r.List != "" {
		t.byList[r.List] = r
	}
	t.order = append(t.order, r)
}

// createOnlyResources derives the resources of a service whose methods only
// create — authorization.k8s.io's reviews, which are answered, never
// stored: one resource per POST on a collection path (cluster-scoped, or
// namespaced as LocalSubjectAccessReview's), its object the message the
// rule's body names.
func createOnlyResources(sd protoreflect.ServiceDescriptor) ([]*resource, error) {
	var out []*resource
	ms := sd.Methods()
	for i := 0; i < ms.Len(); i++ {
		m := ms.Get(i)
		rule, _ := proto.GetExtension(m.Options(), annotations.E_Http).(*annotations.HttpRule)
		post, ok := rule.GetPattern().(*annotations.HttpRule_Post)
		if !ok || rule.GetBody() == "" || rule.GetBody() == "*" || strings.Contains(strings.Replace(post.Post, "/namespaces/{namespace}/", "/", 1), "{") {
			continue
		}
		body := m.Input().Fields().ByName(protoreflect.Name(rule.GetBody()))
		if body == nil || body.Message() == nil {
			return nil, fmt.Errorf("gateway: %s: body %q is not a message field", m.FullName(), rule.GetBody())
		}
		mt, err := protoregistry.GlobalTypes.FindMessageByName(body.Message().FullName())
		if err != nil {
			return nil, fmt.Errorf("gateway: %s: %w", m.FullName(), err)
		}
		r := &resource{Methods: map[string]protoreflect.MethodDescriptor{"create": m}, Object: mt, Kind: string(body.Message().Name())}
		if err := r.parseItemPath(post.Post + "/{name}"); err != nil {
			return nil, fmt.Errorf("gateway: %s: %w", m.FullName(), err)
		}
		out = append(out, r)
	}
	return out, nil
}

// resourceOf derives a resource from a service whose methods carry HTTP
// rules on Kubernetes' paths; nil if the service has no item GET.
func resourceOf(sd protoreflect.ServiceDescriptor) (*resource, error) {
	r := &resource{Methods: map[string]protoreflect.MethodDescriptor{}}
	ms := sd.Methods()
	for i := 0; i < ms.Len(); i++ {
		m := ms.Get(i)
		rule, _ := proto.GetExtension(m.Options(), annotations.E_Http).(*annotations.HttpRule)
		if rule == nil {
			continue
		}
		var verb, path string
		switch p := rule.Pattern.(type) {
		case *annotations.HttpRule_Get:
			path = p.Get
			switch {
			case strings.Contains(path, "/watch/"):
				verb = "watch"
			case strings.HasSuffix(path, "{name}/scale"):
				verb = "getScale"
			case strings.HasSuffix(path, "{name}/log"):
				verb = "" // pods/log: served by podlog.go
			case strings.HasSuffix(path, "{name}"):
				verb = "get"
			default:
				verb = "list"
			}
		case *annotations.HttpRule_Post:
			path = p.Post
			switch {
			case strings.HasSuffix(path, "/binding"):
				verb = "bind"
			case strings.HasSuffix(path, "/eviction"):
				verb = "evict"
			case strings.HasSuffix(path, "}"):
				verb = ""
			default:
				verb = "create"
			}
		case *annotations.HttpRule_Put:
			path = p.Put
			switch {
			case strings.HasSuffix(path, "/status"):
				verb = "updateStatus"
			case strings.HasSuffix(path, "/scale"):
				verb = "updateScale"
			case strings.HasSuffix(path, "/approval"):
				verb = "updateApproval"
			case strings.HasSuffix(path, "/ephemeralcontainers"):
				verb = "updateEphemeralContainers"
			default:
				verb = "update"
			}
		case *annotations.HttpRule_Delete:
			path = p.Delete
			verb = "delete"
		}
		if verb == "" {
			continue
		}
		r.Methods[verb] = m
		if out := m.Output().Fields(); verb == "list" && out.Len() == 1 && out.Get(0).Message() != nil {
			r.List = out.Get(0).Message().FullName()
		}
		if verb == "get" {
			if err := r.parseItemPath(path); err != nil {
				return nil, fmt.Errorf("gateway: %s: %w", m.FullName(), err)
			}
			out := m.Output().Fields()
			if out.Len() != 1 || out.Get(0).Message() == nil {
				return nil, fmt.Errorf("gateway: %s: response is not one object", m.FullName())
			}
			mt, err := protoregistry.GlobalTypes.FindMessageByName(out.Get(0).Message().FullName())
			if err != nil {
				return nil, fmt.Errorf("gateway: %s: %w", m.FullName(), err)
			}
			r.Object = mt
			r.Kind = string(out.Get(0).Message().Name())
		}
	}
	if r.Methods["get"] == nil {
		return nil, nil
	}
	return r, nil
}

// parseItemPath reads /api/v1/namespaces/{namespace}/pods/{name} or
// /apis/apps/v1/deployments/{name}.
func (r *resource) parseItemPath(path string) error {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		r.Version, parts = parts[1], parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		r.Group, r.Version, parts = parts[1], parts[2], parts[3:]
	default:
		return fmt.Errorf("unexpected path %q", path)
	}
	if len(parts) == 4 && parts[0] == "namespaces" && parts[1] == "{namespace}" {
		r.Namespaced, parts = true, parts[2:]
	}
	if len(parts) != 2 || parts[1] != "{name}" {
		return fmt.Errorf("unexpected path %q", path)
	}
	r.Resource = parts[0]
	return nil
}

// metricsGroup is the resource metrics API's group.
const metricsGroup = "metrics.k8s.io"

// Discovery extras Kubernetes gives the built-in resources.
var shortNames = map[string][]string{
	"pods": {"po"}, "deployments": {"deploy"}, "replicasets": {"rs"}, "namespaces": {"ns"},
	"nodes": {"no"}, "events": {"ev"}, "services": {"svc"}, "endpoints": {"ep"},
	"configmaps": {"cm"}, "serviceaccounts": {"sa"}, "poddisruptionbudgets": {"pdb"}, "daemonsets": {"ds"}, "statefulsets": {"sts"},
	"cronjobs":                   {"cj"},
	"replicationcontrollers":     {"rc"},
	"ingresses":                  {"ing"},
	"networkpolicies":            {"netpol"},
	"customresourcedefinitions":  {"crd", "crds"},
	"resourcequotas":             {"quota"},
	"limitranges":                {"limits"},
	"certificatesigningrequests": {"csr"},
	"priorityclasses":            {"pc"},
	"persistentvolumeclaims":     {"pvc"}, "persistentvolumes": {"pv"}, "storageclasses": {"sc"},
	"horizontalpodautoscalers": {"hpa"},
}

// categories are the built-in resources' discovery categories: `kubectl
// get all` lists the resources in "all".
var categories = map[string][]string{
	"pods": {"all"}, "services": {"all"}, "deployments": {"all"}, "replicasets": {"all"}, "replicationcontrollers": {"all"},
	"daemonsets": {"all"}, "statefulsets": {"all"}, "jobs": {"all"}, "cronjobs": {"all"},
	"horizontalpodautoscalers":  {"all"},
	"customresourcedefinitions": {"api-extensions"}, "mutatingwebhookconfigurations": {"api-extensions"},
	"validatingwebhookconfigurations": {"api-extensions"},
}

// shortNames are r's discovery short names: the built-in resource's of its
// plural, none for metrics.k8s.io's pods and nodes (as metrics-server
// gives them none).
func (r *resource) shortNames() []string {
	if r.Group == metricsGroup {
		return nil
	}
	return shortNames[r.Resource]
}

// categories are r's discovery categories, as shortNames.
func (r *resource) categories() []string {
	if r.Group == metricsGroup {
		return nil
	}
	return categories[r.Resource]
}

// verbs lists the Kubernetes verbs r supports.
func (r *resource) verbs() []string {
	var v []string
	if r.Methods["create"] != nil {
		v = append(v, "create")
	}
	if r.Methods["delete"] != nil {
		v = append(v, "delete")
		if r.Methods["list"] != nil {
			v = append(v, "deletecollection") // collection.go
		}
	}
	if r.Methods["get"] != nil {
		v = append(v, "get")
	}
	if r.Methods["list"] != nil {
		v = append(v, "list")
	}
	if r.Methods["update"] != nil {
		v = append(v, "patch", "update")
	}
	if r.Methods["watch"] != nil {
		v = append(v, "watch")
	}
	return v
}
