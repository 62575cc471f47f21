package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/apierrors"
)

// readBody reads at most MaxBodyBytes of r's body (413 beyond) and returns
// it as JSON, converting YAML bodies.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, badRequest("reading the request body: " + err.Error())
	}
	if len(b) > MaxBodyBytes {
		return nil, &apierrors.StatusError{Reason: apierrors.ReasonRequestEntityTooLarge, Code: http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("the request body is larger than %d bytes", MaxBodyBytes)}
	}
	return toJSON(r.Header.Get("Content-Type"), b)
}

// toJSON converts a body of the given content type to JSON and checks that
// it is well formed.
func toJSON(contentType string, b []byte) ([]byte, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == protobufType {
		return protobufToJSON(b)
	}
	if strings.Contains(mt, "yaml") {
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, badRequest("the request body is not valid YAML: " + err.Error())
		}
		b = j
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return b, nil
	}
	if !json.Valid(b) {
		var v any
		err := json.Unmarshal(b, &v)
		return nil, badRequest("the request body is not valid JSON: " + errString(err))
	}
	return b, nil
}

// protobufType is Kubernetes' protobuf encoding, which kubectl's typed
// clients (create namespace, run, ...) send.
const protobufType = "application/vnd.kubernetes.protobuf"

// protobufToJSON decodes a Kubernetes protobuf body of a built-in kind
// through client-go's scheme and re-encodes it as JSON.
func protobufToJSON(b []byte) ([]byte, error) {
	obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if err != nil {
		return nil, badRequest("the request body is not a valid Kubernetes protobuf object: " + err.Error())
	}
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	j, err := json.Marshal(obj)
	if err != nil {
		return nil, badRequest("the request body cannot be converted to JSON: " + err.Error())
	}
	return j, nil
}

func errString(err error) string {
	if err == nil {
		return "malformed"
	}
	return err.Error()
}

// decodeObject reads JSON into a new message of type mt under the
// fieldValidation directive (Strict, Warn — the default — or Ignore); the
// returned warnings go into Warning headers.
func decodeObject(b []byte, mt protoreflect.MessageType, validation string) (proto.Message, []string, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil, badRequest("the request body is empty")
	}
	var top any
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, nil, badRequest("the request body is not valid JSON: " + err.Error())
	}
	if _, ok := top.(map[string]any); !ok {
		return nil, nil, badRequest("the request body must be a JSON object")
	}
	msg := mt.New().Interface()
	switch validation {
	case "Ignore":
		if err := kubejson.Unmarshal(b, msg, kubejson.Options{DiscardUnknown: true}); err != nil {
			return nil, nil, decodeError(err)
		}
		return msg, nil, nil
	case "Strict":
		if err := kubejson.Unmarshal(b, msg, kubejson.Options{}); err != nil {
			return nil, nil, strictError(err)
		}
		return msg, nil, nil
	case "", "Warn":
		err := kubejson.Unmarshal(b, msg, kubejson.Options{})
		if err == nil {
			return msg, nil, nil
		}
		msg = mt.New().Interface()
		if err2 := kubejson.Unmarshal(b, msg, kubejson.Options{DiscardUnknown: true}); err2 != nil {
			return nil, nil, decodeError(err2)
		}
		return msg, []string{strings.TrimPrefix(err.Error(), "kubejson: ")}, nil
	default:
		return nil, nil, badRequest(fmt.Sprintf("fieldValidation: Unsupported value: %q: supported values: \"Ignore\", \"Strict\", \"Warn\"", validation))
	}
}

func strictError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "kubejson: ")
	if strings.HasPrefix(msg, "unknown field") {
		return badRequest("strict decoding error: " + msg)
	}
	return badRequest(msg)
}

func decodeError(err error) error {
	return badRequest("the request body does not decode: " + strings.TrimPrefix(err.Error(), "kubejson: "))
}

// addWarnings writes Warning headers as Kubernetes does.
func addWarnings(w http.ResponseWriter, warnings []string) {
	for _, s := range warnings {
		w.Header().Add("Warning", `299 - "`+strings.ReplaceAll(s, `"`, `'`)+`"`)
	}
}

// setQuery copies the URL query parameters that name fields of req (by
// their JSON names) into req; namespace and name come only from the path.
func setQuery(req proto.Message, q map[string][]string) error {
	m := req.ProtoReflect()
	for key, vals := range q {
		if key == "namespace" || key == "name" || len(vals) == 0 {
			continue
		}
		fd := m.Descriptor().Fields().ByJSONName(key)
		if fd == nil {
			continue
		}
		if err := setField(m, fd, vals); err != nil {
			return badRequest(fmt.Sprintf("%s: %v", key, err))
		}
	}
	return nil
}

var errUnsupportedField = errors.New("unsupported parameter type")

func setField(m protoreflect.Message, fd protoreflect.FieldDescriptor, vals []string) error {
	if fd.IsList() {
		if fd.Kind() != protoreflect.StringKind {
			return errUnsupportedField
		}
		l := m.Mutable(fd).List()
		for _, v := range vals {
			l.Append(protoreflect.ValueOfString(v))
		}
		return nil
	}
	v := vals[len(vals)-1]
	switch fd.Kind() {
	case protoreflect.StringKind:
		m.Set(fd, protoreflect.ValueOfString(v))
	case protoreflect.Int64Kind, protoreflect.Int32Kind:
		var n int64
		if _, err := fmt.Sscan(v, &n); err != nil || fmt.Sprint(n) != strings.TrimPrefix(v, "+") {
			return fmt.Errorf("invalid integer %q", v)
		}
		if fd.Kind() == protoreflect.Int32Kind {
			m.Set(fd, protoreflect.ValueOfInt32(int32(n)))
		} else {
			m.Set(fd, protoreflect.ValueOfInt64(n))
		}
	case protoreflect.BoolKind:
		switch strings.ToLower(v) {
		case "true", "1", "":
			m.Set(fd, protoreflect.ValueOfBool(true))
		case "false", "0":
			m.Set(fd, protoreflect.ValueOfBool(false))
		default:
			return fmt.Errorf("invalid boolean %q", v)
		}
	default:
		return errUnsupportedField
	}
	return nil
}

// setString sets a string field by proto name if req has it.
func setString(req proto.Message, name, v string) {
	m := req.ProtoReflect()
	if fd := m.Descriptor().Fields().ByName(protoreflect.Name(name)); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
		m.Set(fd, protoreflect.ValueOfString(v))
	}
}

// setMessage sets the field of req whose type is v's.
func setMessage(req proto.Message, v proto.Message) bool {
	m := req.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Message() != nil && fd.Message().FullName() == v.ProtoReflect().Descriptor().FullName() && !fd.IsList() {
			m.Set(fd, protoreflect.ValueOfMessage(v.ProtoReflect()))
			return true
		}
	}
	return false
}

// onlyMessage returns the single message field of a response, nil if unset.
func onlyMessage(resp proto.Message) proto.Message {
	m := resp.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Message() != nil && !fd.IsList() && m.Has(fd) {
			return m.Get(fd).Message().Interface()
		}
	}
	return nil
}
