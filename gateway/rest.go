package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/apierrors"
)

// target is what a resource path names.
type target struct {
	res       *resource
	namespace string
	name      string
	sub       string // "", "status", "scale", "log", ...
	watch     bool   // the legacy /watch/ prefix
}

// parseTarget reads [watch/][namespaces/{ns}/]{resource}[/{name}[/{sub}]].
func (g *Gateway) parseTarget(group, version string, parts []string) (*target, error) {
	t := &target{}
	if len(parts) > 0 && parts[0] == "watch" {
		t.watch, parts = true, parts[1:]
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		t.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || len(parts) > 3 {
		return nil, notFound()
	}
	t.res = g.tab.lookup(group, version, parts[0])
	if t.res == nil {
		return nil, notFound()
	}
	if t.namespace != "" && !t.res.Namespaced {
		return nil, notFound()
	}
	if len(parts) > 1 {
		t.name = parts[1]
	}
	if len(parts) > 2 {
		t.sub = parts[2]
	}
	return t, nil
}

func (g *Gateway) serveResource(ctx context.Context, w http.ResponseWriter, r *http.Request, group, version string, parts []string) {
	t, err := g.parseTarget(group, version, parts)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	isWatch := t.watch || q.Get("watch") == "true" || q.Get("watch") == "1"
	switch {
	case (t.name == "" || t.sub == "") && r.Method == http.MethodGet && isWatch:
		err = g.watch(ctx, w, r, t)
	case t.name == "" && r.Method == http.MethodGet:
		err = g.list(ctx, w, r, t)
	case t.name == "" && r.Method == http.MethodPost:
		err = g.create(ctx, w, r, t)
	case t.name != "" && t.sub == "" && r.Method == http.MethodGet:
		err = g.get(ctx, w, r, t)
	case t.name != "" && (t.sub == "" || t.sub == "status") && r.Method == http.MethodPut:
		err = g.update(ctx, w, r, t)
	case t.name != "" && (t.sub == "" || t.sub == "status" || t.sub == "scale") && r.Method == http.MethodPatch:
		err = g.patch(ctx, w, r, t)
	case t.name != "" && t.sub == "" && r.Method == http.MethodDelete:
		err = g.delete(ctx, w, r, t)
	case t.sub == "status" && r.Method == http.MethodGet:
		err = g.get(ctx, w, r, t)
	case t.sub == "scale" && (r.Method == http.MethodGet || r.Method == http.MethodPut):
		err = g.scale(ctx, w, r, t)
	case t.sub == "log" && t.res.Resource == "pods":
		err = &apierrors.StatusError{Reason: apierrors.ReasonMethodNotAllowed, Code: http.StatusNotImplemented,
			Message: "pods/log is not implemented: the kplane API service does not proxy container logs from the node agent yet"}
	default:
		err = &apierrors.StatusError{Reason: apierrors.ReasonMethodNotAllowed, Code: http.StatusMethodNotAllowed,
			Message: "the server does not allow this method on the requested resource"}
	}
	if err != nil {
		writeError(w, err)
	}
}

// call invokes verb's method on the API service.
func (g *Gateway) call(ctx context.Context, t *target, verb string, build func(req proto.Message) error) (proto.Message, error) {
	md := t.res.method(verb)
	if md == nil {
		return nil, &apierrors.StatusError{Reason: apierrors.ReasonMethodNotAllowed, Code: http.StatusMethodNotAllowed,
			Message: fmt.Sprintf("%s does not support %s", t.res.Resource, verb)}
	}
	req, err := newMessage(md.Input())
	if err != nil {
		return nil, err
	}
	setString(req, "namespace", t.namespace)
	setString(req, "name", t.name)
	if build != nil {
		if err := build(req); err != nil {
			return nil, err
		}
	}
	resp, err := newMessage(md.Output())
	if err != nil {
		return nil, err
	}
	if err := g.conn.Invoke(ctx, fullMethod(md), req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

func newMessage(md protoreflect.MessageDescriptor) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return mt.New().Interface(), nil
}

// objectMeta returns obj's metadata (created if absent).
func objectMeta(obj proto.Message) *metav1.ObjectMeta {
	m := obj.ProtoReflect()
	fd := m.Descriptor().Fields().ByName("metadata")
	if fd == nil {
		return &metav1.ObjectMeta{}
	}
	om, _ := m.Mutable(fd).Message().Interface().(*metav1.ObjectMeta)
	if om == nil {
		return &metav1.ObjectMeta{}
	}
	return om
}

func (g *Gateway) get(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target) error {
	resp, err := g.call(ctx, t, "get", func(req proto.Message) error { return setQuery(req, r.URL.Query()) })
	if err != nil {
		return err
	}
	obj := onlyMessage(resp)
	if obj == nil {
		return apierrors.NewNotFound(t.res.Group, t.res.Resource, t.name)
	}
	return g.respondObject(w, r, t.res, http.StatusOK, obj)
}

// respondObject writes obj as JSON, or as a one-row Table when asked.
func (g *Gateway) respondObject(w http.ResponseWriter, r *http.Request, res *resource, code int, obj proto.Message) error {
	b, err := kubejson.Marshal(obj)
	if err != nil {
		return err
	}
	if wantsTable(r) {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		tb := buildTable(res, []map[string]any{m}, str(m, "metadata", "resourceVersion"), r.URL.Query().Get("includeObject"), true)
		writeJSON(w, code, tb)
		return nil
	}
	writeRaw(w, code, b)
	return nil
}

func (g *Gateway) list(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target) error {
	resp, err := g.call(ctx, t, "list", func(req proto.Message) error { return setQuery(req, r.URL.Query()) })
	if err != nil {
		return err
	}
	list := onlyMessage(resp)
	if list == nil {
		return fmt.Errorf("gateway: empty list response from %s", t.res.Resource)
	}
	b, err := kubejson.Marshal(list)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if _, ok := m["items"]; !ok {
		m["items"] = []any{}
	}
	if _, ok := m["metadata"]; !ok {
		m["metadata"] = map[string]any{}
	}
	if wantsTable(r) {
		var items []map[string]any
		for _, it := range m["items"].([]any) {
			if o, ok := it.(map[string]any); ok {
				items = append(items, o)
			}
		}
		tb := buildTable(t.res, items, str(m, "metadata", "resourceVersion"), r.URL.Query().Get("includeObject"), true)
		if c := str(m, "metadata", "continue"); c != "" {
			tb["metadata"].(map[string]any)["continue"] = c
		}
		writeJSON(w, http.StatusOK, tb)
		return nil
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

// checkName rejects a body whose metadata disagrees with the path.
func checkNames(t *target, obj proto.Message) error {
	om := objectMeta(obj)
	if t.namespace != "" {
		if om.Namespace != "" && om.Namespace != t.namespace {
			return badRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		om.Namespace = t.namespace
	}
	if t.name != "" {
		if om.Name != "" && om.Name != t.name {
			return badRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", om.Name, t.name))
		}
		om.Name = t.name
	}
	return nil
}

// checkKind rejects a body that names another kind.
func checkKind(res *resource, body []byte) error {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	_ = json.Unmarshal(body, &tm)
	if tm.Kind != "" && tm.Kind != res.Kind {
		return badRequest(fmt.Sprintf("the kind of the object (%s) does not match the resource %s (%s)", tm.Kind, res.Resource, res.Kind))
	}
	if tm.APIVersion != "" && tm.APIVersion != res.GroupVersion() {
		return badRequest(fmt.Sprintf("the apiVersion of the object (%s) does not match %s", tm.APIVersion, res.GroupVersion()))
	}
	return nil
}

func (g *Gateway) create(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if err := checkKind(t.res, body); err != nil {
		return err
	}
	obj, warnings, err := decodeObject(body, t.res.Object, r.URL.Query().Get("fieldValidation"))
	if err != nil {
		return err
	}
	if err := checkNames(t, obj); err != nil {
		return err
	}
	resp, err := g.call(ctx, t, "create", func(req proto.Message) error {
		setMessage(req, obj)
		return setQuery(req, r.URL.Query())
	})
	if err != nil {
		return err
	}
	addWarnings(w, warnings)
	return g.respondObject(w, r, t.res, http.StatusCreated, onlyMessage(resp))
}

func (g *Gateway) update(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if err := checkKind(t.res, body); err != nil {
		return err
	}
	obj, warnings, err := decodeObject(body, t.res.Object, r.URL.Query().Get("fieldValidation"))
	if err != nil {
		return err
	}
	if err := checkNames(t, obj); err != nil {
		return err
	}
	verb := "update"
	if t.sub == "status" {
		verb = "updateStatus"
	}
	resp, err := g.call(ctx, t, verb, func(req proto.Message) error {
		setMessage(req, obj)
		return setQuery(req, r.URL.Query())
	})
	if err != nil {
		return err
	}
	addWarnings(w, warnings)
	return g.respondObject(w, r, t.res, http.StatusOK, onlyMessage(resp))
}

func (g *Gateway) delete(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	resp, err := g.call(ctx, t, "delete", func(req proto.Message) error {
		if len(strings.TrimSpace(string(body))) > 0 {
			if err := kubejson.Unmarshal(body, req, kubejson.Options{DiscardUnknown: true}); err != nil {
				return badRequest("delete options: " + strings.TrimPrefix(err.Error(), "kubejson: "))
			}
			setString(req, "namespace", t.namespace)
			setString(req, "name", t.name)
		}
		return setQuery(req, r.URL.Query())
	})
	if err != nil {
		return err
	}
	if obj := onlyMessage(resp); obj != nil {
		return g.respondObject(w, r, t.res, http.StatusOK, obj)
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Success", "details": map[string]any{"name": t.name, "group": t.res.Group, "kind": t.res.Resource}})
	return nil
}

// scale serves GET and PUT of the scale subresource.
func (g *Gateway) scale(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target) error {
	if r.Method == http.MethodGet {
		resp, err := g.call(ctx, t, "getScale", nil)
		if err != nil {
			return err
		}
		return writeMessage(w, http.StatusOK, onlyMessage(resp))
	}
	md := t.res.method("updateScale")
	if md == nil {
		return notFound()
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	scaleType, err := protoregistry.GlobalTypes.FindMessageByName(scaleMessage(md))
	if err != nil {
		return err
	}
	obj, warnings, err := decodeObject(body, scaleType, r.URL.Query().Get("fieldValidation"))
	if err != nil {
		return err
	}
	resp, err := g.call(ctx, t, "updateScale", func(req proto.Message) error {
		setMessage(req, obj)
		return setQuery(req, r.URL.Query())
	})
	if err != nil {
		return err
	}
	addWarnings(w, warnings)
	return writeMessage(w, http.StatusOK, onlyMessage(resp))
}

// scaleMessage is the Scale type an update-scale method carries.
func scaleMessage(md protoreflect.MethodDescriptor) protoreflect.FullName {
	fields := md.Output().Fields()
	for i := 0; i < fields.Len(); i++ {
		if m := fields.Get(i).Message(); m != nil {
			return m.FullName()
		}
	}
	return ""
}

func writeMessage(w http.ResponseWriter, code int, m proto.Message) error {
	if m == nil {
		return fmt.Errorf("gateway: empty response")
	}
	b, err := kubejson.Marshal(m)
	if err != nil {
		return err
	}
	writeRaw(w, code, b)
	return nil
}

// watch streams events in Kubernetes' framing, one JSON object per line,
// flushed per event; Table events when the client asks for Tables.
func (g *Gateway) watch(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target) error {
	md := t.res.method("watch")
	if md == nil {
		return &apierrors.StatusError{Reason: apierrors.ReasonMethodNotAllowed, Code: http.StatusMethodNotAllowed, Message: "watch is not supported"}
	}
	req, err := newMessage(md.Input())
	if err != nil {
		return err
	}
	setString(req, "namespace", t.namespace)
	q := r.URL.Query()
	if err := setQuery(req, q); err != nil {
		return err
	}
	if t.name != "" {
		setString(req, "field_selector", "metadata.name="+t.name)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if ts := q.Get("timeoutSeconds"); ts != "" {
		var n int64
		if _, err := fmt.Sscan(ts, &n); err == nil && n > 0 {
			ctx, cancel = context.WithTimeout(ctx, time.Duration(n)*time.Second)
			defer cancel()
		}
	}
	stream, err := g.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, fullMethod(md))
	if err != nil {
		return err
	}
	if err := stream.SendMsg(req); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	table := wantsTable(r)
	includeObject := q.Get("includeObject")
	flusher, _ := w.(http.Flusher)
	started := false
	for {
		ev, err := newMessage(md.Output())
		if err != nil {
			return err
		}
		if err := stream.RecvMsg(ev); err != nil {
			if !started {
				if ctx.Err() != nil {
					err = nil
				}
				if err != nil && !isEOF(err) {
					return err
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
			}
			return nil
		}
		line, err := g.eventJSON(t.res, ev, table, includeObject)
		if err != nil {
			g.log.Warn("gateway: watch event", "err", err)
			return nil
		}
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return nil
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

// eventJSON renders one watch event.
func (g *Gateway) eventJSON(res *resource, ev proto.Message, table bool, includeObject string) ([]byte, error) {
	m := ev.ProtoReflect()
	fields := m.Descriptor().Fields()
	typ := m.Get(fields.ByName("type")).String()
	var object any
	if typ == "ERROR" {
		if fd := fields.ByName("status"); fd != nil && m.Has(fd) {
			b, err := kubejson.Marshal(m.Get(fd).Message().Interface())
			if err != nil {
				return nil, err
			}
			object = json.RawMessage(withEmptyMetadata(b))
		}
	} else if fd := fields.ByName("object"); fd != nil && m.Has(fd) {
		b, err := kubejson.Marshal(m.Get(fd).Message().Interface())
		if err != nil {
			return nil, err
		}
		if table && typ != "BOOKMARK" {
			var o map[string]any
			if err := json.Unmarshal(b, &o); err != nil {
				return nil, err
			}
			object = buildTable(res, []map[string]any{o}, str(o, "metadata", "resourceVersion"), includeObject, true)
		} else {
			object = json.RawMessage(b)
		}
	}
	return json.Marshal(map[string]any{"type": typ, "object": object})
}
