// This file reads request bodies as kube-apiserver does: the size limit, the
// media types each verb accepts, protobuf bodies turned into JSON, and
// strict or warned decoding with Kubernetes' wording of unknown, duplicate
// and mistyped fields.

package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/kubejson"
)

// readBody reads at most MaxBodyBytes of r's body (413 beyond) within
// timeout (504 beyond, the connection then closed) and returns it as JSON,
// converting YAML and protobuf bodies. A body in a media type the request's
// verb does not take is refused with 415, as Kubernetes does.
func readBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) ([]byte, error) {
	rc := http.NewResponseController(w)
	bounded := rc.SetReadDeadline(time.Now().Add(timeout)) == nil
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The deadline stays in the past, so the server's drain of the
			// rest of the body fails at once and the connection closes.
			w.Header().Set("Connection", "close")
			return nil, &apierrors.StatusError{Reason: apierrors.ReasonTimeout, Code: http.StatusGatewayTimeout,
				Message: fmt.Sprintf("Timeout: the request body did not arrive within %s", timeout)}
		}
		return nil, badRequest("reading the request body: " + err.Error())
	}
	if bounded {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if len(b) > MaxBodyBytes {
		return nil, &apierrors.StatusError{Reason: apierrors.ReasonRequestEntityTooLarge, Code: http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("the request body is larger than %d bytes", MaxBodyBytes)}
	}
	ct := r.Header.Get("Content-Type")
	if err := checkMediaType(r.Method, ct, len(b)); err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(ct); mt == applyPatchType {
		if err := checkApplyYAML(w, r, b); err != nil {
			return nil, err
		}
	}
	return toJSON(ct, b)
}

// checkApplyYAML decodes an applied configuration (YAML) strictly, as
// kube-apiserver's apply handler does under fieldValidation Strict or Warn:
// a key given twice in a map is refused ("error strict decoding YAML:
// ... line 9: key "foo" already set in map") or warned about, line by line.
func checkApplyYAML(w http.ResponseWriter, r *http.Request, b []byte) error {
	fv := r.URL.Query().Get("fieldValidation")
	if fv != "Strict" && fv != "Warn" && fv != "" {
		return nil
	}
	err := yaml.UnmarshalStrict(b, &map[string]any{})
	if err == nil {
		return nil
	}
	if fv == "Strict" {
		return badRequest("error strict decoding YAML: " + err.Error())
	}
	msg := err.Error()
	for _, p := range []string{"error converting YAML to JSON: yaml: unmarshal errors:\n", "yaml: unmarshal errors:\n"} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			var lines []string
			for _, l := range strings.Split(rest, "\n") {
				lines = append(lines, strings.TrimSpace(l))
			}
			addWarnings(w, lines)
			return nil
		}
	}
	addWarnings(w, []string{msg})
	return nil
}

// acceptedMediaTypes are the media types a body of a request with method
// may come in, in the order Kubernetes lists them when it refuses another:
// an object (create, replace, delete options) or a patch.
func acceptedMediaTypes(method string) []string {
	if method == http.MethodPatch {
		return []string{jsonPatchType, mergePatchType, strategicPatchType, applyPatchType}
	}
	return []string{"application/json", "application/yaml", protobufType}
}

// checkMediaType refuses with 415 a body whose Content-Type the verb does not
// take. A create or replace without one is JSON; a DELETE without a body has
// no type to check.
func checkMediaType(method, contentType string, bodyLen int) error {
	accepted := acceptedMediaTypes(method)
	if method == http.MethodDelete && bodyLen == 0 {
		return nil
	}
	if contentType == "" && method != http.MethodPatch {
		return nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err == nil && slices.Contains(accepted, mt) {
		return nil
	}
	return &apierrors.StatusError{Reason: apierrors.ReasonUnsupportedMediaType, Code: http.StatusUnsupportedMediaType,
		Message: "the body of the request was in an unknown format - accepted media types include: " + strings.Join(accepted, ", ")}
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
// through client-go's scheme (apiextensions.k8s.io's, which the
// apiextensions clientset sends protobuf in too, for a
// CustomResourceDefinition) and re-encodes it as JSON.
func protobufToJSON(b []byte) ([]byte, error) {
	obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if runtime.IsNotRegisteredError(err) {
		// Built per call: CRD writes are rare, and it keeps no state.
		s := runtime.NewScheme()
		if aerr := kubeapiextv1.AddToScheme(s); aerr == nil {
			obj, gvk, err = serializer.NewCodecFactory(s).UniversalDeserializer().Decode(b, nil, nil)
		}
	}
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
// returned warnings go into Warning headers. Under Strict every unknown and
// duplicate field is named in one error; under Warn each is a warning (the
// last of duplicates wins, as in Kubernetes).
func decodeObject(b []byte, mt protoreflect.MessageType, validation string) (proto.Message, []string, error) {
	switch validation {
	case "", "Strict", "Warn", "Ignore":
	default:
		return nil, nil, badRequest(fmt.Sprintf("fieldValidation: Unsupported value: %q: supported values: \"Ignore\", \"Strict\", \"Warn\"", validation))
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil, badRequest("the request body is empty")
	}
	var top any
	dups, err := sigsjson.UnmarshalStrict(b, &top, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return nil, nil, badRequest("the request body is not valid JSON: " + err.Error())
	}
	doc, ok := top.(map[string]any)
	if !ok {
		return nil, nil, badRequest("the request body must be a JSON object")
	}
	msg := mt.New().Interface()
	if validation == "Ignore" {
		if err := kubejson.Unmarshal(b, msg, kubejson.Options{DiscardUnknown: true}); err != nil {
			if kerr := kubeTypeError(b, doc); kerr != nil {
				return nil, nil, badRequest(kerr.Error())
			}
			return nil, nil, decodeError(err)
		}
		return msg, nil, nil
	}
	err = kubejson.Unmarshal(b, msg, kubejson.Options{})
	var unknown *kubejson.UnknownFieldsError
	if err != nil && !errors.As(err, &unknown) {
		if kerr := kubeTypeError(b, doc); kerr != nil {
			return nil, nil, badRequest(kerr.Error())
		}
		if validation == "Strict" {
			return nil, nil, badRequest(strings.TrimPrefix(err.Error(), "kubejson: "))
		}
		return nil, nil, decodeError(err)
	}
	if unknown == nil && len(dups) == 0 && !hidesFields(doc) {
		return msg, nil, nil
	}
	problems := strictProblems(b, doc, dups, unknown)
	if len(problems) == 0 {
		return msg, nil, nil
	}
	if validation == "Strict" {
		return nil, nil, badRequest("strict decoding error: " + strings.Join(problems, ", "))
	}
	if unknown != nil {
		msg = mt.New().Interface()
		if err := kubejson.Unmarshal(b, msg, kubejson.Options{DiscardUnknown: true}); err != nil {
			return nil, nil, decodeError(err)
		}
	}
	return msg, problems, nil
}

// kubeObject returns a new object of the Kubernetes Go type for the body's
// apiVersion and kind (client-go's kinds and apiextensions'
// CustomResourceDefinition), or nil when there is none.
func kubeObject(doc map[string]any) runtime.Object {
	apiVersion, _ := doc["apiVersion"].(string)
	kind, _ := doc["kind"].(string)
	gvk := schema.FromAPIVersionAndKind(apiVersion, kind)
	if gvk == kubeapiextv1.SchemeGroupVersion.WithKind("CustomResourceDefinition") {
		return &kubeapiextv1.CustomResourceDefinition{}
	}
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil
	}
	return obj
}

// hidesFields says whether doc is a kind part of whose body kubejson keeps
// as a JSON document without looking into it (a CRD's openAPIV3Schema):
// its unknown fields are then found through the Go type.
func hidesFields(doc map[string]any) bool {
	return doc["apiVersion"] == kubeapiextv1.SchemeGroupVersion.String() && doc["kind"] == "CustomResourceDefinition"
}

// kubeTypeError is the error Kubernetes' decoder gives a body that does not
// fit its kind's type (a boolean where a string goes, ...), in its words; nil
// when the Go type takes it or the kind is unknown.
func kubeTypeError(b []byte, doc map[string]any) error {
	obj := kubeObject(doc)
	if obj == nil {
		return nil
	}
	return sigsjson.UnmarshalCaseSensitivePreserveInts(b, obj)
}

// strictProblems lists a body's unknown and duplicate fields as Kubernetes
// does: decoded strictly into the kind's Kubernetes Go type, which names
// them all in the document's order. Fields Kubernetes has but kplane does not
// serve follow, as unknown fields. A body whose kind client-go does not know
// (or that its types refuse) gets kplane's own list: unknown fields by path,
// then duplicates.
func strictProblems(b []byte, doc map[string]any, dups []error, unknown *kubejson.UnknownFieldsError) []string {
	var problems []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			problems = append(problems, s)
		}
	}
	if obj := kubeObject(doc); obj != nil {
		if errs, err := sigsjson.UnmarshalStrict(b, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields); err == nil {
			for _, e := range errs {
				add(e.Error())
			}
		}
	}
	if unknown != nil {
		for _, p := range unknown.Paths {
			add(fmt.Sprintf("unknown field %q", p))
		}
	}
	for _, e := range dups {
		add(e.Error())
	}
	return problems
}

func decodeError(err error) error {
	return badRequest("the request body does not decode: " + strings.TrimPrefix(err.Error(), "kubejson: "))
}

// addWarnings writes Warning headers as Kubernetes does.
func addWarnings(w http.ResponseWriter, warnings []string) {
	for _, s := range warnings {
		if v := apierrors.WarningValue(s); v != "" {
			w.Header().Add("Warning", v)
		}
	}
}
