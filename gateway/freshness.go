// This file holds read-your-writes through the gateway: the gateway
// remembers each caller's latest write and asks the API service to answer
// that caller's cache-served reads (resourceVersion "0" or older) from a
// state at least that recent. The gateway balances calls over the API
// service replicas, each with its own watch cache a few milliseconds
// behind the store, so without it a client that writes through one replica
// and reads with resourceVersion=0 through another could read the state
// from before its own write.

package gateway

import (
	"context"
	"crypto/sha256"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/proto/identity"
)

// freshnessWindow is how long a caller's write is remembered: far longer
// than any replica's watch cache takes to see it.
const freshnessWindow = 10 * time.Second

// maxCallers bounds the callers remembered; past it, expired entries are
// swept, and if none has expired, the oldest half.
const maxCallers = 8192

// freshConn is the connection to the API service with read-your-writes
// added to its unary calls.
type freshConn struct {
	grpc.ClientConnInterface
	now func() time.Time

	mu   sync.Mutex
	last map[string]written
}

// written is a caller's latest write: its revision and when it was seen.
type written struct {
	rev int64
	at  time.Time
}

func newFreshConn(conn grpc.ClientConnInterface) *freshConn {
	return &freshConn{ClientConnInterface: conn, now: time.Now, last: map[string]written{}}
}

// Invoke passes the caller's last write on with a read and records the
// revision a write returns.
func (c *freshConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	verb := method[strings.LastIndexByte(method, '/')+1:]
	read := strings.HasPrefix(verb, "Get") || strings.HasPrefix(verb, "List")
	write := !read && isWrite(verb)
	if !read && !write {
		return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	}
	caller, ok := callerOf(ctx)
	if !ok {
		return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	}
	if read {
		if rev := c.lastWrite(caller); rev > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, identity.MinRevisionKey, strconv.FormatInt(rev, 10))
		}
		return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	}
	err := c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	if err == nil {
		if m, ok := reply.(proto.Message); ok {
			if rev := revisionOf(m); rev > 0 {
				c.record(caller, rev)
			}
		}
	}
	return err
}

// isWrite reports whether a method named verb changes state.
func isWrite(verb string) bool {
	for _, p := range [...]string{"Create", "Update", "Delete", "Evict", "Bind", "Finalize"} {
		if strings.HasPrefix(verb, p) {
			return true
		}
	}
	return false
}

// lastWrite is the revision of caller's latest write, or 0 when it is
// older than freshnessWindow.
func (c *freshConn) lastWrite(caller string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.last[caller]
	if !ok {
		return 0
	}
	if c.now().Sub(w.at) > freshnessWindow {
		delete(c.last, caller)
		return 0
	}
	return w.rev
}

func (c *freshConn) record(caller string, rev int64) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if w, ok := c.last[caller]; ok && w.rev > rev {
		rev = w.rev
	}
	c.last[caller] = written{rev: rev, at: now}
	if len(c.last) <= maxCallers {
		return
	}
	for k, w := range c.last {
		if now.Sub(w.at) > freshnessWindow {
			delete(c.last, k)
		}
	}
	if len(c.last) <= maxCallers {
		return
	}
	cutoff := now.Add(-freshnessWindow / 2)
	for k, w := range c.last {
		if w.at.Before(cutoff) {
			delete(c.last, k)
		}
	}
}

// callerOf names the end user a call carries: the impersonated user and
// groups the gateway established, or a digest of a forwarded token.
func callerOf(ctx context.Context) (string, bool) {
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		return "", false
	}
	if t := md.Get(identity.ForwardedTokenKey); len(t) > 0 {
		sum := sha256.Sum256([]byte(t[0]))
		return "token:" + string(sum[:16]), true
	}
	u := md.Get(identity.ImpersonateUserKey)
	if len(u) == 0 {
		return "", false
	}
	return "user:" + u[0] + "\x00" + strings.Join(md.Get(identity.ImpersonateGroupKey), "\x00"), true
}

// revisionOf is the resourceVersion of the object a write returned: the
// response itself, or the object it wraps (CreatePodResponse's pod).
func revisionOf(m proto.Message) int64 {
	r := m.ProtoReflect()
	if !r.IsValid() {
		return 0
	}
	if rev, ok := metaRevision(r); ok {
		return rev
	}
	var rev int64
	r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
			return true
		}
		var ok bool
		rev, ok = metaRevision(v.Message())
		return !ok
	})
	return rev
}

// metaRevision is r's metadata.resourceVersion, if r has object metadata.
func metaRevision(r protoreflect.Message) (int64, bool) {
	md := r.Descriptor().Fields().ByName("metadata")
	if md == nil || md.Kind() != protoreflect.MessageKind || !r.Has(md) {
		return 0, false
	}
	meta := r.Get(md).Message()
	rvf := meta.Descriptor().Fields().ByName("resource_version")
	if rvf == nil || rvf.Kind() != protoreflect.StringKind {
		return 0, false
	}
	rev, err := strconv.ParseInt(meta.Get(rvf).String(), 10, 64)
	if err != nil {
		return 0, false
	}
	return rev, true
}
