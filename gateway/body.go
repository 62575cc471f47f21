package gateway

import (
	"bytes"
	"encoding/json"
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
