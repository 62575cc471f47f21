// Package gateway serves kplane's API on Kubernetes' REST paths, so that the
// unmodified kubectl and curl work against it.
//
// The REST paths are served by the grpc-gateway v2 handlers generated from
// the services' google.api.http rules (proto/kplane/*/v1/*.pb.gw.go), on a
// runtime.ServeMux whose extension points add Kubernetes' behaviour: a
// Marshaler for Kubernetes JSON, watch framing and Tables (marshal.go), an
// error handler writing Status bodies, a forward-response option and
// rewriter (rest.go). In front of it, one http.Handler adds what no
// generated handler can give: /version, health, discovery (legacy and
// aggregated), a minimal OpenAPI, identity, body limits and YAML/protobuf
// bodies, ?watch=true on list paths (sent to the generated /watch/ routes),
// every PATCH type and server-side apply (patch.go), DELETE on a
// collection (collection.go), and the exec, attach and portforward
// upgrades, carried as bytes to the API service's StreamPod (podstream.go).
//
// # Identity
//
// The gateway never authorizes. In impersonation mode (Config.Authenticator
// set, the upstream connection authenticated by a client certificate in
// group system:kplane-gateways) it authenticates the HTTP client — a
// verified TLS client certificate (CN user, O groups) or a bearer token
// checked by the Authenticator — and passes that user on in the
// kplane-impersonate-* metadata; requests without credentials get 401. A
// bearer token the gateway does not know (a ServiceAccount token) goes on
// in the kplane-forwarded-token metadata, for the API service to
// authenticate. In
// forwarding mode (no Authenticator) it forwards the Authorization header
// and the API service authenticates the token itself. In both modes
// Kubernetes' Impersonate-User, -Group and -Uid headers (kubectl --as) go on
// as impersonate-* metadata; the API service checks that the caller may
// impersonate.
package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/identity"
	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	listjsonv1 "github.com/kplane/kplane/proto/kplane/listjson/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	watchstreamv1 "github.com/kplane/kplane/proto/kplane/watchstream/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// MaxBodyBytes is the largest request body accepted (larger: 413).
const MaxBodyBytes = 3 << 20

// Config configures a Gateway.
type Config struct {
	// Conn is the connection to the API service.
	Conn grpc.ClientConnInterface
	// Authenticator, if set, authenticates HTTP clients' bearer tokens and
	// switches the gateway to impersonation mode (see the package doc).
	Authenticator Authenticator
	// BodyTimeout bounds how long a request body may take to arrive
	// (default 60 s, kube-apiserver's request timeout): a client trickling
	// its body gets 504 and its connection closed instead of holding a
	// goroutine forever.
	BodyTimeout time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// TracerProvider and MeterProvider instrument every HTTP request (a
	// span continuing a traceparent header, http.server.* metrics); nil
	// uses the global ones. Conn should carry telemetry.ClientHandler so
	// the API service's spans join the request's trace.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Metrics, if set, is served at /metrics on the API endpoint (the
	// gateway's own Prometheus metrics), as kube-apiserver serves its own:
	// to callers RBAC lets get the non-resource path /metrics (Kubernetes'
	// system:monitoring role). Unset, /metrics is 404.
	Metrics http.Handler
	// Registerer, if set, receives apiserver_request_duration_seconds,
	// the histogram of every request's latency by verb, resource and scope
	// that Kubernetes' API call latency SLO is measured from
	// (requestmetrics.go); Metrics should serve it.
	Registerer prometheus.Registerer
}

// Authenticator checks the bearer tokens the gateway authenticates itself
// in impersonation mode: a static token file's (tokenfile.Tokens, as
// Serve reads --token-auth-file).
type Authenticator interface {
	// StaticToken returns the user token names, or false if the token is
	// not one of the Authenticator's (the gateway then forwards it for the
	// API service to authenticate).
	StaticToken(token string) (identity.User, bool)
}

// Gateway is an http.Handler.
type Gateway struct {
	authn       Authenticator
	reviews     authorizationv1.AuthorizationServiceClient
	issuer      authenticationv1.AuthenticationServiceClient
	bodyTimeout time.Duration
	log         *slog.Logger
	tab         *table
	rest        *runtime.ServeMux
	openapi     *openAPI
	// managers are the server-side apply field managers.
	managers *fieldManagers
	// crManagers are custom resources' field managers.
	crManagers *customManagers
	// openapiV2 is the built-in part of the protobuf OpenAPI v2 document.
	openapiV2 []byte
	// crdOpenAPI holds the OpenAPI documents with the custom resources in
	// (crdopenapi.go).
	crdOpenAPI *crdOpenAPI
	// rendered holds recently rendered large watch objects (rendercache.go).
	rendered *renderCache
	// traced is serve wrapped in otelhttp.
	traced http.Handler
	// metrics serves /metrics (Config.Metrics); nil: 404.
	metrics http.Handler
	// requests records apiserver_request_duration_seconds; nil: not
	// recorded (Config.Registerer unset).
	requests *requestMetrics
	// lists serves plain JSON lists (listjson.go).
	lists listjsonv1.ListJSONServiceClient
	// watches serves plain JSON watches (watchjson.go).
	watches watchstreamv1.WatchStreamServiceClient
	// pods carries exec, attach and portforward (podstream.go).
	pods corev1.PodServiceClient
	// dyn serves custom resources (customresources.go).
	dyn dynamicv1.ResourceServiceClient
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
	managers, err := newFieldManagers()
	if err != nil {
		return nil, err
	}
	conn := newFreshConn(cfg.Conn)
	g := &Gateway{authn: cfg.Authenticator, reviews: authorizationv1.NewAuthorizationServiceClient(conn), issuer: authenticationv1.NewAuthenticationServiceClient(conn), bodyTimeout: cfg.BodyTimeout, log: log, tab: tab, managers: managers, crManagers: newCustomManagers(), metrics: cfg.Metrics, pods: corev1.NewPodServiceClient(conn), watches: watchstreamv1.NewWatchStreamServiceClient(conn),
		lists: listjsonv1.NewListJSONServiceClient(conn),
		dyn:   dynamicv1.NewResourceServiceClient(conn)}
	if g.bodyTimeout <= 0 {
		g.bodyTimeout = 60 * time.Second
	}
	g.rendered = newRenderCache(renderCacheMaxBytes)
	if g.rest, err = newRESTMux(conn, tab, g.rewrite); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.openapi = newOpenAPI(tab)
	g.crdOpenAPI = &crdOpenAPI{}
	if g.openapiV2, err = openAPIV2(tab); err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		if g.requests, err = newRequestMetrics(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("gateway: request metrics: %w", err)
		}
	}
	g.traced = telemetry.HTTPHandler(http.HandlerFunc(g.serve), "gateway", cfg.TracerProvider, cfg.MeterProvider)
	return g, nil
}

// ServeHTTP serves one request, traced (hop 01 of a pod's creation).
// With Config.Registerer set its latency is recorded.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.requests != nil {
		defer g.requests.observe(r, time.Now())
	}
	g.traced.ServeHTTP(w, r)
}

// serve answers what the generated handlers cannot (version, health,
// OpenAPI, discovery), establishes the caller's identity and reads the
// body, then hands the request to the PATCH, collection-DELETE or watch
// handlers, or to the grpc-gateway mux.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			g.log.Error("gateway: panic", "path", r.URL.Path, "panic", v)
			writeError(w, apierrors.FromError(fmt.Errorf("internal error: %v", v)))
		}
	}()
	auditID := r.Header.Get("Audit-Id")
	if auditID == "" {
		auditID = uuid.NewString()
	}
	w.Header().Set("Audit-Id", auditID)
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
	}
	if isDiscoveryPath(path) || (path == "/metrics" && g.metrics != nil) {
		if err := g.authorizeDiscovery(r, path); err != nil {
			writeError(w, err)
			return
		}
	}
	if path == openIDConfigPath || path == jwksPath {
		g.serveIssuerDiscovery(w, r, path, auditID)
		return
	}
	if path == "/metrics" && g.metrics != nil {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, methodNotAllowed())
			return
		}
		g.metrics.ServeHTTP(w, r)
		return
	}
	switch path {
	case "/openapi/v2":
		g.serveOpenAPIV2(w, r)
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
		g.serveGroup(w, r, parts[1])
		return
	default:
		writeError(w, notFound())
		return
	}
	if len(parts) == 0 {
		g.serveResourceList(w, r, group, version)
		return
	}
	md, err := g.identity(r)
	if err != nil {
		writeError(w, err)
		return
	}
	md = withImpersonation(md, r.Header)
	md = withOrigin(md, r, auditID)
	q := r.URL.Query()
	info := &requestInfo{md: md, fieldValidation: q.Get("fieldValidation"), table: wantsTable(r), includeObject: q.Get("includeObject")}
	switch info.fieldValidation {
	case "", "Strict", "Warn", "Ignore":
	default:
		writeError(w, badRequest(fmt.Sprintf("fieldValidation: Unsupported value: %q: supported values: \"Ignore\", \"Strict\", \"Warn\"", info.fieldValidation)))
		return
	}
	r = r.WithContext(withInfo(r.Context(), info))
	if group != "" && g.tab.byGV[group+"/"+version] == nil {
		// Not a built-in group version: a custom resource's, or nothing.
		g.serveCustom(w, r, group, version, parts, info)
		return
	}
	if ns, name, sub, ok := podStreamTarget(group, version, parts); ok {
		g.servePodStream(w, r, md, ns, name, sub)
		return
	}
	t := g.parseTarget(group, version, parts)
	if t != nil {
		info.name = t.name
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		body, err := readBody(w, r, g.bodyTimeout)
		if err != nil {
			writeError(w, err)
			return
		}
		r.Body = &requestBody{Reader: bytes.NewReader(body), data: body, info: info}
		r.ContentLength = int64(len(body))
		if r.Method != http.MethodPatch {
			r.Header.Set("Content-Type", "application/json")
		}
	}
	switch {
	case t == nil:
	case r.Method == http.MethodPatch && t.name != "":
		g.patch(w, r, t, info)
		return
	case r.Method == http.MethodDelete && t.name == "":
		g.deleteCollection(w, r, t, info)
		return
	case r.Method == http.MethodPost && t.name == "" && g.managesFields(t):
		if err := g.recordCreate(r, t, info); err != nil {
			writeError(w, err)
			return
		}
	case r.Method == http.MethodPut && t.name != "" && g.managesFields(t):
		if err := g.replace(w, r, t, info); err != nil {
			writeError(w, err)
		}
		return
	case r.Method == http.MethodGet && !t.watch && (t.sub == "status" || t.sub == "approval" || t.sub == "ephemeralcontainers") && t.name != "":
		// The status, approval and ephemeralcontainers subresources read
		// the whole object, as in Kubernetes.
		if (t.sub == "status" && !t.hasStatus()) || (t.sub == "approval" && t.res.Methods["updateApproval"] == nil) ||
			(t.sub == "ephemeralcontainers" && t.res.Methods["updateEphemeralContainers"] == nil) {
			writeError(w, notFound())
			return
		}
		u := *r.URL
		u.Path, u.RawPath = t.itemPath(""), ""
		r.URL = &u
	case streamsJSON(r, t, info):
		g.serveWatchJSON(w, r, t, info)
		return
	case listsJSON(r, t, info):
		if g.serveListJSON(w, r, t, info) {
			return
		}
	case r.Method == http.MethodGet && !t.watch && (t.sub == "" || t.name == "") && isTrue(q.Get("watch")):
		t.toWatch(r)
	}
	g.rest.ServeHTTP(w, r)
}

func isTrue(s string) bool { return s == "true" || s == "1" }

func notFound() *apierrors.StatusError {
	return &apierrors.StatusError{Reason: apierrors.ReasonNotFound, Code: http.StatusNotFound,
		Message: "the server could not find the requested resource"}
}

func badRequest(msg string) *apierrors.StatusError {
	return &apierrors.StatusError{Reason: apierrors.ReasonBadRequest, Code: http.StatusBadRequest, Message: msg}
}

// identity returns the metadata that carries r's caller to the API service:
// the end user (impersonation mode; r's Authorization header is then
// dropped, so that only the gateway's own credentials reach the API
// service) or nothing (forwarding mode: the generated handlers forward the
// Authorization header themselves).
func (g *Gateway) identity(r *http.Request) (metadata.MD, error) {
	if g.authn == nil {
		return nil, nil
	}
	auth := r.Header.Get("Authorization")
	r.Header.Del("Authorization")
	var user, uid string
	var groups []string
	switch {
	case r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0:
		leaf := r.TLS.VerifiedChains[0][0]
		user, groups = leaf.Subject.CommonName, leaf.Subject.Organization
	case auth != "":
		scheme, token, _ := strings.Cut(strings.TrimSpace(auth), " ")
		token = strings.TrimSpace(token)
		if !strings.EqualFold(scheme, "Bearer") || token == "" {
			return nil, &apierrors.StatusError{Reason: apierrors.ReasonUnauthorized, Code: http.StatusUnauthorized, Message: "Unauthorized"}
		}
		u, ok := g.authn.StaticToken(token)
		if !ok {
			// Not one of the gateway's static tokens (a ServiceAccount
			// token): the API service, which holds the verification keys
			// and the ServiceAccounts, authenticates it.
			return metadata.Pairs(identity.ForwardedTokenKey, token), nil
		}
		user, uid, groups = u.Name, u.UID, u.Groups
	}
	if user == "" || user == "system:anonymous" {
		return nil, &apierrors.StatusError{Reason: apierrors.ReasonUnauthorized, Code: http.StatusUnauthorized, Message: "Unauthorized"}
	}
	md := metadata.Pairs(identity.ImpersonateUserKey, user)
	if uid != "" {
		md.Append(identity.ImpersonateUIDKey, uid)
	}
	for _, gr := range groups {
		if gr != "system:authenticated" {
			md.Append(identity.ImpersonateGroupKey, gr)
		}
	}
	return md, nil
}

// withOrigin adds, in impersonation mode (md carries the end user), what
// the API service's audit log records of the HTTP request: the audit ID
// the client is answered in the Audit-Id header, the request URI, the
// User-Agent and the client's addresses (X-Forwarded-For's, then the
// peer's), as kube-apiserver records them. In forwarding mode the API
// service records the gateway's connection instead.
func withOrigin(md metadata.MD, r *http.Request, auditID string) metadata.MD {
	if len(md.Get(identity.ImpersonateUserKey)) == 0 && len(md.Get(identity.ForwardedTokenKey)) == 0 {
		return md
	}
	var ips []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		for _, ip := range strings.Split(v, ",") {
			if ip = strings.TrimSpace(ip); net.ParseIP(ip) != nil {
				ips = append(ips, ip)
			}
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil && !slices.Contains(ips, host) {
		ips = append(ips, host)
	}
	md.Set(identity.ForwardedAuditIDKey, auditID)
	md.Set(identity.ForwardedRequestURIKey, r.URL.RequestURI())
	md.Set(identity.ForwardedUserAgentKey, r.UserAgent())
	md.Set(identity.ForwardedForKey, strings.Join(ips, ","))
	return md
}

// withImpersonation adds Kubernetes' Impersonate-* headers (kubectl --as,
// --as-group, --as-uid) to md under the metadata keys the API service reads
// them from; the API service checks that the caller may impersonate.
func withImpersonation(md metadata.MD, h http.Header) metadata.MD {
	add := func(key string, values []string) {
		if len(values) == 0 {
			return
		}
		if md == nil {
			md = metadata.MD{}
		}
		md.Append(key, values...)
	}
	add(identity.ActAsUserKey, h.Values("Impersonate-User"))
	add(identity.ActAsGroupKey, h.Values("Impersonate-Group"))
	add(identity.ActAsUIDKey, h.Values("Impersonate-Uid"))
	for k, v := range h {
		if extra, ok := strings.CutPrefix(k, "Impersonate-Extra-"); ok {
			add(identity.ActAsExtraKeyPrefix+strings.ToLower(extra), v)
		}
	}
	return md
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
			d.Causes = append(d.Causes, &metav1.StatusCause{Type: c.Type, Message: c.Message, Field: c.Field})
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
	if d := st.GetDetails(); d.GetRetryAfterSeconds() > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(d.GetRetryAfterSeconds())))
	}
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

func versionInfo() map[string]string {
	return map[string]string{
		"major": "1", "minor": "32", "gitVersion": "v1.32.0-kplane",
		"gitCommit": "", "gitTreeState": "clean", "buildDate": "",
		"goVersion": goruntime.Version(), "compiler": goruntime.Compiler, "platform": goruntime.GOOS + "/" + goruntime.GOARCH,
	}
}
