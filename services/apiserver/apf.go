// This file holds API Priority and Fairness as the API service enforces it
// on unary calls: each call is classified into the first FlowSchema (by
// matchingPrecedence, then name) whose rules match its user, verb and
// resource, and so into that schema's priority level. Exempt levels run
// the call at once; a limited level gets its share of the server's
// concurrency (--max-requests-inflight + --max-mutating-requests-inflight,
// divided by nominalConcurrencyShares) and queues calls with
// k8s.io/apiserver's shuffle-sharded fair queuing, or rejects them, with
// 429 TooManyRequests and Retry-After, as kube-apiserver does. The
// classifier is rebuilt from the watch caches at every change of a
// flowcontrol object, so classifying a call walks precomputed data only.
package apiserver

import (
	"context"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	kubeflowcontrolv1 "k8s.io/api/flowcontrol/v1"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset"
	fqmetrics "k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fqrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"

	"github.com/kplane/kplane/proto/apierrors"
	flowcontrolv1 "github.com/kplane/kplane/proto/kplane/flowcontrol/v1"
	listjsonv1 "github.com/kplane/kplane/proto/kplane/listjson/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

const (
	// maxQueueWait bounds how long a call waits in a queue: kube-apiserver
	// waits at most a quarter of the request timeout, and 15 s.
	maxQueueWait = 15 * time.Second
)

// apfMethod is what a gRPC method is to the classifier.
type apfMethod struct {
	verb, group, resource string // resource includes "/subresource"
	namespaced            bool
}

// apfMethods maps every served resource's methods to their verb and
// resource, from the generated services' naming (Get<Kind>,
// List<Plural>, Update<Kind>Status, ...).
func (s *Server) apfMethods() map[string]apfMethod {
	out := map[string]apfMethod{}
	for svc, info := range s.grpc.GetServiceInfo() {
		pkg, kindSvc, ok := cutLast(svc, '.')
		kind, isKindSvc := strings.CutSuffix(kindSvc, "Service")
		if !ok || !isKindSvc {
			continue
		}
		var r *resourceInfo
		for _, ri := range s.resources {
			if ri.Kind == kind && string(ri.New().ProtoReflect().Descriptor().ParentFile().Package()) == pkg {
				r = ri
			}
		}
		if r == nil {
			continue
		}
		plural := ""
		for _, m := range info.Methods {
			if rest, ok := strings.CutPrefix(m.Name, "List"); ok {
				plural = rest
			}
		}
		for _, m := range info.Methods {
			verb, sub := apfVerb(m.Name, kind, plural)
			if verb == "" {
				continue
			}
			res := r.Resource
			if sub != "" {
				res += "/" + sub
			}
			out["/"+svc+"/"+m.Name] = apfMethod{verb: verb, group: r.Group, resource: res, namespaced: r.Namespaced}
		}
	}
	return out
}

func cutLast(s string, sep byte) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, sep)
	if i < 0 {
		return "", s, false
	}
	return s[:i], s[i+1:], true
}

// apfVerb is a method's Kubernetes verb and subresource.
func apfVerb(method, kind, plural string) (verb, sub string) {
	for _, v := range []struct{ prefix, verb string }{
		{"DeleteCollection", "deletecollection"}, {"Get", "get"}, {"List", "list"}, {"Watch", "watch"},
		{"Create", "create"}, {"Update", "update"}, {"Patch", "patch"}, {"Delete", "delete"},
	} {
		rest, ok := strings.CutPrefix(method, v.prefix)
		if !ok {
			continue
		}
		switch {
		case rest == kind || (plural != "" && rest == plural):
			return v.verb, ""
		case strings.HasPrefix(rest, kind):
			return v.verb, strings.ToLower(strings.TrimPrefix(rest, kind))
		}
	}
	return "", ""
}

// apfConfig is one immutable classification of calls: the FlowSchemas in
// matching order, each with its level.
type apfConfig struct {
	schemas []*apfSchema
}

type apfSchema struct {
	name, uid     string
	level         *apfLevel
	distinguisher kubeflowcontrolv1.FlowDistinguisherMethodType
	rules         []apfRule
}

type apfRule struct {
	users, groups []string // "*" matches all
	sas           []saSubject
	resources     []*flowcontrolv1.ResourcePolicyRule
	nonResource   []*flowcontrolv1.NonResourcePolicyRule
}

type saSubject struct{ namespace, name string }

// apfLevel is one priority level: exempt, or limited with its queue set.
type apfLevel struct {
	name, uid string
	exempt    bool
	qs        fq.QueueSet
	// cl is the level's nominal concurrency limit (seats); queuing says
	// it queues (else a request over the limit is rejected at once).
	cl      int
	queuing bool
}

// apfEngine holds the current configuration and the queue sets, which
// outlive configurations (a level keeps its queues across changes).
type apfEngine struct {
	serverCL  int
	queueWait time.Duration
	methods   map[string]apfMethod
	factory   fq.QueueSetFactory
	cfg       atomic.Pointer[apfConfig]
	mu        sync.Mutex
	levels    map[string]*apfLevel
}

func newAPFEngine(serverCL int, requestTimeout time.Duration, methods map[string]apfMethod) *apfEngine {
	wait := maxQueueWait
	if requestTimeout > 0 && requestTimeout/4 < wait {
		wait = requestTimeout / 4
	}
	return &apfEngine{serverCL: serverCL, queueWait: wait, methods: methods,
		factory: queueset.NewQueueSetFactory(eventclock.Real{}), levels: map[string]*apfLevel{}}
}

// rebuild makes a new configuration from the flowcontrol objects st
// holds (read under the engine's lock: the last rebuild sees the last
// change).
func (e *apfEngine) rebuild(st *apfState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fss, pls := st.snapshot()
	// Nominal concurrency limits: the server's total divided by shares,
	// rounded up, as kube-apiserver computes them.
	var sum float64
	for _, pl := range pls {
		sum += float64(plShares(pl))
	}
	levels := map[string]*apfLevel{}
	for name, pl := range pls {
		lv := &apfLevel{name: name, uid: pl.GetMetadata().GetUid()}
		if pl.GetSpec().GetType() == string(kubeflowcontrolv1.PriorityLevelEnablementExempt) {
			lv.exempt = true
			levels[name] = lv
			continue
		}
		cl := 0
		if sum > 0 {
			cl = int(math.Ceil(float64(e.serverCL) * float64(plShares(pl)) / sum))
		}
		qc := fq.QueuingConfig{Name: name}
		if q := pl.GetSpec().GetLimited().GetLimitResponse().GetQueuing(); q != nil {
			qc.DesiredNumQueues, qc.HandSize, qc.QueueLengthLimit = int(q.GetQueues()), int(q.GetHandSize()), int(q.GetQueueLengthLimit())
		}
		lv.cl, lv.queuing = cl, qc.DesiredNumQueues > 0
		dc := fq.DispatchingConfig{ConcurrencyLimit: cl, ConcurrencyDenominator: max(cl, 1)}
		var completer fq.QueueSetCompleter
		var err error
		if old := e.levels[name]; old != nil && old.qs != nil {
			completer, err = old.qs.BeginConfigChange(qc)
		} else {
			completer, err = e.factory.BeginConstruction(qc, fqmetrics.RatioedGaugePair{RequestsWaiting: noGauge{}, RequestsExecuting: noGauge{}}, noGauge{}, noGauge{})
		}
		if err != nil {
			continue // refused by validation already; the level is left out
		}
		lv.qs = completer.Complete(dc)
		levels[name] = lv
	}
	e.levels = levels
	cfg := &apfConfig{}
	for _, fs := range fss {
		spec := fs.GetSpec()
		lv := levels[spec.GetPriorityLevelConfiguration().GetName()]
		if lv == nil {
			continue // a dangling FlowSchema is not used, as in Kubernetes
		}
		sc := &apfSchema{name: fs.GetMetadata().GetName(), uid: fs.GetMetadata().GetUid(), level: lv,
			distinguisher: kubeflowcontrolv1.FlowDistinguisherMethodType(spec.GetDistinguisherMethod().GetType())}
		for _, r := range spec.GetRules() {
			var ar apfRule
			for _, sub := range r.GetSubjects() {
				switch sub.GetKind() {
				case "User":
					ar.users = append(ar.users, sub.GetUser().GetName())
				case "Group":
					ar.groups = append(ar.groups, sub.GetGroup().GetName())
				case "ServiceAccount":
					ar.sas = append(ar.sas, saSubject{namespace: sub.GetServiceAccount().GetNamespace(), name: sub.GetServiceAccount().GetName()})
				}
			}
			ar.resources, ar.nonResource = r.GetResourceRules(), r.GetNonResourceRules()
			sc.rules = append(sc.rules, ar)
		}
		cfg.schemas = append(cfg.schemas, sc)
	}
	sort.Slice(cfg.schemas, func(i, j int) bool {
		a, b := cfg.schemas[i], cfg.schemas[j]
		pa, pb := fss[a.name].GetSpec().GetMatchingPrecedence(), fss[b.name].GetSpec().GetMatchingPrecedence()
		if pa != pb {
			return pa < pb
		}
		return a.name < b.name
	})
	e.cfg.Store(cfg)
}

func plShares(pl *flowcontrolv1.PriorityLevelConfiguration) int32 {
	if l := pl.GetSpec().GetLimited(); l != nil {
		return l.GetNominalConcurrencyShares()
	}
	return pl.GetSpec().GetExempt().GetNominalConcurrencyShares()
}

// apfRequest is what a call is classified by.
type apfRequest struct {
	user                      request.User
	verb, group, resource, ns string
	path                      string // a non-resource call's path
	nonResource               bool
}

// classify returns the first matching schema (nil when none matches,
// which the mandatory catch-all rules out once it exists).
func (c *apfConfig) classify(r *apfRequest) *apfSchema {
	for _, sc := range c.schemas {
		for i := range sc.rules {
			if sc.rules[i].matches(r) {
				return sc
			}
		}
	}
	return nil
}

func (ar *apfRule) matches(r *apfRequest) bool {
	if !ar.subjectMatches(r.user) {
		return false
	}
	if r.nonResource {
		for _, nr := range ar.nonResource {
			if listHas(nr.GetVerbs(), r.verb) && urlMatches(nr.GetNonResourceUrls(), r.path) {
				return true
			}
		}
		return false
	}
	for _, rr := range ar.resources {
		if !listHas(rr.GetVerbs(), r.verb) || !listHas(rr.GetApiGroups(), r.group) || !listHas(rr.GetResources(), r.resource) {
			continue
		}
		if r.ns == "" {
			if rr.GetClusterScope() {
				return true
			}
			continue
		}
		if listHas(rr.GetNamespaces(), r.ns) {
			return true
		}
	}
	return false
}

func (ar *apfRule) subjectMatches(u request.User) bool {
	for _, n := range ar.users {
		if n == "*" || n == u.Name {
			return true
		}
	}
	for _, g := range ar.groups {
		if g == "*" || slices.Contains(u.Groups, g) {
			return true
		}
	}
	if rest, ok := strings.CutPrefix(u.Name, "system:serviceaccount:"); ok {
		ns, name, _ := strings.Cut(rest, ":")
		for _, sa := range ar.sas {
			if sa.namespace == ns && (sa.name == "*" || sa.name == name) {
				return true
			}
		}
	}
	return false
}

// listHas: the list holds "*" or v.
func listHas(list []string, v string) bool {
	for _, x := range list {
		if x == "*" || x == v {
			return true
		}
	}
	return false
}

func urlMatches(patterns []string, path string) bool {
	for _, p := range patterns {
		if p == "*" || p == path {
			return true
		}
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

// authenticatedKey carries the identity the interceptor established (an
// *apfIdentity) to the call's own authentication, which then need not
// establish it again.
type authenticatedKey struct{}

// apfIdentity is who calls (user) and whom for (as, when impersonating).
type apfIdentity struct {
	user, as      request.User
	impersonating bool
}

// namespaced is a request message that names its namespace.
type namespaced interface{ GetNamespace() string }

// priorityAndFairness is the unary interceptor: classify, then run the
// call at once (exempt), or through its level's queues, or refuse it.
// Calls the engine knows nothing of yet (before the configuration is
// read) run as they would without it; the gRPC health service is never
// limited.
func (s *Server) priorityAndFairness(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	e := s.apfEngine
	cfg := e.cfg.Load()
	if cfg == nil || strings.HasPrefix(info.FullMethod, "/grpc.health.") {
		return handler(ctx, req)
	}
	u, err := s.cfg.Authenticator.Authenticate(ctx)
	if err != nil {
		return handler(ctx, req) // the call's own authentication refuses it
	}
	// As in kube-apiserver, an impersonated call is classified as the user
	// it acts as.
	as, impersonating, err := s.impersonate(ctx, u)
	if err != nil {
		return handler(ctx, req) // the call's own authentication refuses it
	}
	id := &apfIdentity{user: u, as: as, impersonating: impersonating}
	r := apfRequest{user: as}
	if m, ok := e.methods[info.FullMethod]; ok {
		r.verb, r.group, r.resource = m.verb, m.group, m.resource
		if n, ok := req.(namespaced); ok && m.namespaced {
			r.ns = n.GetNamespace()
		}
	} else if lr, ok := req.(*listjsonv1.ListJSONRequest); ok {
		// The JSON list names its resource in the request.
		r.verb, r.group, r.resource, r.ns = "list", lr.GetGroup(), lr.GetResource(), lr.GetNamespace()
	} else {
		// Reviews and other calls without a resource of their own: a
		// create of the service's resource, matched by wildcard rules.
		r.verb, r.resource = "create", apfServiceResource(info.FullMethod)
	}
	sc := cfg.classify(&r)
	if sc == nil {
		return handler(ctx, req)
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(apierrors.FlowSchemaUIDHeader, sc.uid, apierrors.PriorityLevelUIDHeader, sc.level.uid))
	if sc.level.exempt || sc.level.qs == nil {
		return handler(context.WithValue(ctx, authenticatedKey{}, id), req)
	}
	var distinguisher string
	switch sc.distinguisher {
	case kubeflowcontrolv1.FlowDistinguisherMethodByUserType:
		distinguisher = as.Name
	case kubeflowcontrolv1.FlowDistinguisherMethodByNamespaceType:
		distinguisher = r.ns
	}
	waitCtx, cancel := context.WithTimeout(ctx, e.queueWait)
	defer cancel()
	// The wait for a seat (in a queue or not) is a span of its own.
	_, span := s.tracer.Start(ctx, "apf.queue", trace.WithAttributes(
		attribute.String("apf.flowschema", sc.name), attribute.String("apf.prioritylevel", sc.level.name)))
	seats := uint64(1)
	if r.verb == "list" {
		seats = s.listSeats(r.resource, req, sc.level)
	}
	span.SetAttributes(attribute.Int64("apf.seats", int64(seats)))
	labels := metric.WithAttributes(attribute.String("flow_schema", sc.name), attribute.String("priority_level", sc.level.name))
	queued := time.Now()
	fr, _ := sc.level.qs.StartRequest(waitCtx, &fqrequest.WorkEstimate{InitialSeats: seats}, flowHash(sc.name, distinguisher),
		distinguisher, sc.name, nil, nil, nil)
	var (
		resp any
		herr error
		ran  bool
	)
	if fr != nil {
		fr.Finish(func() {
			span.End()
			ran = true
			s.apfMetrics.wait.Record(ctx, time.Since(queued).Seconds(), metric.WithAttributes(
				attribute.String("flow_schema", sc.name), attribute.String("priority_level", sc.level.name), attribute.String("execute", "true")))
			s.apfMetrics.dispatched.Add(ctx, 1, labels)
			resp, herr = handler(context.WithValue(ctx, authenticatedKey{}, id), req)
		})
	}
	if ran {
		return resp, herr
	}
	// Why it was refused, in kube-apiserver's words: a full queue (or no
	// queuing at all), or a wait that ran out or was given up.
	reason := "queue-full"
	switch {
	case !sc.level.queuing:
		reason = "concurrency-limit"
	case fr != nil && ctx.Err() != nil:
		reason = "cancelled"
	case fr != nil:
		reason = "time-out"
	}
	if fr != nil {
		s.apfMetrics.wait.Record(ctx, time.Since(queued).Seconds(), metric.WithAttributes(
			attribute.String("flow_schema", sc.name), attribute.String("priority_level", sc.level.name), attribute.String("execute", "false")))
	}
	s.apfMetrics.rejected.Add(ctx, 1, metric.WithAttributes(attribute.String("flow_schema", sc.name),
		attribute.String("priority_level", sc.level.name), attribute.String("reason", reason)))
	span.SetAttributes(attribute.Bool("apf.rejected", true))
	span.End()
	s.throttled.Add(ctx, 1)
	te := apierrors.NewTooManyRequests("Too many requests, please try again later.")
	te.RetryAfterSeconds = 1
	return nil, te
}

// List requests take more than one seat, as kube-apiserver's list work
// estimator counts them: one seat per 100 objects the list will go
// through (the whole resource from the watch cache, or twice the page from
// the store, or the resource plus the page with a selector), at most 10
// and at most the level's concurrency.
const (
	apfObjectsPerSeat = 100
	apfMaxSeats       = 10
)

// listSeats is the seats a List of resource (plural) asks for.
func (s *Server) listSeats(resource string, req any, lv *apfLevel) uint64 {
	maxSeats := uint64(apfMaxSeats)
	if lv.cl > 0 && uint64(lv.cl) < maxSeats {
		maxSeats = uint64(lv.cl)
	}
	c := s.cachers[resource]
	if c == nil {
		return 1
	}
	c.mu.Lock()
	stored := int64(len(c.state))
	c.mu.Unlock()
	msg, ok := req.(proto.Message)
	if !ok {
		return 1
	}
	m := msg.ProtoReflect()
	str := func(name protoreflect.Name) string {
		if fd := m.Descriptor().Fields().ByName(name); fd != nil && fd.Kind() == protoreflect.StringKind {
			return m.Get(fd).String()
		}
		return ""
	}
	var limit int64
	if fd := m.Descriptor().Fields().ByName("limit"); fd != nil && fd.Kind() == protoreflect.Int64Kind {
		limit = m.Get(fd).Int()
	}
	if limit <= 0 || limit > stored {
		limit = stored
	}
	var objects int64
	switch {
	case str("resource_version") != "": // served by the watch cache
		objects = stored
	case str("label_selector") != "" || str("field_selector") != "":
		objects = stored + limit
	default:
		objects = 2 * limit
	}
	seats := uint64((objects + apfObjectsPerSeat - 1) / apfObjectsPerSeat)
	return max(1, min(seats, maxSeats))
}

// apfServiceResource names a call outside the resource services by its
// service, lower case (kplane.authorization.v1.AuthorizationService →
// authorization).
func apfServiceResource(fullMethod string) string {
	svc, _, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	_, name, _ := cutLast(svc, '.')
	return strings.ToLower(strings.TrimSuffix(name, "Service"))
}

// flowHash is kube-apiserver's flow identity for shuffle sharding (the
// schema and the distinguisher), here FNV-1a without allocating.
func flowHash(schema, distinguisher string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(schema); i++ {
		h = (h ^ uint64(schema[i])) * prime
	}
	h = (h ^ 0) * prime
	for i := 0; i < len(distinguisher); i++ {
		h = (h ^ uint64(distinguisher[i])) * prime
	}
	return h
}

// noGauge discards the queue sets' observations (kplane's metrics are the
// service's own: throttled calls are counted).
type noGauge struct{}

func (noGauge) Set(float64)            {}
func (noGauge) Inc()                   {}
func (noGauge) Dec()                   {}
func (noGauge) Add(float64)            {}
func (noGauge) SetToCurrentTime()      {}
func (noGauge) SetDenominator(float64) {}

// authenticatedUser is the caller, as priority and fairness authenticated
// it already, or from the authenticator.
func (s *Server) authenticatedUser(ctx context.Context) (request.User, error) {
	if id, ok := ctx.Value(authenticatedKey{}).(*apfIdentity); ok {
		return id.user, nil
	}
	return s.cfg.Authenticator.Authenticate(ctx)
}

// impersonatedUser is whom the call acts as, as priority and fairness
// established it already, or from the impersonation headers.
func (s *Server) impersonatedUser(ctx context.Context, u request.User) (request.User, bool, error) {
	if id, ok := ctx.Value(authenticatedKey{}).(*apfIdentity); ok {
		return id.as, id.impersonating, nil
	}
	return s.impersonate(ctx, u)
}
