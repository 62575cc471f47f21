// This file serves custom resources on /apis/<group>/<version>/...: each
// request goes to the API service's generic ResourceService with the
// object as JSON, merge and JSON patches are applied here against the
// current object, and Tables come from the CRD's additionalPrinterColumns
// through apiextensions-apiserver's own table convertor, as kube-apiserver
// prints custom resources.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	kubemetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	watchstreamv1 "github.com/kplane/kplane/proto/kplane/watchstream/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// customVerbs are the verbs discovery lists for a custom resource, as
// kube-apiserver lists them.
var customVerbs = []string{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}

// customCallContext is the context of a call to the API service on behalf
// of r's client: the identity metadata, and in forwarding mode the
// client's own Authorization header.
func customCallContext(r *http.Request, md metadata.MD) context.Context {
	md = md.Copy()
	if auth := r.Header.Get("Authorization"); auth != "" {
		md = metadata.Join(md, metadata.Pairs("authorization", auth))
	}
	return metadata.NewOutgoingContext(r.Context(), md)
}

// customResources lists the custom resources the API service serves now.
// Discovery goes on without them when it cannot say (logged): built-in
// discovery must not fail because of them.
func (g *Gateway) customResources(r *http.Request) []*dynamicv1.ServedResource {
	resp, err := g.dyn.Discover(customCallContext(r, nil), &dynamicv1.DiscoverRequest{})
	if err != nil {
		g.log.Warn("listing the custom resources for discovery failed", "err", err)
		return nil
	}
	return resp.GetResources()
}

// lookupCustom finds the custom resource served as group/version/plural.
func lookupCustom(crs []*dynamicv1.ServedResource, group, version, plural string) *dynamicv1.ServedResource {
	for _, cr := range crs {
		if cr.GetGroup() == group && cr.GetVersion() == version && cr.GetResource() == plural {
			return cr
		}
	}
	return nil
}

// customScope is discovery's scope of a custom resource.
func customScope(cr *dynamicv1.ServedResource) string {
	if cr.GetNamespaced() {
		return "Namespaced"
	}
	return "Cluster"
}

// customTarget reads [watch/][namespaces/{ns}/]{plural}[/{name}[/{sub}]] for
// a custom resource; nil when it names none served.
func customTarget(crs []*dynamicv1.ServedResource, group, version string, parts []string) (*target, *dynamicv1.ServedResource) {
	t := &target{}
	if len(parts) > 0 && parts[0] == "watch" {
		t.watch, parts = true, parts[1:]
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		t.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || len(parts) > 3 {
		return nil, nil
	}
	cr := lookupCustom(crs, group, version, parts[0])
	if cr == nil || (t.namespace != "" && !cr.GetNamespaced()) {
		return nil, nil
	}
	t.res = &resource{Group: group, Version: version, Resource: cr.GetResource(), Kind: cr.GetKind(), Namespaced: cr.GetNamespaced()}
	if len(parts) > 1 {
		t.name = parts[1]
	}
	if len(parts) > 2 {
		t.sub = parts[2]
	}
	return t, cr
}

// customRetries and customRetryWait bound how often, and how far apart,
// a request for a custom resource no replica answered for yet asks again.
const (
	customRetries   = 4
	customRetryWait = 50 * time.Millisecond
)

// serveCustom serves one request on a custom resource's paths.
func (g *Gateway) serveCustom(w http.ResponseWriter, r *http.Request, group, version string, parts []string, info *requestInfo) {
	t, cr := customTarget(g.customResources(r), group, version, parts)
	// Another API service replica may not have registered yet a CRD this
	// client already saw in discovery: ask again (each call may reach
	// another replica) before answering 404.
	for try := 0; t == nil && try < customRetries; try++ {
		select {
		case <-r.Context().Done():
			writeError(w, notFound())
			return
		case <-time.After(customRetryWait):
		}
		t, cr = customTarget(g.customResources(r), group, version, parts)
	}
	if t == nil || (t.sub != "" && !(t.sub == "status" && cr.GetStatus()) && !(t.sub == "scale" && cr.GetScale())) {
		writeError(w, notFound())
		return
	}
	info.name = t.name
	var body []byte
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		b, err := readBody(w, r, g.bodyTimeout)
		if err != nil {
			writeError(w, err)
			return
		}
		body = b
	}
	q := r.URL.Query()
	ctx := customCallContext(r, info.md)
	tgt := &dynamicv1.Target{Group: group, Version: version, Resource: t.res.Resource, Namespace: t.namespace, Name: t.name}
	wo := &dynamicv1.WriteOptions{DryRun: q["dryRun"], FieldManager: q.Get("fieldManager"), FieldValidation: info.fieldValidation}
	var hdr metadata.MD
	var out []byte
	code := http.StatusOK
	var err error
	switch {
	case r.Method == http.MethodGet && (t.watch || isTrue(q.Get("watch"))):
		if t.sub != "" {
			writeError(w, notFound())
			return
		}
		if info.table || !cr.GetStorage() {
			// The JSON watch stream serves the storage version only;
			// another served version's objects come from the resource
			// service, with their apiVersion rewritten.
			g.serveCustomTableWatch(ctx, w, r, t, cr, info, info.table)
			return
		}
		g.serveWatchJSON(w, r, t, info)
		return
	case r.Method == http.MethodGet && t.name == "":
		var resp *dynamicv1.ListResponse
		limit, _ := strconv.ParseInt(q.Get("limit"), 10, 64)
		resp, err = g.dyn.List(ctx, &dynamicv1.ListRequest{Target: tgt, LabelSelector: q.Get("labelSelector"), FieldSelector: q.Get("fieldSelector"),
			ResourceVersion: q.Get("resourceVersion"), ResourceVersionMatch: q.Get("resourceVersionMatch"), Limit: limit, Continue: q.Get("continue")}, grpc.Header(&hdr))
		out = resp.GetList()
		if err == nil && info.table {
			out, err = customTable(cr, out, true, info.includeObject, true)
		}
	case t.sub == "scale" && t.name != "":
		out, err = g.serveCustomScale(ctx, r, tgt, body, wo)
	case r.Method == http.MethodGet:
		var resp *dynamicv1.GetResponse
		resp, err = g.dyn.Get(ctx, &dynamicv1.GetRequest{Target: tgt, ResourceVersion: q.Get("resourceVersion")}, grpc.Header(&hdr))
		out = resp.GetObject()
		if err == nil && info.table {
			out, err = customTable(cr, out, false, info.includeObject, true)
		}
	case r.Method == http.MethodPost && t.name == "" && t.sub == "":
		var resp *dynamicv1.CreateResponse
		body = g.recordCustomUpdate(ctx, cr, "", nil, body, updateManager(r))
		resp, err = g.dyn.Create(ctx, &dynamicv1.CreateRequest{Target: tgt, Object: body, Options: wo}, grpc.Header(&hdr))
		out, code = resp.GetObject(), http.StatusCreated
	case r.Method == http.MethodPut && t.name != "":
		var cur *dynamicv1.GetResponse
		if cur, err = g.dyn.Get(ctx, &dynamicv1.GetRequest{Target: tgt}); err == nil {
			body = g.recordCustomUpdate(ctx, cr, t.sub, cur.GetObject(), body, updateManager(r))
		} else if apierrors.IsNotFound(err) {
			err = nil // the update answers NotFound itself
		}
		if err == nil {
			out, err = g.putCustom(ctx, tgt, t.sub, body, wo, &hdr)
		}
	case r.Method == http.MethodPatch && t.name != "" && isApplyPatch(r.Header.Get("Content-Type")) && t.sub != "scale":
		out, code, err = g.applyCustom(ctx, r, cr, tgt, t.sub, body, wo, &hdr)
	case r.Method == http.MethodPatch && t.name != "":
		record := func(cur, patched []byte) []byte {
			if t.sub == "scale" {
				return patched
			}
			return g.recordCustomUpdate(ctx, cr, t.sub, cur, patched, updateManager(r))
		}
		out, err = g.patchCustom(ctx, r.Header.Get("Content-Type"), tgt, t.sub, body, wo, &hdr, record)
	case r.Method == http.MethodDelete && t.name != "" && t.sub == "":
		var del *dynamicv1.DeleteRequest
		if del, err = customDeleteRequest(tgt, q, body); err == nil {
			var resp *dynamicv1.DeleteResponse
			resp, err = g.dyn.Delete(ctx, del, grpc.Header(&hdr))
			out = resp.GetObject()
		}
	case r.Method == http.MethodDelete && t.name == "":
		out, err = g.deleteCustomCollection(ctx, tgt, q, body)
	default:
		err = methodNotAllowed()
	}
	addWarnings(w, hdr.Get(dynamicv1.WarningHeader))
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(out)
	_, _ = w.Write([]byte("\n"))
}

// putCustom replaces the object, or writes its status.
func (g *Gateway) putCustom(ctx context.Context, tgt *dynamicv1.Target, sub string, body []byte, wo *dynamicv1.WriteOptions, hdr *metadata.MD) ([]byte, error) {
	var opts []grpc.CallOption
	if hdr != nil {
		opts = append(opts, grpc.Header(hdr))
	}
	if sub == "status" {
		resp, err := g.dyn.UpdateStatus(ctx, &dynamicv1.UpdateStatusRequest{Target: tgt, Object: body, Options: wo}, opts...)
		return resp.GetObject(), err
	}
	resp, err := g.dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: tgt, Object: body, Options: wo}, opts...)
	return resp.GetObject(), err
}

// patchCustom applies a JSON merge patch or a JSON patch to the current
// object and writes the result with the current resourceVersion (unless
// the patch sets one), trying again when another write came first, as
// kube-apiserver's patch handler does. A strategic merge patch is 415, as
// for any custom resource on Kubernetes (there is no Go type to take the
// strategy from); server-side apply is customapply.go's, but on scale it
// is merged here, as for a built-in kind's scale.
// record, if set, records the write's manager in the patched object.
func (g *Gateway) patchCustom(ctx context.Context, ct string, tgt *dynamicv1.Target, sub string, patch []byte, wo *dynamicv1.WriteOptions, hdr *metadata.MD, record func(cur, patched []byte) []byte) ([]byte, error) {
	ct, _, _ = strings.Cut(ct, ";")
	ct = strings.TrimSpace(ct)
	var apply func(cur []byte) ([]byte, error)
	switch ct {
	case "application/merge-patch+json":
		apply = func(cur []byte) ([]byte, error) { return jsonpatch.MergePatch(cur, patch) }
	case "application/json-patch+json":
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, badRequest(err.Error())
		}
		apply = func(cur []byte) ([]byte, error) { return p.Apply(cur) }
	case applyPatchType:
		// Only the scale subresource comes here (an object or its status
		// is applyCustom's): as for a built-in kind's scale, the applied
		// Scale is merged into the live one, without field ownership.
		if err := wantObject(patch); err != nil {
			return nil, err
		}
		patch = stripManagedFields(patch)
		apply = func(cur []byte) ([]byte, error) { return jsonpatch.MergePatch(cur, patch) }
	default:
		return nil, &apierrors.StatusError{Reason: apierrors.ReasonUnsupportedMediaType, Code: http.StatusUnsupportedMediaType,
			Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")}
	}
	get := func() ([]byte, error) {
		cur, err := g.dyn.Get(ctx, &dynamicv1.GetRequest{Target: tgt})
		return cur.GetObject(), err
	}
	put := func(b []byte) ([]byte, error) { return g.putCustom(ctx, tgt, sub, b, wo, hdr) }
	if sub == "scale" {
		get = func() ([]byte, error) { return g.getCustomScale(ctx, tgt) }
		put = func(b []byte) ([]byte, error) { return g.putCustomScale(ctx, tgt, b, wo) }
	}
	for attempt := 0; ; attempt++ {
		cur, err := get()
		if err != nil {
			return nil, err
		}
		patched, err := apply(cur)
		if err != nil {
			return nil, invalidPatch(string(patch), err)
		}
		if err := wantObject(patched); err != nil {
			return nil, err
		}
		patched, err = keepResourceVersion(patched, cur)
		if err != nil {
			return nil, err
		}
		if record != nil {
			patched = record(cur, patched)
		}
		out, err := put(patched)
		if apierrors.ReasonOf(err) == apierrors.ReasonConflict && !setsResourceVersion(patch) && attempt < maxPatchAttempts {
			continue
		}
		return out, err
	}
}

// serveCustomScale serves the scale subresource: GET, PUT and PATCH of an
// autoscaling/v1 Scale.
func (g *Gateway) serveCustomScale(ctx context.Context, r *http.Request, tgt *dynamicv1.Target, body []byte, wo *dynamicv1.WriteOptions) ([]byte, error) {
	switch r.Method {
	case http.MethodGet:
		return g.getCustomScale(ctx, tgt)
	case http.MethodPut:
		return g.putCustomScale(ctx, tgt, body, wo)
	case http.MethodPatch:
		if isApplyPatch(r.Header.Get("Content-Type")) && r.URL.Query().Get("fieldManager") == "" {
			return nil, badRequest("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
		}
		return g.patchCustom(ctx, r.Header.Get("Content-Type"), tgt, "scale", body, wo, nil, nil)
	}
	return nil, methodNotAllowed()
}

func (g *Gateway) getCustomScale(ctx context.Context, tgt *dynamicv1.Target) ([]byte, error) {
	resp, err := g.dyn.GetScale(ctx, &dynamicv1.GetScaleRequest{Target: tgt})
	if err != nil {
		return nil, err
	}
	return kubejson.Marshal(resp.GetScale())
}

func (g *Gateway) putCustomScale(ctx context.Context, tgt *dynamicv1.Target, body []byte, wo *dynamicv1.WriteOptions) ([]byte, error) {
	sc := &autoscalingv1.Scale{}
	if err := kubejson.Unmarshal(body, sc, kubejson.Options{DiscardUnknown: wo.GetFieldValidation() != "Strict"}); err != nil {
		return nil, decodeError(err)
	}
	resp, err := g.dyn.UpdateScale(ctx, &dynamicv1.UpdateScaleRequest{Target: tgt, Scale: sc, Options: wo})
	if err != nil {
		return nil, err
	}
	return kubejson.Marshal(resp.GetScale())
}

// setsResourceVersion reports whether a patch names a resourceVersion
// (then a conflict is the client's, not retried).
func setsResourceVersion(patch []byte) bool {
	return strings.Contains(string(patch), `"resourceVersion"`)
}

// customDeleteRequest reads the delete options of a DELETE: the body's
// DeleteOptions, else the query's.
func customDeleteRequest(tgt *dynamicv1.Target, q url.Values, body []byte) (*dynamicv1.DeleteRequest, error) {
	var opts struct {
		GracePeriodSeconds *int64   `json:"gracePeriodSeconds"`
		PropagationPolicy  string   `json:"propagationPolicy"`
		DryRun             []string `json:"dryRun"`
		Preconditions      *struct {
			UID             *string `json:"uid"`
			ResourceVersion *string `json:"resourceVersion"`
		} `json:"preconditions"`
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &opts); err != nil {
			return nil, badRequest("the request body does not decode: " + err.Error())
		}
	}
	req := &dynamicv1.DeleteRequest{Target: tgt, GracePeriodSeconds: opts.GracePeriodSeconds, PropagationPolicy: opts.PropagationPolicy, DryRun: opts.DryRun}
	if v := q.Get("gracePeriodSeconds"); v != "" && req.GracePeriodSeconds == nil {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, badRequest("invalid gracePeriodSeconds: " + strconv.Quote(v))
		}
		req.GracePeriodSeconds = &n
	}
	if req.PropagationPolicy == "" {
		req.PropagationPolicy = q.Get("propagationPolicy")
	}
	if len(req.DryRun) == 0 {
		req.DryRun = q["dryRun"]
	}
	if p := opts.Preconditions; p != nil {
		req.Preconditions = &metav1.Preconditions{}
		req.Preconditions.Uid, req.Preconditions.ResourceVersion = p.UID, p.ResourceVersion
	}
	return req, nil
}

// deleteCustomCollection deletes every object the request's selectors
// match, one by one, and answers with the list of what it deleted.
func (g *Gateway) deleteCustomCollection(ctx context.Context, tgt *dynamicv1.Target, q url.Values, body []byte) ([]byte, error) {
	resp, err := g.dyn.List(ctx, &dynamicv1.ListRequest{Target: tgt, LabelSelector: q.Get("labelSelector"), FieldSelector: q.Get("fieldSelector")})
	if err != nil {
		return nil, err
	}
	var list map[string]any
	if err := json.Unmarshal(resp.GetList(), &list); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	items, _ := list["items"].([]any)
	deleted := []any{}
	for _, it := range items {
		m, _ := it.(map[string]any)
		one := &dynamicv1.Target{Group: tgt.GetGroup(), Version: tgt.GetVersion(), Resource: tgt.GetResource(), Namespace: str(m, "metadata", "namespace"), Name: str(m, "metadata", "name")}
		req, err := customDeleteRequest(one, q, body)
		if err != nil {
			return nil, err
		}
		d, err := g.dyn.Delete(ctx, req)
		if apierrors.ReasonOf(err) == apierrors.ReasonNotFound {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		deleted = append(deleted, json.RawMessage(d.GetObject()))
	}
	list["items"] = deleted
	list["metadata"] = map[string]any{}
	return json.Marshal(list)
}

// customTable renders a custom object, or a list of them, as the Table
// kube-apiserver prints for the resource: its additionalPrinterColumns (or
// Age alone), by apiextensions-apiserver's table convertor.
func customTable(cr *dynamicv1.ServedResource, doc []byte, isList bool, includeObject string, withColumns bool) ([]byte, error) {
	var cols []kubeapiextv1.CustomResourceColumnDefinition
	if b := cr.GetPrinterColumns(); len(b) > 0 {
		if err := json.Unmarshal(b, &cols); err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("printer columns of %s: %w", cr.GetResource(), err))
		}
	}
	if len(cols) == 0 {
		cols = []kubeapiextv1.CustomResourceColumnDefinition{{Name: "Age", Type: "date",
			Description: kubemetav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"], JSONPath: ".metadata.creationTimestamp"}}
	}
	conv, err := tableconvertor.New(cols)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("printer columns of %s: %w", cr.GetResource(), err))
	}
	var objs []map[string]any
	if isList {
		l := &unstructured.UnstructuredList{}
		if err := l.UnmarshalJSON(doc); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		for _, it := range l.Items {
			objs = append(objs, it.Object)
		}
		tab, err := conv.ConvertToTable(context.Background(), l, nil)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		return tableJSON(tab, objs, includeObject, withColumns)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(doc); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	tab, err := conv.ConvertToTable(context.Background(), u, nil)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return tableJSON(tab, []map[string]any{u.Object}, includeObject, withColumns)
}

// tableJSON writes a Table with each row's object as includeObject asks
// (the convertor puts the whole object in), its column definitions null
// without withColumns (a watch's later events).
func tableJSON(tab *kubemetav1.Table, objs []map[string]any, includeObject string, withColumns bool) ([]byte, error) {
	tab.Kind, tab.APIVersion = "Table", "meta.k8s.io/v1"
	b, err := json.Marshal(tab)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	rows, _ := m["rows"].([]any)
	if len(rows) != len(objs) {
		return nil, apierrors.NewInternalError(errors.New("table rows and objects differ in number"))
	}
	for i, row := range rows {
		rm, _ := row.(map[string]any)
		delete(rm, "object")
		if o, ok := rowObject(objs[i], includeObject); ok {
			rm["object"] = o
		}
	}
	if rows == nil {
		m["rows"] = []any{}
	}
	if !withColumns {
		m["columnDefinitions"] = nil
	}
	return json.Marshal(m)
}

// serveCustomTableWatch serves a watch of custom objects through the
// resource service: with asTable as Tables (kubectl get -w), each event's
// object a one-row Table, the first defining the columns, as kube-apiserver
// sends them; bookmarks and errors as they are.
func (g *Gateway) serveCustomTableWatch(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target, cr *dynamicv1.ServedResource, info *requestInfo, asTable bool) {
	q := r.URL.Query()
	fs := q.Get("fieldSelector")
	if t.name != "" {
		if strings.TrimSpace(fs) != "" {
			fs += ","
		}
		fs += "metadata.name=" + t.name
	}
	req := &dynamicv1.WatchRequest{Target: &dynamicv1.Target{Group: t.res.Group, Version: t.res.Version, Resource: t.res.Resource, Namespace: t.namespace},
		LabelSelector: q.Get("labelSelector"), FieldSelector: fs, ResourceVersion: q.Get("resourceVersion"),
		ResourceVersionMatch: q.Get("resourceVersionMatch"), AllowWatchBookmarks: isTrue(q.Get("allowWatchBookmarks"))}
	if v := q.Get("timeoutSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeError(w, badRequest("invalid timeoutSeconds: "+strconv.Quote(v)))
			return
		}
		req.TimeoutSeconds = &n
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := g.dyn.Watch(ctx, req)
	if err == nil {
		// As serveWatchJSON: the established header comes once the watch
		// is; a stream that ends without it failed, and Recv says why.
		var md metadata.MD
		if md, err = stream.Header(); err == nil && len(md.Get(watchstreamv1.EstablishedHeader)) == 0 {
			if _, err = stream.Recv(); err == nil || errors.Is(err, io.EOF) {
				err = apierrors.NewInternalError(errors.New("the watch ended before it started"))
			}
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	first := true
	for {
		ev, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && r.Context().Err() == nil {
				writeErrorEvent(w, err)
			}
			return
		}
		obj := ev.GetObject()
		if asTable && ev.GetType() != "BOOKMARK" && ev.GetType() != "ERROR" {
			if obj, err = customTable(cr, obj, false, info.includeObject, first); err != nil {
				writeErrorEvent(w, err)
				return
			}
			first = false
		}
		line, err := (&watchEvent{Type: ev.GetType()}).line(obj)
		if err != nil {
			return
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// isApplyPatch reports whether a Content-Type is server-side apply's.
func isApplyPatch(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.TrimSpace(mt) == applyPatchType
}
