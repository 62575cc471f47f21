// Package gateway serves kplane's API on Kubernetes' REST paths, so that the
// unmodified kubectl and curl work against it: /version, health, discovery
// (legacy and aggregated), a minimal OpenAPI v3, CRUD, watch streams in
// Kubernetes' framing, Table responses, every PATCH type, and Status error
// bodies. Every request becomes a call to the API service's typed gRPC
// services, found by reflection from their google.api.http annotations.
//
// # Identity
//
// The gateway never authorizes. In impersonation mode (Config.Authenticator
// set, the upstream connection authenticated by a client certificate in
// group system:kplane-gateways) it authenticates the HTTP client — a
// verified TLS client certificate (CN user, O groups) or a bearer token
// checked by the Authenticator — and passes that user on in the
// kplane-impersonate-* metadata; requests without credentials get 401. In
// forwarding mode (no Authenticator) it forwards the Authorization header
// and the API service authenticates the token itself.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/apierrors"
	"github.com/kplane/kplane/services/apiserver/authn"
)

// MaxBodyBytes is the largest request body accepted (larger: 413).
const MaxBodyBytes = 3 << 20

// Config configures a Gateway.
type Config struct {
	// Conn is the connection to the API service.
	Conn grpc.ClientConnInterface
	// Authenticator, if set, authenticates HTTP clients' bearer tokens and
	// switches the gateway to impersonation mode (see the package doc).
	Authenticator *authn.Authenticator
	// Logger; nil discards.
	Logger *slog.Logger
}

// Gateway is an http.Handler.
type Gateway struct {
	conn    grpc.ClientConnInterface
	authn   *authn.Authenticator
	log     *slog.Logger
	tab     *table
	openapi *openAPI
	// openapiV2 is the protobuf OpenAPI v2 document.
	openapiV2 []byte
}

// New builds a Gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Conn == nil {
		return nil, errors.New("gateway: Config.Conn is required")
	}
	tab, err := buildResourceTable()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{conn: cfg.Conn, authn: cfg.Authenticator, log: log, tab: tab}
	g.openapi = newOpenAPI(tab)
	if g.openapiV2, err = openAPIV2(tab); err != nil {
		return nil, err
	}
	return g, nil
}

// ServeHTTP routes one request.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			g.log.Error("gateway: panic", "path", r.URL.Path, "panic", v)
			writeError(w, apierrors.FromError(fmt.Errorf("internal error: %v", v)))
		}
	}()
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch path {
	case "/version":
		w.Header().Set("Cache-Control", "no-cache, private")
		writeJSON(w, http.StatusOK, versionInfo())
		return
	case "/healthz", "/readyz", "/livez":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
		return
	case "/openapi/v2":
		if !acceptsOpenAPIV2Proto(r.Header.Get("Accept")) {
			writeError(w, notFound())
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(g.openapiV2)
		return
	}
	if strings.HasPrefix(path, "/openapi/v3") {
		g.serveOpenAPI(w, r, strings.TrimPrefix(strings.TrimPrefix(path, "/openapi/v3"), "/"))
		return
	}
	if path == "/api" || path == "/apis" {
		g.serveDiscovery(w, r, path)
		return
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var group, version string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		version, parts = parts[1], parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		group, version, parts = parts[1], parts[2], parts[3:]
	case len(parts) == 2 && parts[0] == "apis":
		g.serveGroup(w, parts[1])
		return
	default:
		writeError(w, notFound())
		return
	}
	if len(parts) == 0 {
		g.serveResourceList(w, group, version)
		return
	}
	ctx, err := g.outgoing(r)
	if err != nil {
		writeError(w, err)
		return
	}
	g.serveResource(ctx, w, r, group, version, parts)
}

func notFound() *apierrors.StatusError {
	return &apierrors.StatusError{Reason: apierrors.ReasonNotFound, Code: http.StatusNotFound,
		Message: "the server could not find the requested resource"}
}

func badRequest(msg string) *apierrors.StatusError {
	return &apierrors.StatusError{Reason: apierrors.ReasonBadRequest, Code: http.StatusBadRequest, Message: msg}
}

// outgoing returns the context for calls made on r's behalf, carrying the
// end user (impersonation mode) or the bearer token (forwarding mode).
func (g *Gateway) outgoing(r *http.Request) (context.Context, error) {
	ctx := r.Context()
	auth := r.Header.Get("Authorization")
	if g.authn == nil {
		if auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
		}
		return ctx, nil
	}
	var user, uid string
	var groups []string
	switch {
	case r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0:
		leaf := r.TLS.VerifiedChains[0][0]
		user, groups = leaf.Subject.CommonName, leaf.Subject.Organization
	case auth != "":
		u, err := g.authn.Authenticate(metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", auth)))
		if err != nil {
			return nil, err
		}
		user, uid, groups = u.Name, u.UID, u.Groups
	}
	if user == "" || user == "system:anonymous" {
		return nil, &apierrors.StatusError{Reason: apierrors.ReasonUnauthorized, Code: http.StatusUnauthorized, Message: "Unauthorized"}
	}
	kv := []string{authn.ImpersonateUserKey, user}
	if uid != "" {
		kv = append(kv, authn.ImpersonateUIDKey, uid)
	}
	for _, gr := range groups {
		if gr != "system:authenticated" {
			kv = append(kv, authn.ImpersonateGroupKey, gr)
		}
	}
	return metadata.AppendToOutgoingContext(ctx, kv...), nil
}

// statusOf renders err as a Kubernetes Status.
func statusOf(err error) *metav1.Status {
	se := apierrors.FromError(err)
	code := se.Code
	if code == 0 {
		code = apierrors.HTTPCode(se.Reason)
	}
	st := &metav1.Status{Status: "Failure", Message: se.Message, Reason: string(se.Reason), Code: code}
	if se.Name != "" || se.Group != "" || se.Kind != "" || len(se.Causes) > 0 || se.RetryAfterSeconds > 0 {
		d := &metav1.StatusDetails{Name: se.Name, Group: se.Group, Kind: se.Kind, RetryAfterSeconds: se.RetryAfterSeconds}
		for _, c := range se.Causes {
			d.Causes = append(d.Causes, &metav1.StatusCause{Reason: c.Type, Message: c.Message, Field: c.Field})
		}
		st.Details = d
	}
	return st
}

// writeError answers with a Status body.
func writeError(w http.ResponseWriter, err error) {
	st := statusOf(err)
	b, merr := kubejson.Marshal(st)
	if merr != nil {
		http.Error(w, st.Message, int(st.Code))
		return
	}
	b = withEmptyMetadata(b)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}

// withEmptyMetadata adds "metadata":{} as Kubernetes writes it on Status.
func withEmptyMetadata(b []byte) []byte {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return b
	}
	if _, ok := m["metadata"]; !ok {
		m["metadata"] = map[string]any{}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return b
	}
	return out
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}

// writeRaw answers with JSON bytes.
func writeRaw(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}

func versionInfo() map[string]string {
	return map[string]string{
		"major": "1", "minor": "32", "gitVersion": "v1.32.0-kplane",
		"gitCommit": "", "gitTreeState": "clean", "buildDate": "",
		"goVersion": runtime.Version(), "compiler": runtime.Compiler, "platform": runtime.GOOS + "/" + runtime.GOARCH,
	}
}
