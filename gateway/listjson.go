// This file holds the gateway's plain JSON lists: a GET of a built-in
// collection that asks for no Table (and no watch) is answered with the
// List the API service renders itself (kplane.listjson.v1), written as it
// comes, instead of decoding the typed list's protobuf and rendering it
// here. The API service keeps each object version's JSON, so a list of
// unchanged objects costs it a concatenation.

package gateway

import (
	"io"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/kplane/kplane/proto/apierrors"
	listjsonv1 "github.com/kplane/kplane/proto/kplane/listjson/v1"
)

// listsJSON reports whether the GET r on t is a list the JSON list
// serves: a collection, not a watch, no Table, and no HTTP trailers asked
// for (the typed path forwards the API service's trailers then).
func listsJSON(r *http.Request, t *target, info *requestInfo) bool {
	if t == nil || r.Method != http.MethodGet || t.watch || t.name != "" || t.sub != "" || info.table || t.res.Methods["list"] == nil {
		return false
	}
	if isTrue(r.URL.Query().Get("watch")) {
		return false
	}
	for _, te := range r.Header.Values("TE") {
		if strings.Contains(strings.ToLower(te), "trailers") {
			return false
		}
	}
	return true
}

// serveListJSON serves one list from the API service's JSON list, and
// reports false without writing anything when the API service does not
// serve that resource so (the caller then uses the typed list).
func (g *Gateway) serveListJSON(w http.ResponseWriter, r *http.Request, t *target, info *requestInfo) bool {
	// The query is read into the typed list's request, as its generated
	// handler reads it, so that the options and their errors are the same.
	typed := dynamicpb.NewMessage(t.res.Methods["list"].Input())
	// As the generated handlers' filters: the namespace comes from the
	// path when the path has one.
	filter := utilities.NewDoubleArray(nil)
	if t.namespace != "" {
		filter = utilities.NewDoubleArray([][]string{{"namespace"}})
		if fd := typed.Descriptor().Fields().ByName("namespace"); fd != nil {
			typed.Set(fd, protoreflect.ValueOfString(t.namespace))
		}
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, status.Errorf(codes.InvalidArgument, "%v", err))
		return true
	}
	if err := runtime.PopulateQueryParameters(typed, r.Form, filter); err != nil {
		writeError(w, status.Errorf(codes.InvalidArgument, "%v", err))
		return true
	}
	str := func(name protoreflect.Name) string {
		if fd := typed.Descriptor().Fields().ByName(name); fd != nil && fd.Kind() == protoreflect.StringKind {
			return typed.Get(fd).String()
		}
		return ""
	}
	req := &listjsonv1.ListJSONRequest{
		Group: t.res.Group, Version: t.res.Version, Resource: t.res.Resource, Namespace: str("namespace"),
		LabelSelector: str("label_selector"), FieldSelector: str("field_selector"),
		ResourceVersion: str("resource_version"), ResourceVersionMatch: str("resource_version_match"),
		Continue: str("continue"),
	}
	if fd := typed.Descriptor().Fields().ByName("limit"); fd != nil && fd.Kind() == protoreflect.Int64Kind {
		req.Limit = typed.Get(fd).Int()
	}
	md := info.md.Copy()
	if auth := r.Header.Get("Authorization"); auth != "" {
		// Forwarding mode: the API service authenticates the client's own
		// bearer token (impersonation mode removed the header).
		md = metadata.Join(md, metadata.Pairs("authorization", auth))
	}
	// Errors come before any piece of the List: the stream's first
	// receive answers them, and the headers (the call's FlowSchema and
	// priority level) are known by then.
	stream, err := g.lists.ListJSON(metadata.NewOutgoingContext(r.Context(), md), req)
	var first *listjsonv1.ListJSONResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if status.Code(err) == codes.Unimplemented {
		return false
	}
	var header metadata.MD
	if stream != nil {
		header, _ = stream.Header()
	}
	h := w.Header()
	if err != nil {
		// As the typed path's error handler: a refusal names the call's
		// FlowSchema and priority level too.
		for _, k := range []string{apierrors.FlowSchemaUIDHeader, apierrors.PriorityLevelUIDHeader} {
			if v := header.Get(k); len(v) > 0 {
				name, _ := outgoingHeader(k)
				h.Set(name, v[0])
			}
		}
		writeError(w, err)
		return true
	}
	for k, vs := range header {
		if name, ok := outgoingHeader(k); ok {
			for _, v := range vs {
				h.Add(name, v)
			}
		}
	}
	h.Set("Content-Type", "application/json")
	addWarnings(w, info.warnings)
	// Each piece is written as it comes: the API service holds the list's
	// seats until the last is sent, which its flow control paces by these
	// writes.
	for piece := first; ; {
		if _, err := w.Write(piece.GetData()); err != nil {
			if r.Context().Err() == nil {
				g.log.Debug("gateway: writing a list", "path", r.URL.Path, "err", err)
			}
			return true
		}
		if piece, err = stream.Recv(); err == io.EOF {
			return true
		} else if err != nil {
			// The status is written; only cutting the response short
			// tells the client its List is incomplete.
			g.log.Warn("gateway: a list ended early", "path", r.URL.Path, "err", err)
			panic(http.ErrAbortHandler)
		}
	}
}
