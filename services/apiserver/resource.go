// This file holds how the service describes a resource it serves,
// Kubernetes' list, write and delete options, and the metadata and type meta
// helpers every handler uses.

package apiserver

import (
	"errors"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// resourceInfo describes one resource the service serves; the table is
// generated (builtinResources) from the same table as the protos.
type resourceInfo struct {
	Group, Version, Kind, Resource  string
	Namespaced                      bool
	HasStatus, HasScale, HasBinding bool
	// AllowUnconditionalUpdate: an update without metadata.resourceVersion
	// is applied to the current object (still as a compare-and-swap).
	AllowUnconditionalUpdate bool
	// Graceful: deletion waits for a grace period (pods).
	Graceful bool
	New      func() proto.Message
	// custom is set for a custom resource (crregistry.go): its objects are
	// dynamic.v1.Objects, stored as JSON under storagePath.
	custom *customResource
	// stored is set for a view of another group's resource (eventsview.go:
	// events.k8s.io/v1 events are core/v1 events): its objects are the
	// stored resource's messages, under the same keys, encrypted by the
	// same rule and served from the same watch cache; requests through it
	// are authorized, audited, admitted and validated as its own group's.
	stored *resourceInfo
	// fieldLabel, for a view, turns a field selector's label into the
	// stored resource's (false: the label is not supported).
	fieldLabel func(label string) (string, bool)
}

// storedAs is the resource whose objects r's are: r itself, or the stored
// resource of a view.
func (r *resourceInfo) storedAs() *resourceInfo {
	if r.stored != nil {
		return r.stored
	}
	return r
}

// storagePath is the resource's part of its keys, as kube-apiserver keys
// them: kubeKeyPath for a built-in, <group>/<plural> for a custom resource.
func (r *resourceInfo) storagePath() string {
	if r.stored != nil {
		return r.stored.storagePath()
	}
	if r.custom != nil {
		return r.Group + "/" + r.Resource
	}
	return kubeKeyPath(r.Group, r.Resource)
}

// APIVersion is "v1" or "<group>/v1".
func (r *resourceInfo) APIVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// listOptions are Kubernetes' list and watch options.
type listOptions struct {
	LabelSelector, FieldSelector          string
	ResourceVersion, ResourceVersionMatch string
	Limit                                 int64
	Continue                              string
	TimeoutSeconds                        int64
	AllowWatchBookmarks                   bool
	SendInitialEvents                     *bool
	// Selectable, for a custom resource, are the selectableFields of the
	// version the request was made at (nil: the storage version's).
	Selectable []string
}

// writeOptions are the options of create and update.
type writeOptions struct {
	DryRun       []string
	FieldManager string
}

func (w writeOptions) dryRun() (bool, error) { return parseDryRun(w.DryRun) }

func parseDryRun(v []string) (bool, error) {
	switch {
	case len(v) == 0:
		return false, nil
	case len(v) == 1 && v[0] == "All":
		return true, nil
	}
	return false, apierrors.NewBadRequest(`dryRun: Unsupported value: only "All" is supported`)
}

// deleteOptions are Kubernetes' delete options.
type deleteOptions struct {
	GracePeriodSeconds *int64
	PropagationPolicy  string
	Preconditions      *metav1.Preconditions
	DryRun             []string
}

// meta returns obj's metadata, creating it if absent. Every top-level kplane
// object has a "metadata" field of type ObjectMeta.
func meta(obj proto.Message) *metav1.ObjectMeta {
	if o, ok := obj.(interface{ GetMetadata() *metav1.ObjectMeta }); ok {
		if m := o.GetMetadata(); m != nil {
			return m
		}
	}
	m := obj.ProtoReflect()
	fd := m.Descriptor().Fields().ByName("metadata")
	return m.Mutable(fd).Message().Interface().(*metav1.ObjectMeta)
}

// setTypeMeta fills apiVersion and kind: the stored resource's for a view,
// whose objects are the stored resource's messages (its handlers convert
// what they answer).
func setTypeMeta(r *resourceInfo, obj proto.Message) {
	r = r.storedAs()
	m := obj.ProtoReflect()
	fields := m.Descriptor().Fields()
	m.Set(fields.ByName("api_version"), protoreflect.ValueOfString(r.APIVersion()))
	m.Set(fields.ByName("kind"), protoreflect.ValueOfString(r.Kind))
}

// fieldOf returns obj's top-level field name ("spec", "status") as a message,
// or nil if obj has no such field or it is unset.
func fieldOf(obj proto.Message, name protoreflect.Name) protoreflect.Message {
	m := obj.ProtoReflect()
	fd := m.Descriptor().Fields().ByName(name)
	if fd == nil || !m.Has(fd) {
		return nil
	}
	return m.Get(fd).Message()
}

// copyField sets dst.name to a copy of src.name (clearing it if unset).
func copyField(dst, src proto.Message, name protoreflect.Name) {
	dm, sm := dst.ProtoReflect(), src.ProtoReflect()
	fd := dm.Descriptor().Fields().ByName(name)
	if fd == nil {
		return
	}
	if !sm.Has(fd) {
		dm.Clear(fd)
		return
	}
	dm.Set(fd, protoreflect.ValueOfMessage(proto.Clone(sm.Get(fd).Message().Interface()).ProtoReflect()))
}

// specEqual reports whether a and b agree on everything but metadata and
// status: what bumps metadata.generation when it changes.
func specEqual(a, b proto.Message) bool {
	ac, bc := proto.Clone(a), proto.Clone(b)
	for _, m := range []proto.Message{ac, bc} {
		r := m.ProtoReflect()
		for _, n := range []protoreflect.Name{"metadata", "status", "api_version", "kind"} {
			if fd := r.Descriptor().Fields().ByName(n); fd != nil {
				r.Clear(fd)
			}
		}
	}
	return proto.Equal(ac, bc)
}

func formatRV(rev int64) string { return strconv.FormatInt(rev, 10) }

// parseRV parses a resourceVersion; "" is 0.
func parseRV(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, apierrors.NewBadRequest("invalid resource version: " + strconv.Quote(s))
	}
	return v, nil
}

// now is a Kubernetes time: whole seconds.
func now() *timestamppb.Timestamp {
	return timestamppb.New(time.Now().Truncate(time.Second))
}

// nilIfEmpty turns a typed nil message into a nil interface.
func nilIfEmpty[T interface {
	proto.Message
	comparable
}](m T) proto.Message {
	var zero T
	if m == zero {
		return nil
	}
	return m
}

// toGRPC makes err a gRPC status: a *StatusError as is, anything else an
// InternalError. It is called once, at the handler edge.
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		return se
	}
	return apierrors.FromError(err)
}
