// This file holds the grpc-gateway marshaler that speaks Kubernetes JSON:
// objects and watch events rendered as kube-apiserver writes them, and
// request bodies decoded with its checks of kind, apiVersion and field
// types.

package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/kubejson"
)

// kubeMarshaler is the runtime.Marshaler the grpc-gateway mux uses for every
// media type: Kubernetes JSON (proto/kubejson) for objects and lists, plain
// encoding/json for the values the gateway builds itself (Tables, Status,
// watch events), and Kubernetes' watch framing for streams — one
// {"type":...,"object":...} per line.
type kubeMarshaler struct {
	tab *table
}

var _ runtime.Marshaler = (*kubeMarshaler)(nil)

// ContentType is application/json for everything the gateway writes.
func (*kubeMarshaler) ContentType(any) string { return "application/json" }

// Delimiter ends each watch event with a newline.
func (*kubeMarshaler) Delimiter() []byte { return []byte("\n") }

// Marshal renders v. Streams hand it {"result": event} per message and
// {"error": status} when the stream fails.
func (m *kubeMarshaler) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case map[string]any:
		if r, ok := v["result"]; ok && len(v) == 1 {
			return m.Marshal(r)
		}
	case map[string]proto.Message:
		if e, ok := v["error"].(*spb.Status); ok && len(v) == 1 {
			return json.Marshal(watchEvent{Type: "ERROR", Object: statusObject(status.FromProto(e).Err())})
		}
	case *watchEvent:
		if raw, ok := v.Object.(json.RawMessage); ok {
			return v.line(raw)
		}
	case proto.Message:
		if v == nil || !v.ProtoReflect().IsValid() {
			return []byte("null"), nil
		}
		if _, ok := v.(*spb.Status); ok {
			return json.Marshal(statusObject(status.FromProto(v.(*spb.Status)).Err()))
		}
		return kubejson.Marshal(v)
	}
	return json.Marshal(v)
}

// Unmarshal reads Kubernetes JSON into v (see kubeDecoder).
func (m *kubeMarshaler) Unmarshal(data []byte, v any) error {
	return m.NewDecoder(bytes.NewReader(data)).Decode(v)
}

// NewDecoder returns a decoder for a request body. The gateway hands the
// generated handlers a *requestBody (JSON already, at most MaxBodyBytes),
// which carries the request's fieldValidation directive and collects the
// warnings it produces.
func (m *kubeMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error { return m.decode(r, v) })
}

// NewEncoder writes what Marshal returns.
func (m *kubeMarshaler) NewEncoder(w io.Writer) runtime.Encoder {
	return runtime.EncoderFunc(func(v any) error {
		b, err := m.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
}

// decode fills v — a request message (DeleteOptions bodies: unknown fields
// such as kind and apiVersion are ignored) or a pointer to an object
// field of one (create and update bodies: kind and apiVersion must match,
// unknown fields handled as fieldValidation says).
func (m *kubeMarshaler) decode(r io.Reader, v any) error {
	var info *requestInfo
	var data []byte
	if rb, ok := r.(*requestBody); ok {
		info, data = rb.info, rb.data
	} else {
		b, err := io.ReadAll(io.LimitReader(r, MaxBodyBytes+1))
		if err != nil {
			return err
		}
		data = b
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return io.EOF
	}
	if msg, ok := v.(proto.Message); ok {
		if err := kubejson.Unmarshal(data, msg, kubejson.Options{DiscardUnknown: true}); err != nil {
			return badRequest("the request body does not decode: " + strings.TrimPrefix(err.Error(), "kubejson: "))
		}
		return nil
	}
	// A pointer to a message pointer: allocate the object and decode into it.
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Pointer {
		return fmt.Errorf("gateway: cannot decode into %T", v)
	}
	obj, ok := reflect.New(rv.Elem().Type().Elem()).Interface().(proto.Message)
	if !ok {
		return fmt.Errorf("gateway: cannot decode into %T", v)
	}
	if err := m.checkKind(obj, data); err != nil {
		return err
	}
	validation := ""
	if info != nil {
		validation = info.fieldValidation
	}
	decoded, warnings, err := decodeObject(data, obj.ProtoReflect().Type(), validation)
	if err != nil {
		return cannotBeHandled(obj, err)
	}
	if info != nil {
		info.warnings = append(info.warnings, warnings...)
	}
	rv.Elem().Set(reflect.ValueOf(decoded))
	return nil
}

// cannotBeHandled words a create or update body's decoding error as
// kube-apiserver does: `Pod in version "v1" cannot be handled as a Pod: ...`.
func cannotBeHandled(obj proto.Message, err error) error {
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.Reason != apierrors.ReasonBadRequest {
		return err
	}
	apiVersion, kind, ok := kubejson.TypeMeta(obj.ProtoReflect().Descriptor())
	if !ok {
		return err
	}
	version := apiVersion[strings.LastIndex(apiVersion, "/")+1:]
	return badRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %s", kind, version, kind, se.Message))
}

// checkKind rejects a body whose kind or apiVersion names another type
// than the one the path serves.
func (m *kubeMarshaler) checkKind(obj proto.Message, body []byte) error {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	_ = json.Unmarshal(body, &tm)
	md := obj.ProtoReflect().Descriptor()
	if tm.Kind != "" && tm.Kind != string(md.Name()) {
		return badRequest(fmt.Sprintf("the kind of the object (%s) does not match the kind the path serves (%s)", tm.Kind, md.Name()))
	}
	if res := m.tab.byObject[md.FullName()]; res != nil && tm.APIVersion != "" && tm.APIVersion != res.GroupVersion() {
		return badRequest(fmt.Sprintf("the apiVersion of the object (%s) does not match %s", tm.APIVersion, res.GroupVersion()))
	}
	return nil
}

// requestBody is a request body the gateway has read, size-checked and
// converted to JSON, with the request it belongs to.
type requestBody struct {
	*bytes.Reader
	data []byte
	info *requestInfo
}

func (*requestBody) Close() error { return nil }

// watchEvent is one event of a watch stream, as Kubernetes writes it.
type watchEvent struct {
	Type   string `json:"type"`
	Object any    `json:"object"`
}

// line writes the event with an object already rendered as compact JSON
// (kubejson's output), without encoding/json's copy and check of it: a
// large object's event costs one copy per watcher.
func (e *watchEvent) line(obj json.RawMessage) ([]byte, error) {
	typ, err := json.Marshal(e.Type)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(obj)+len(typ)+len(`{"type":,"object":}`))
	out = append(out, `{"type":`...)
	out = append(out, typ...)
	out = append(out, `,"object":`...)
	out = append(out, obj...)
	return append(out, '}'), nil
}
