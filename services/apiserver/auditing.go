// This file holds how a request is audited: the audit ID, the request's
// origin (what the gateway saw: the HTTP request URI, the client's user
// agent and addresses), the audit Policy's decision, the RequestReceived,
// ResponseStarted (watches) and ResponseComplete events, and the request and response bodies recorded
// at levels Request and RequestResponse.

package apiserver

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/proto/identity"
	listjsonv1 "github.com/kplane/kplane/proto/kplane/listjson/v1"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/audit"
	"github.com/kplane/kplane/services/apiserver/request"
)

// auditSlot lets a unary call's end hand its event to the auditBodies
// interceptor, which knows the request and response messages.
type auditSlot struct {
	c   *call
	err error
}

type auditSlotKey struct{}

// auditBodies is the innermost unary interceptor: the call's
// ResponseComplete event is written here, once the response is known, with
// the bodies its level asks for.
func (s *Server) auditBodies(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.cfg.Auditor == nil {
		return handler(ctx, req)
	}
	slot := &auditSlot{}
	resp, err := handler(context.WithValue(ctx, auditSlotKey{}, slot), req)
	if c := slot.c; c != nil {
		d := c.decision
		if d.Level == audit.LevelRequest || d.Level == audit.LevelRequestResponse {
			c.ev.RequestObject = objectJSON(req, d.OmitManagedFields)
		}
		if d.Level == audit.LevelRequestResponse && slot.err == nil {
			c.ev.ResponseObject = objectJSON(resp, d.OmitManagedFields)
		}
		s.writeAudit(c.ev)
	}
	return resp, err
}

// auditAuthenticated runs once the caller u is known: it takes the
// request's origin and audit ID from the gateway when the caller is a front
// proxy (the only callers whose kplane-impersonate-* metadata
// authentication accepts), else from the gRPC connection; evaluates the
// audit Policy on the authenticated user (before impersonation, as
// kube-apiserver does); and writes the RequestReceived event.
func (s *Server) auditAuthenticated(ctx context.Context, c *call, u request.User) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(identity.ImpersonateUserKey)) > 0 {
		if id := first(md.Get(identity.ForwardedAuditIDKey)); id != "" {
			c.ev.AuditID = id
		}
		if uri := first(md.Get(identity.ForwardedRequestURIKey)); uri != "" {
			c.ev.RequestURI = uri
		}
		c.ev.UserAgent = first(md.Get(identity.ForwardedUserAgentKey))
		for _, ip := range strings.Split(first(md.Get(identity.ForwardedForKey)), ",") {
			if ip = strings.TrimSpace(ip); ip != "" {
				c.ev.SourceIPs = append(c.ev.SourceIPs, ip)
			}
		}
	} else {
		c.ev.UserAgent = first(md.Get("user-agent"))
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			host, _, err := net.SplitHostPort(p.Addr.String())
			if err != nil {
				host = p.Addr.String()
			}
			c.ev.SourceIPs = []string{host}
		}
	}
	s.sendAuditID(ctx, c)
	if s.cfg.Auditor == nil {
		return
	}
	a := c.attrs
	a.User = u
	c.decision, c.decided = s.cfg.AuditPolicy.Decide(a), true
	if !c.decision.Records() || c.decision.Omits(audit.StageRequestReceived) {
		return
	}
	ev := *c.ev
	ev.SetAttributes(c.attrs)
	ev.Level, ev.Stage, ev.StageTimestamp = c.decision.Level, audit.StageRequestReceived, time.Now()
	ev.StageTimings, ev.ResponseStatus = nil, nil
	s.writeAudit(&ev)
}

// auditResponseStarted writes the ResponseStarted event of a long-running
// request (a watch) once its response has begun, as kube-apiserver does.
func (s *Server) auditResponseStarted(c *call) {
	if s.cfg.Auditor == nil || !c.decision.Records() || c.decision.Omits(audit.StageResponseStarted) {
		return
	}
	ev := *c.ev
	ev.SetAttributes(c.attrs)
	ev.SetResponse(http.StatusOK, "", "")
	ev.Level, ev.Stage, ev.StageTimestamp = c.decision.Level, audit.StageResponseStarted, time.Now()
	ev.StageTimings = nil
	s.writeAudit(&ev)
}

// sendAuditID returns the call's audit ID to the client in the audit-id
// header, once.
func (s *Server) sendAuditID(ctx context.Context, c *call) {
	if c.idSent {
		return
	}
	c.idSent = true
	_ = grpc.SetHeader(ctx, metadata.Pairs(auditIDHeader, c.ev.AuditID))
}

// auditEnd records the outcome: the ResponseComplete event, written now
// or, for a unary call, by auditBodies with the bodies.
func (s *Server) auditEnd(ctx context.Context, c *call, err error) {
	s.sendAuditID(ctx, c)
	if s.cfg.Auditor == nil {
		return
	}
	if !c.decided {
		// Authentication failed: the policy sees the request without a user.
		c.decision, c.decided = s.cfg.AuditPolicy.Decide(c.attrs), true
	}
	if !c.decision.Records() || c.decision.Omits(audit.StageResponseComplete) {
		return
	}
	c.ev.SetAttributes(c.attrs)
	c.ev.SetError(err)
	if err == nil && c.attrs.Verb == "create" {
		c.ev.ResponseStatus.Code = http.StatusCreated
	}
	c.ev.Level, c.ev.Stage, c.ev.StageTimestamp = c.decision.Level, audit.StageResponseComplete, time.Now()
	if slot, ok := ctx.Value(auditSlotKey{}).(*auditSlot); ok && slot.c == nil {
		slot.c, slot.err = c, err
		return
	}
	s.writeAudit(c.ev)
}

func (s *Server) writeAudit(ev *audit.Event) {
	if err := s.cfg.Auditor.Log(ev); err != nil {
		s.log.Warn("writing the audit log failed", "err", err)
	}
}

// objectJSON renders the object a request or response message carries
// (its one field holding a Kubernetes object or list: one with metadata)
// as Kubernetes JSON, without managedFields when omitManagedFields; nil
// when it carries none.
func objectJSON(msg any, omitManagedFields bool) json.RawMessage {
	if d, ok := msg.(interface{ GetObject() []byte }); ok && json.Valid(d.GetObject()) {
		// The generic service's messages (dynamic.go) carry the object's
		// JSON already; it is recorded as sent, managedFields included.
		return d.GetObject()
	}
	if l, ok := msg.(*listjsonv1.ListJSONResponse); ok {
		return listJSONAudit(l.GetData(), omitManagedFields)
	}
	m, ok := msg.(proto.Message)
	if !ok || m == nil {
		return nil
	}
	r := m.ProtoReflect()
	if !r.IsValid() {
		return nil
	}
	var obj proto.Message
	fields := r.Descriptor().Fields()
	for i := 0; i < fields.Len() && obj == nil; i++ {
		f := fields.Get(i)
		if f.Kind() != protoreflect.MessageKind || f.IsList() || f.IsMap() || !r.Has(f) {
			continue
		}
		if f.Message().Fields().ByName("metadata") != nil {
			obj = r.Get(f).Message().Interface()
		}
	}
	if obj == nil {
		return nil
	}
	if omitManagedFields {
		obj = proto.Clone(obj)
		clearManagedFields(obj.ProtoReflect())
	}
	b, err := kubejson.Marshal(obj)
	if err != nil {
		return nil
	}
	return b
}

// clearManagedFields drops metadata.managedFields of an object, or of
// every item of a list.
func clearManagedFields(r protoreflect.Message) {
	fields := r.Descriptor().Fields()
	if md := fields.ByName("metadata"); md != nil && r.Has(md) {
		meta := r.Mutable(md).Message()
		if mf := meta.Descriptor().Fields().ByName("managed_fields"); mf != nil {
			meta.Clear(mf)
		}
	}
	if items := fields.ByName("items"); items != nil && items.IsList() && items.Kind() == protoreflect.MessageKind {
		l := r.Mutable(items).List()
		for i := 0; i < l.Len(); i++ {
			clearManagedFields(l.Get(i).Message())
		}
	}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
