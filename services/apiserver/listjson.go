// This file holds the list of a built-in resource as the Kubernetes JSON
// the gateway answers (kplane.listjson.v1): the same list as the typed
// List calls (s.list: authorization, selectors, resourceVersion semantics,
// limit and continue), whose items are rendered once per object version and
// kept in a memory-bounded cache, so that a repeated list of unchanged
// objects costs a concatenation instead of protobuf encoding here, decoding
// in the gateway and rendering there.

package apiserver

import (
	"bytes"
	clist "container/list"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	listjsonv1 "github.com/kplane/kplane/proto/kplane/listjson/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// listJSONCacheBytes bounds the rendered objects the API service keeps for
// lists (the least recently used go first): 128 MiB holds about 100,000
// ConfigMaps of 1 kB.
const listJSONCacheBytes = 128 << 20

type listJSONService struct {
	listjsonv1.UnimplementedListJSONServiceServer
	s *Server
}

// listJSONChunk is the most of the List one response carries: the
// stream's flow control then keeps the call (and its seats) open until the
// caller has read all but about this much.
const listJSONChunk = 256 << 10

// ListJSON serves one list of a built-in resource (or a view of one) as
// Kubernetes JSON; custom resources are Unimplemented (the gateway serves
// them through the dynamic service). The unary calls' interceptors (the
// in-flight limit or priority and fairness, the request timeout, audit)
// run around the whole call, the sending included, as they would around a
// unary list, so the list holds its seats while the caller reads it.
func (x *listJSONService) ListJSON(req *listjsonv1.ListJSONRequest, stream listjsonv1.ListJSONService_ListJSONServer) error {
	info := &grpc.UnaryServerInfo{Server: x, FullMethod: listjsonv1.ListJSONService_ListJSON_FullMethodName}
	send := func(ctx context.Context, _ any) (any, error) {
		data, err := x.render(ctx, req)
		if err != nil {
			return nil, err
		}
		for off := 0; off < len(data); off += listJSONChunk {
			if err := stream.Send(&listjsonv1.ListJSONResponse{Data: data[off:min(off+listJSONChunk, len(data))]}); err != nil {
				return nil, err
			}
		}
		// Audit's RequestResponse level records the whole List.
		return &listjsonv1.ListJSONResponse{Data: data}, nil
	}
	_, err := chainUnary(x.s.unary, info, send)(stream.Context(), req)
	return err
}

// chainUnary is handler behind interceptors, the first outermost, as
// grpc.ChainUnaryInterceptor runs them.
func chainUnary(interceptors []grpc.UnaryServerInterceptor, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) grpc.UnaryHandler {
	for i := len(interceptors) - 1; i >= 0; i-- {
		ic, next := interceptors[i], handler
		handler = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
	}
	return handler
}

// render is the List req asks for, as Kubernetes JSON.
func (x *listJSONService) render(ctx context.Context, req *listjsonv1.ListJSONRequest) ([]byte, error) {
	r := x.s.listJSONResource(req.GetGroup(), req.GetVersion(), req.GetResource())
	if r == nil {
		return nil, status.Errorf(codes.Unimplemented, "no JSON list of %s/%s %s", req.GetGroup(), req.GetVersion(), req.GetResource())
	}
	items, lm, err := x.s.list(ctx, r, req.GetNamespace(), listOptions{
		LabelSelector: req.GetLabelSelector(), FieldSelector: req.GetFieldSelector(),
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		Limit: req.GetLimit(), Continue: req.GetContinue(),
	})
	if err != nil {
		return nil, toGRPC(err)
	}
	data, err := x.s.listJSON.list(r, items, lm)
	if err != nil {
		return nil, toGRPC(apierrors.NewInternalError(err))
	}
	return data, nil
}

// listJSONResource is the built-in resource or view group/version/resource
// names, or nil.
func (s *Server) listJSONResource(group, version, resource string) *resourceInfo {
	r := s.resources[resource]
	if r == nil || r.Group != group || r.Version != version {
		r = s.views[group+"/"+resource]
	}
	if r == nil || r.Group != group || r.Version != version {
		return nil
	}
	return r
}

// servedObject converts a stored object to what r serves: a view's
// version of it (eventsview.go, hpaview.go), else the object itself.
func servedObject(r *resourceInfo, obj proto.Message) (proto.Message, error) {
	if r.stored == nil {
		return obj, nil
	}
	if c, ok := obj.(*corev1.Event); ok && r.Group == eventsGroup {
		return eventFromCore(c), nil
	}
	if _, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler); ok && r.Version == "v1" {
		return hpaToV1(obj)
	}
	return obj, nil
}

// renderListItem renders obj as r serves it, as one item of the gateway's
// JSON list: Kubernetes JSON with <, > and & escaped, as encoding/json
// writes strings.
func renderListItem(r *resourceInfo, obj proto.Message) ([]byte, error) {
	obj, err := servedObject(r, obj)
	if err != nil {
		return nil, err
	}
	b, err := kubejson.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("render a list item: %w", err)
	}
	return htmlEscaped(b), nil
}

// htmlEscaped is b with encoding/json's HTML escaping, or b itself when
// there is nothing to escape.
func htmlEscaped(b []byte) []byte {
	if bytes.IndexAny(b, "<>&\u2028\u2029") < 0 {
		return b
	}
	var buf bytes.Buffer
	json.HTMLEscape(&buf, b)
	return buf.Bytes()
}

type listJSONKey struct {
	r       *resourceInfo
	uid, rv string
}

type listJSONEntry struct {
	key listJSONKey
	b   []byte
}

// listJSONCache holds rendered list items by resource, uid and
// resourceVersion — one version of one object, which never changes — at
// most max bytes of them. Safe for concurrent use.
type listJSONCache struct {
	mu    sync.Mutex
	max   int
	size  int
	order *clist.List // of *listJSONEntry, most recently used first
	items map[listJSONKey]*clist.Element
}

func newListJSONCache(maxBytes int) *listJSONCache {
	return &listJSONCache{max: maxBytes, order: clist.New(), items: map[listJSONKey]*clist.Element{}}
}

// list renders the List object of r with items and lm as the gateway
// writes it: the keys in encoding/json's order (apiVersion, items, kind,
// metadata), items always present.
func (c *listJSONCache) list(r *resourceInfo, items []proto.Message, lm *metav1.ListMeta) ([]byte, error) {
	rendered, err := c.render(r, items)
	if err != nil {
		return nil, err
	}
	mb, err := kubejson.Marshal(lm)
	if err != nil {
		return nil, fmt.Errorf("render a list's metadata: %w", err)
	}
	av, err := json.Marshal(r.APIVersion())
	if err != nil {
		return nil, err
	}
	kind, err := json.Marshal(r.Kind + "List")
	if err != nil {
		return nil, err
	}
	n := len(mb) + len(av) + len(kind) + 48
	for _, b := range rendered {
		n += len(b) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, `{"apiVersion":`...)
	out = append(out, av...)
	out = append(out, `,"items":[`...)
	for i, b := range rendered {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	out = append(out, `],"kind":`...)
	out = append(out, kind...)
	out = append(out, `,"metadata":`...)
	out = append(out, htmlEscaped(mb)...)
	return append(out, '}'), nil
}

// render returns each item's JSON, from the cache when this version was
// rendered before. The lock is taken twice per list, not per item: once to
// look every item up, once to keep the ones rendered meanwhile.
func (c *listJSONCache) render(r *resourceInfo, items []proto.Message) ([][]byte, error) {
	out := make([][]byte, len(items))
	keys := make([]listJSONKey, len(items))
	var missing []int
	c.mu.Lock()
	for i, obj := range items {
		m := meta(obj)
		keys[i] = listJSONKey{r: r, uid: m.GetUid(), rv: m.GetResourceVersion()}
		if el, ok := c.items[keys[i]]; ok {
			c.order.MoveToFront(el)
			out[i] = el.Value.(*listJSONEntry).b
			continue
		}
		missing = append(missing, i)
	}
	c.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	for _, i := range missing {
		b, err := renderListItem(r, items[i])
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, i := range missing {
		k := keys[i]
		if k.uid == "" || k.rv == "" || len(out[i]) > c.max {
			continue
		}
		if _, ok := c.items[k]; ok {
			continue // another list rendered it meanwhile
		}
		c.items[k] = c.order.PushFront(&listJSONEntry{key: k, b: out[i]})
		c.size += len(out[i])
	}
	for c.size > c.max {
		last := c.order.Back()
		e := last.Value.(*listJSONEntry)
		c.order.Remove(last)
		delete(c.items, e.key)
		c.size -= len(e.b)
	}
	return out, nil
}

// listJSONAudit is a JSON list as an audit event records its response:
// without the items' managedFields when the policy omits them.
func listJSONAudit(data []byte, omitManagedFields bool) json.RawMessage {
	if !omitManagedFields {
		return data
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var l map[string]any
	if err := dec.Decode(&l); err != nil {
		return nil
	}
	items, _ := l["items"].([]any)
	for _, it := range items {
		if o, ok := it.(map[string]any); ok {
			if m, ok := o["metadata"].(map[string]any); ok {
				delete(m, "managedFields")
			}
		}
	}
	b, err := json.Marshal(l)
	if err != nil {
		return nil
	}
	return b
}
