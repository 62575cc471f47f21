// Package client is what kplane's components are built on, as client-go is
// for Kubernetes' own: typed clients for the API service's resources
// (Client, with Bind/UpdateStatus/GetScale/UpdateScale), informers that keep
// a local indexed cache in step with the API service (Informer), a
// rate-limited work queue of object keys (NewQueue) and the reconcile loop
// that drains it (RunWorkers, EnqueueHandler), leader election on a
// coordination/v1 Lease (LeaderElector) and an event recorder (Recorder).
//
// A controller's shape:
//
//	pods := client.Must[*corev1.Pod](conn)
//	inf := client.NewInformer(client.ListWatch(pods, "", "", "", 500), client.InformerOptions[*corev1.Pod]{})
//	q := client.NewQueue("pods", 0, 0)
//	inf.AddEventHandler(client.EnqueueHandler[*corev1.Pod](q))
//	go inf.Run(ctx)
//	client.WaitForCacheSync(ctx, inf)
//	client.RunWorkers(ctx, q, 2, reconcile, log)
//
// Client is one generic implementation for every resource: it finds the
// resource's gRPC service and methods from the generated descriptors
// (kplane.core.v1.Pod → kplane.core.v1.PodService with GetPod, ListPods,
// WatchPods, CreatePod, UpdatePod, DeletePod, UpdatePodStatus) and calls them
// over any grpc.ClientConnInterface, so adding a resource to proto/ needs no
// code here.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/kplane/kplane/proto/apierrors"
)

// ListOptions are Kubernetes' list and watch options.
type ListOptions struct {
	LabelSelector   string
	FieldSelector   string
	ResourceVersion string
	// Limit and Continue page a List. List (not ListPage) follows every page.
	Limit               int64
	Continue            string
	AllowWatchBookmarks bool
	// TimeoutSeconds, if set, ends a watch after that long.
	TimeoutSeconds int64
}

// DeleteOptions are Kubernetes' delete options.
type DeleteOptions struct {
	GracePeriodSeconds *int64
	PropagationPolicy  string // Orphan, Background, Foreground
	// Preconditions: delete only if the object still has this uid / resourceVersion.
	UID             string
	ResourceVersion string
}

// Client is a typed client for one resource whose objects are T (a generated
// message such as *corev1.Pod). Errors are *apierrors.StatusError, so
// apierrors.IsNotFound, IsConflict and the others apply. Safe for concurrent use.
type Client[T proto.Message] struct {
	conn                                                grpc.ClientConnInterface
	kind                                                protoreflect.MessageDescriptor
	service                                             protoreflect.ServiceDescriptor
	namespaced                                          bool
	get, list, watch, create, update, del, updateStatus protoreflect.MethodDescriptor
}

// New returns the client for T's resource over conn. It fails if the
// generated service for T is not linked into the program or lacks the
// standard methods.
func New[T proto.Message](conn grpc.ClientConnInterface) (*Client[T], error) {
	var zero T
	kind := zero.ProtoReflect().Descriptor()
	svcName := kind.FullName().Parent().Append(protoreflect.Name(string(kind.Name()) + "Service"))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(svcName)
	if err != nil {
		return nil, fmt.Errorf("client: no service %s for %s: %w", svcName, kind.FullName(), err)
	}
	svc, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("client: %s is not a service", svcName)
	}
	c := &Client[T]{conn: conn, kind: kind, service: svc}
	k := string(kind.Name())
	methods := svc.Methods()
	for i := range methods.Len() {
		m := methods.Get(i)
		switch name := string(m.Name()); {
		case name == "Get"+k:
			c.get = m
		case name == "Create"+k:
			c.create = m
		case name == "Update"+k:
			c.update = m
		case name == "Delete"+k:
			c.del = m
		case name == "Update"+k+"Status":
			c.updateStatus = m
		case strings.HasPrefix(name, "List") && m.Output().Fields().ByName("list") != nil:
			c.list = m
		case strings.HasPrefix(name, "Watch") && m.IsStreamingServer():
			c.watch = m
		}
	}
	if c.get == nil || c.list == nil || c.watch == nil || c.create == nil || c.update == nil || c.del == nil {
		return nil, fmt.Errorf("client: service %s lacks the standard methods", svcName)
	}
	c.namespaced = c.get.Input().Fields().ByName("namespace") != nil
	return c, nil
}

// Must is New that panics; for package-level wiring of the generated types
// that are known to be present.
func Must[T proto.Message](conn grpc.ClientConnInterface) *Client[T] {
	c, err := New[T](conn)
	if err != nil {
		panic(err)
	}
	return c
}

// Namespaced reports whether T's resource lives in namespaces.
func (c *Client[T]) Namespaced() bool { return c.namespaced }

// Kind is T's kind, e.g. "Pod".
func (c *Client[T]) Kind() string { return string(c.kind.Name()) }

func (c *Client[T]) fullMethod(m protoreflect.MethodDescriptor) string {
	return "/" + string(c.service.FullName()) + "/" + string(m.Name())
}

func newMessage(d protoreflect.MessageDescriptor) (protoreflect.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		return nil, fmt.Errorf("client: message type %s not linked in: %w", d.FullName(), err)
	}
	return mt.New(), nil
}

// setString sets a string field of m by name; absent fields are skipped
// (cluster-scoped resources have no namespace).
func setString(m protoreflect.Message, name, v string) {
	if v == "" {
		return
	}
	if fd := m.Descriptor().Fields().ByName(protoreflect.Name(name)); fd != nil && fd.Kind() == protoreflect.StringKind {
		m.Set(fd, protoreflect.ValueOfString(v))
	}
}

func setInt64(m protoreflect.Message, name string, v int64) {
	if v == 0 {
		return
	}
	if fd := m.Descriptor().Fields().ByName(protoreflect.Name(name)); fd != nil && fd.Kind() == protoreflect.Int64Kind {
		m.Set(fd, protoreflect.ValueOfInt64(v))
	}
}

func setBool(m protoreflect.Message, name string, v bool) {
	if !v {
		return
	}
	if fd := m.Descriptor().Fields().ByName(protoreflect.Name(name)); fd != nil && fd.Kind() == protoreflect.BoolKind {
		m.Set(fd, protoreflect.ValueOfBool(v))
	}
}

// objectField is the field of m whose type is T.
func (c *Client[T]) objectField(m protoreflect.MessageDescriptor) protoreflect.FieldDescriptor {
	fields := m.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.Message() != nil && f.Message().FullName() == c.kind.FullName() && !f.IsList() {
			return f
		}
	}
	return nil
}

func (c *Client[T]) invoke(ctx context.Context, m protoreflect.MethodDescriptor, req protoreflect.Message) (protoreflect.Message, error) {
	resp, err := newMessage(m.Output())
	if err != nil {
		return nil, err
	}
	if err := c.conn.Invoke(ctx, c.fullMethod(m), req.Interface(), resp.Interface()); err != nil {
		return nil, apierrors.FromError(err)
	}
	return resp, nil
}

// objectOf returns the T in resp (or an error if the server sent none).
func (c *Client[T]) objectOf(resp protoreflect.Message) (T, error) {
	var zero T
	f := c.objectField(resp.Descriptor())
	if f == nil || !resp.Has(f) {
		return zero, fmt.Errorf("client: %s carries no %s", resp.Descriptor().FullName(), c.kind.Name())
	}
	return resp.Get(f).Message().Interface().(T), nil
}

// Get reads one object; namespace is ignored for cluster-scoped resources.
func (c *Client[T]) Get(ctx context.Context, namespace, name string) (T, error) {
	var zero T
	req, err := newMessage(c.get.Input())
	if err != nil {
		return zero, err
	}
	setString(req, "namespace", namespace)
	setString(req, "name", name)
	resp, err := c.invoke(ctx, c.get, req)
	if err != nil {
		return zero, err
	}
	return c.objectOf(resp)
}

// write sends obj in a Create/Update/UpdateStatus request.
func (c *Client[T]) write(ctx context.Context, m protoreflect.MethodDescriptor, obj T, dryRun bool) (T, error) {
	var zero T
	if m == nil {
		return zero, apierrors.NewMethodNotSupported("", strings.ToLower(c.Kind()), "update status")
	}
	req, err := newMessage(m.Input())
	if err != nil {
		return zero, err
	}
	setString(req, "namespace", Namespace(obj))
	setString(req, "name", Name(obj))
	f := c.objectField(req.Descriptor())
	if f == nil {
		return zero, fmt.Errorf("client: %s has no %s field", req.Descriptor().FullName(), c.kind.Name())
	}
	req.Set(f, protoreflect.ValueOfMessage(obj.ProtoReflect()))
	if dryRun {
		if fd := req.Descriptor().Fields().ByName("dry_run"); fd != nil && fd.IsList() {
			req.Mutable(fd).List().Append(protoreflect.ValueOfString("All"))
		}
	}
	resp, err := c.invoke(ctx, m, req)
	if err != nil {
		return zero, err
	}
	return c.objectOf(resp)
}

// Create creates obj (in obj's metadata.namespace) and returns the stored object.
func (c *Client[T]) Create(ctx context.Context, obj T) (T, error) {
	return c.write(ctx, c.create, obj, false)
}

// CreateDryRun runs the whole write path for a create without storing.
func (c *Client[T]) CreateDryRun(ctx context.Context, obj T) (T, error) {
	return c.write(ctx, c.create, obj, true)
}

// Update replaces obj; its metadata.resourceVersion must be current, else
// the error is Conflict.
func (c *Client[T]) Update(ctx context.Context, obj T) (T, error) {
	return c.write(ctx, c.update, obj, false)
}

// UpdateStatus writes obj's status subresource (MethodNotAllowed where the
// resource has none).
func (c *Client[T]) UpdateStatus(ctx context.Context, obj T) (T, error) {
	return c.write(ctx, c.updateStatus, obj, false)
}

// Delete deletes one object.
func (c *Client[T]) Delete(ctx context.Context, namespace, name string, opts DeleteOptions) error {
	req, err := newMessage(c.del.Input())
	if err != nil {
		return err
	}
	setString(req, "namespace", namespace)
	setString(req, "name", name)
	setString(req, "propagation_policy", opts.PropagationPolicy)
	if opts.GracePeriodSeconds != nil {
		if fd := req.Descriptor().Fields().ByName("grace_period_seconds"); fd != nil {
			req.Set(fd, protoreflect.ValueOfInt64(*opts.GracePeriodSeconds))
		}
	}
	if opts.UID != "" || opts.ResourceVersion != "" {
		if fd := req.Descriptor().Fields().ByName("preconditions"); fd != nil && fd.Message() != nil {
			pre := req.Mutable(fd).Message()
			setString(pre, "uid", opts.UID)
			setString(pre, "resource_version", opts.ResourceVersion)
		}
	}
	_, err = c.invoke(ctx, c.del, req)
	return err
}

// ListPage reads one page: the items, the list's resourceVersion and the
// continue token of the next page ("" on the last).
func (c *Client[T]) ListPage(ctx context.Context, namespace string, opts ListOptions) (items []T, resourceVersion, next string, err error) {
	req, err := newMessage(c.list.Input())
	if err != nil {
		return nil, "", "", err
	}
	setString(req, "namespace", namespace)
	setString(req, "label_selector", opts.LabelSelector)
	setString(req, "field_selector", opts.FieldSelector)
	setString(req, "resource_version", opts.ResourceVersion)
	setInt64(req, "limit", opts.Limit)
	setString(req, "continue", opts.Continue)
	resp, err := c.invoke(ctx, c.list, req)
	if err != nil {
		return nil, "", "", err
	}
	listField := resp.Descriptor().Fields().ByName("list")
	list := resp.Get(listField).Message()
	if itemsField := list.Descriptor().Fields().ByName("items"); itemsField != nil {
		l := list.Get(itemsField).List()
		items = make([]T, 0, l.Len())
		for i := range l.Len() {
			items = append(items, l.Get(i).Message().Interface().(T))
		}
	}
	if mf := list.Descriptor().Fields().ByName("metadata"); mf != nil && list.Has(mf) {
		lm := list.Get(mf).Message()
		resourceVersion = stringOf(lm, "resource_version")
		next = stringOf(lm, "continue")
	}
	return items, resourceVersion, next, nil
}

// List reads every object (following continue tokens when opts.Limit pages
// the list) and returns them with the resourceVersion of the list.
func (c *Client[T]) List(ctx context.Context, namespace string, opts ListOptions) ([]T, string, error) {
	var all []T
	var firstRV string
	for page := 0; ; page++ {
		items, rv, next, err := c.ListPage(ctx, namespace, opts)
		if err != nil {
			return nil, "", err
		}
		if page == 0 {
			firstRV = rv
		}
		all = append(all, items...)
		if next == "" || opts.Limit == 0 {
			return all, firstRV, nil
		}
		opts.Continue = next
	}
}

func stringOf(m protoreflect.Message, name string) string {
	if fd := m.Descriptor().Fields().ByName(protoreflect.Name(name)); fd != nil && fd.Kind() == protoreflect.StringKind {
		return m.Get(fd).String()
	}
	return ""
}

// EventType is a watch event's type.
type EventType string

// Watch event types, as Kubernetes names them.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
	Error    EventType = "ERROR"
)

// Event is one watch event. For Bookmark, Object carries only the
// resourceVersion. For Error, Err holds the error the server reported.
type Event[T proto.Message] struct {
	Type   EventType
	Object T
	Err    error
}

// Watcher is one open watch stream.
type Watcher[T proto.Message] struct {
	c      *Client[T]
	stream grpc.ClientStream
	cancel context.CancelFunc
}

// Watch opens a watch. namespace "" watches every namespace.
func (c *Client[T]) Watch(ctx context.Context, namespace string, opts ListOptions) (*Watcher[T], error) {
	req, err := newMessage(c.watch.Input())
	if err != nil {
		return nil, err
	}
	setString(req, "namespace", namespace)
	setString(req, "label_selector", opts.LabelSelector)
	setString(req, "field_selector", opts.FieldSelector)
	setString(req, "resource_version", opts.ResourceVersion)
	setBool(req, "allow_watch_bookmarks", opts.AllowWatchBookmarks)
	if opts.TimeoutSeconds > 0 {
		if fd := req.Descriptor().Fields().ByName("timeout_seconds"); fd != nil {
			req.Set(fd, protoreflect.ValueOfInt64(opts.TimeoutSeconds))
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, c.fullMethod(c.watch))
	if err != nil {
		cancel()
		return nil, apierrors.FromError(err)
	}
	if err := stream.SendMsg(req.Interface()); err != nil {
		cancel()
		return nil, apierrors.FromError(err)
	}
	if err := stream.CloseSend(); err != nil {
		cancel()
		return nil, apierrors.FromError(err)
	}
	return &Watcher[T]{c: c, stream: stream, cancel: cancel}, nil
}

// ErrWatchClosed is returned by Next when the server ended the watch
// cleanly (for example after timeoutSeconds); resume from the last
// resourceVersion seen.
var ErrWatchClosed = errors.New("client: watch closed by the server")

// Next blocks for the next event. An ERROR event is returned as its error
// (an *apierrors.StatusError: Expired/Gone means re-list). A broken stream
// returns its error; a clean end returns ErrWatchClosed.
func (w *Watcher[T]) Next() (Event[T], error) {
	var zero Event[T]
	resp, err := newMessage(w.c.watch.Output())
	if err != nil {
		return zero, err
	}
	if err := w.stream.RecvMsg(resp.Interface()); err != nil {
		if errors.Is(err, io.EOF) {
			return zero, ErrWatchClosed
		}
		return zero, apierrors.FromError(err)
	}
	ev := Event[T]{Type: EventType(stringOf(resp, "type"))}
	if of := resp.Descriptor().Fields().ByName("object"); of != nil && resp.Has(of) {
		ev.Object = resp.Get(of).Message().Interface().(T)
	} else if ev.Type != Error {
		empty, err := newMessage(w.c.kind)
		if err != nil {
			return zero, err
		}
		ev.Object = empty.Interface().(T)
	}
	if ev.Type == Error {
		return zero, statusEventError(resp)
	}
	return ev, nil
}

// Close ends the watch.
func (w *Watcher[T]) Close() { w.cancel() }

// statusEventError turns an ERROR event's Status into an error.
func statusEventError(resp protoreflect.Message) error {
	sf := resp.Descriptor().Fields().ByName("status")
	if sf == nil || !resp.Has(sf) {
		return apierrors.NewInternalError(errors.New("watch ERROR event without a status"))
	}
	st := resp.Get(sf).Message()
	reason := apierrors.Reason(stringOf(st, "reason"))
	msg := stringOf(st, "message")
	se := &apierrors.StatusError{Reason: reason, Message: msg, Code: apierrors.HTTPCode(reason)}
	if cf := st.Descriptor().Fields().ByName("code"); cf != nil {
		if code := int32(st.Get(cf).Int()); code != 0 {
			se.Code = code
			if reason == "" && code == 410 {
				se.Reason = apierrors.ReasonExpired
			}
		}
	}
	return se
}
