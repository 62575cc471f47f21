// Package kubejson converts kplane's proto messages to and from the JSON
// Kubernetes writes: int64 fields as JSON numbers (protojson writes strings),
// IntOrString as a bare number or string, empty fields omitted except those
// Kubernetes always writes (emit_empty), fields marked inline merged into
// their parent object, MicroTime with 6 fractional digits, FieldsV1 and
// RawExtension as embedded JSON, list wrappers (ExtraValue) as bare arrays,
// apiVersion and kind filled in on top-level objects and lists (the options
// are in proto/kplane/meta/v1/options.proto, set by proto/internal/kubegen). Decoding accepts
// numbers or strings for 64-bit integers, null for unset fields, and reports
// unknown fields with their path (spec.containers[0].imagePullPolicyy)
// unless told to discard them.
package kubejson

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

const intOrStringName = "kplane.meta.v1.IntOrString"

// rfc3339Micro is Kubernetes' MicroTime format.
const rfc3339Micro = "2006-01-02T15:04:05.000000Z07:00"

func fieldOpt(fd protoreflect.FieldDescriptor, xt protoreflect.ExtensionType) bool {
	opts := fd.Options()
	if opts == nil {
		return false
	}
	b, _ := proto.GetExtension(opts, xt).(bool)
	return b
}

// IsInline reports whether fd's message is written inline into its
// parent's JSON object (Volume's VolumeSource).
func IsInline(fd protoreflect.FieldDescriptor) bool { return fieldOpt(fd, metav1.E_Inline) }

// IsRawJSON reports whether md holds a JSON document in its bytes field raw,
// written as that document (FieldsV1, RawExtension).
func IsRawJSON(md protoreflect.MessageDescriptor) bool { return messageOpt(md, metav1.E_RawJson) }

// IsListWrapper reports whether md is written as the bare array of its
// field items (authorization's ExtraValue).
func IsListWrapper(md protoreflect.MessageDescriptor) bool {
	return messageOpt(md, metav1.E_ListWrapper)
}

func messageOpt(md protoreflect.MessageDescriptor, xt protoreflect.ExtensionType) bool {
	opts := md.Options()
	if opts == nil {
		return false
	}
	b, _ := proto.GetExtension(opts, xt).(bool)
	return b
}

// Options tune Unmarshal.
type Options struct {
	// DiscardUnknown drops unknown fields instead of failing.
	DiscardUnknown bool

	// unknown collects the paths of unknown fields while decoding, so that
	// one error names all of them.
	unknown *[]string
}

// UnknownFieldsError is Unmarshal's error for a document with fields the
// message does not have: every one of them, by path, in path order.
type UnknownFieldsError struct {
	Paths []string
}

func (e *UnknownFieldsError) Error() string {
	var b strings.Builder
	b.WriteString("kubejson: ")
	for i, p := range e.Paths {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "unknown field %q", p)
	}
	return b.String()
}

// Marshal writes m as Kubernetes JSON.
func Marshal(m proto.Message) ([]byte, error) {
	raw, err := protojson.MarshalOptions{}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("kubejson: %w", err)
	}
	v, err := decode(raw)
	if err != nil {
		return nil, fmt.Errorf("kubejson: %w", err)
	}
	md := m.ProtoReflect().Descriptor()
	obj, _ := v.(map[string]any)
	if obj == nil {
		obj = map[string]any{}
	}
	fillTypeMeta(md, obj)
	out := toKube(md, obj)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("kubejson: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// Unmarshal reads Kubernetes JSON into m, replacing its contents.
func Unmarshal(data []byte, m proto.Message, opts Options) error {
	v, err := decode(data)
	if err != nil {
		return fmt.Errorf("kubejson: %w", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		if v == nil {
			proto.Reset(m)
			return nil
		}
		return fmt.Errorf("kubejson: want a JSON object, got %T", v)
	}
	var unknown []string
	if !opts.DiscardUnknown {
		opts.unknown = &unknown
	}
	clean, err := fromKube(m.ProtoReflect().Descriptor(), obj, "", opts)
	if err != nil {
		return err
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return &UnknownFieldsError{Paths: unknown}
	}
	raw, err := json.Marshal(clean)
	if err != nil {
		return fmt.Errorf("kubejson: %w", err)
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(raw, m); err != nil {
		return fmt.Errorf("kubejson: %w", err)
	}
	return nil
}

// TypeMeta returns the apiVersion and kind Kubernetes gives messages of
// type md: kplane.apps.v1.Deployment → "apps/v1", "Deployment". ok is false
// for messages that are not top-level objects or lists.
func TypeMeta(md protoreflect.MessageDescriptor) (apiVersion, kind string, ok bool) {
	if md.Fields().ByName("api_version") == nil || md.Fields().ByName("kind") == nil {
		return "", "", false
	}
	pkg := string(md.ParentFile().Package()) // kplane.<group>.<version>
	parts := strings.Split(pkg, ".")
	if len(parts) != 3 || parts[0] != "kplane" {
		return "", "", false
	}
	group, version := parts[1], parts[2]
	switch group {
	case "core":
		apiVersion = version
	case "meta":
		apiVersion = version
	case "apps", "autoscaling", "batch":
		apiVersion = group + "/" + version
	case "rbac":
		apiVersion = "rbac.authorization.k8s.io/" + version
	default:
		apiVersion = group + ".k8s.io/" + version
	}
	return apiVersion, string(md.Name()), true
}

func fillTypeMeta(md protoreflect.MessageDescriptor, obj map[string]any) {
	av, kind, ok := TypeMeta(md)
	if !ok {
		return
	}
	if s, _ := obj["apiVersion"].(string); s == "" {
		obj["apiVersion"] = av
	}
	if s, _ := obj["kind"].(string); s == "" {
		obj["kind"] = kind
	}
	// Items of a list are objects too.
	if items := md.Fields().ByName("items"); items != nil && items.Message() != nil {
		if arr, ok := obj["items"].([]any); ok {
			for _, it := range arr {
				if o, ok := it.(map[string]any); ok {
					fillTypeMeta(items.Message(), o)
				}
			}
		}
	}
}

func decode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func is64(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return true
	}
	return false
}

// toKube rewrites protojson's output for message md into Kubernetes' shape.
func toKube(md protoreflect.MessageDescriptor, obj map[string]any) any {
	if md.FullName() == intOrStringName {
		if v, ok := obj["intVal"]; ok {
			return v
		}
		if v, ok := obj["strVal"]; ok {
			return v
		}
		return ""
	}
	if messageOpt(md, metav1.E_RawJson) {
		s, _ := obj["raw"].(string)
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(raw) == 0 {
			return map[string]any{}
		}
		v, err := decode(raw)
		if err != nil {
			return map[string]any{}
		}
		return v
	}
	if messageOpt(md, metav1.E_ListWrapper) {
		fd := md.Fields().ByName("items")
		if arr, ok := obj["items"]; ok && fd != nil {
			return fieldToKube(fd, arr)
		}
		return []any{}
	}
	for key, val := range obj {
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			continue
		}
		v := fieldToKube(fd, val)
		if fieldOpt(fd, metav1.E_Inline) {
			delete(obj, key)
			if o, ok := v.(map[string]any); ok {
				for k, iv := range o {
					obj[k] = iv
				}
			}
			continue
		}
		obj[key] = v
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if _, ok := obj[fd.JSONName()]; ok || !fieldOpt(fd, metav1.E_EmitEmpty) {
			continue
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			obj[fd.JSONName()] = ""
		case protoreflect.BoolKind:
			obj[fd.JSONName()] = false
		default:
			obj[fd.JSONName()] = json.Number("0")
		}
	}
	return obj
}

func fieldToKube(fd protoreflect.FieldDescriptor, val any) any {
	switch {
	case fd.IsMap():
		m, ok := val.(map[string]any)
		if !ok {
			return val
		}
		for k, v := range m {
			m[k] = valueToKube(fd.MapValue(), v)
		}
		return m
	case fd.IsList():
		arr, ok := val.([]any)
		if !ok {
			return val
		}
		for i, v := range arr {
			arr[i] = valueToKube(fd, v)
		}
		return arr
	default:
		return valueToKube(fd, val)
	}
}

func valueToKube(fd protoreflect.FieldDescriptor, val any) any {
	if is64(fd.Kind()) {
		if s, ok := val.(string); ok {
			return json.Number(s)
		}
		return val
	}
	if md := fd.Message(); md != nil && !isWellKnown(md) {
		if o, ok := val.(map[string]any); ok {
			return toKube(md, o)
		}
	}
	if s, ok := val.(string); ok && fd.Message() != nil && fieldOpt(fd, metav1.E_MicroTime) {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t.UTC().Format(rfc3339Micro)
		}
	}
	return val
}

func isWellKnown(md protoreflect.MessageDescriptor) bool {
	return strings.HasPrefix(string(md.FullName()), "google.protobuf.")
}

// fromKube rewrites Kubernetes JSON for message md into what protojson
// accepts, checking for unknown fields.
func fromKube(md protoreflect.MessageDescriptor, obj map[string]any, path string, opts Options) (map[string]any, error) {
	out := make(map[string]any, len(obj))
	var inline map[protoreflect.FieldDescriptor]map[string]any
	for key, val := range obj {
		fd := md.Fields().ByJSONName(key)
		p := join(path, key)
		if fd == nil {
			if ifd := inlineOwner(md, key); ifd != nil {
				if inline == nil {
					inline = map[protoreflect.FieldDescriptor]map[string]any{}
				}
				if inline[ifd] == nil {
					inline[ifd] = map[string]any{}
				}
				inline[ifd][key] = val
				continue
			}
			if opts.unknown != nil {
				*opts.unknown = append(*opts.unknown, p)
			}
			continue
		}
		if val == nil {
			continue
		}
		v, err := fieldFromKube(fd, val, p, opts)
		if err != nil {
			return nil, err
		}
		out[key] = v
	}
	for ifd, sub := range inline {
		v, err := fromKube(ifd.Message(), sub, path, opts)
		if err != nil {
			return nil, err
		}
		out[ifd.JSONName()] = v
	}
	return out, nil
}

// inlineOwner returns the field of md marked inline whose message (or one
// inlined into it) has a field of JSON name key.
func inlineOwner(md protoreflect.MessageDescriptor, key string) protoreflect.FieldDescriptor {
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Message() == nil || !fieldOpt(fd, metav1.E_Inline) {
			continue
		}
		if fd.Message().Fields().ByJSONName(key) != nil || inlineOwner(fd.Message(), key) != nil {
			return fd
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func fieldFromKube(fd protoreflect.FieldDescriptor, val any, path string, opts Options) (any, error) {
	switch {
	case fd.IsMap():
		m, ok := val.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("kubejson: %s: want an object, got %s", path, jsonType(val))
		}
		out := make(map[string]any, len(m))
		for k, v := range m {
			if v == nil {
				// Kubernetes keeps the key with a zero value ("k": null
				// in a Secret's data is an empty value).
				out[k] = zeroJSON(fd.MapValue())
				continue
			}
			nv, err := valueFromKube(fd.MapValue(), v, path+"["+k+"]", opts)
			if err != nil {
				return nil, err
			}
			out[k] = nv
		}
		return out, nil
	case fd.IsList():
		arr, ok := val.([]any)
		if !ok {
			return nil, fmt.Errorf("kubejson: %s: want an array, got %s", path, jsonType(val))
		}
		out := make([]any, 0, len(arr))
		for i, v := range arr {
			nv, err := valueFromKube(fd, v, fmt.Sprintf("%s[%d]", path, i), opts)
			if err != nil {
				return nil, err
			}
			out = append(out, nv)
		}
		return out, nil
	default:
		return valueFromKube(fd, val, path, opts)
	}
}

func valueFromKube(fd protoreflect.FieldDescriptor, val any, path string, opts Options) (any, error) {
	md := fd.Message()
	if md == nil || isWellKnown(md) {
		return val, nil
	}
	if messageOpt(md, metav1.E_RawJson) {
		b, err := json.Marshal(val)
		if err != nil {
			return nil, fmt.Errorf("kubejson: %s: %w", path, err)
		}
		return map[string]any{"raw": base64.StdEncoding.EncodeToString(b)}, nil
	}
	if messageOpt(md, metav1.E_ListWrapper) {
		arr, ok := val.([]any)
		if !ok {
			return nil, fmt.Errorf("kubejson: %s: want an array, got %s", path, jsonType(val))
		}
		items, err := fieldFromKube(md.Fields().ByName("items"), arr, path, opts)
		if err != nil {
			return nil, err
		}
		return map[string]any{"items": items}, nil
	}
	if md.FullName() == intOrStringName {
		switch v := val.(type) {
		case json.Number:
			return map[string]any{"intVal": v}, nil
		case string:
			return map[string]any{"strVal": v}, nil
		default:
			return nil, fmt.Errorf("kubejson: %s: want a number or a string, got %s", path, jsonType(val))
		}
	}
	o, ok := val.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("kubejson: %s: want an object, got %s", path, jsonType(val))
	}
	return fromKube(md, o, path, opts)
}

// zeroJSON is the protojson form of fd's zero value.
func zeroJSON(fd protoreflect.FieldDescriptor) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return map[string]any{}
	case protoreflect.StringKind, protoreflect.BytesKind:
		return ""
	case protoreflect.BoolKind:
		return false
	}
	return json.Number("0")
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
