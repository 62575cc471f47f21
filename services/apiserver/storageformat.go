// This file holds the format objects are stored in, kube-apiserver's
// protobuf storage envelope, so that kube-apiserver and kplane read each
// other's objects; a store written in another format (an older kplane
// build's) is refused with an error naming both formats instead of being
// misread.
package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// storageMagic prefixes every stored built-in object (inside encryption at
// rest), as k8s.io/apimachinery's protobuf serializer writes it: what
// follows is a runtime.Unknown whose typeMeta is the storage version's
// apiVersion and kind and whose raw is the object's protobuf with
// Kubernetes' field numbers (the messages proto/internal/kubegen generates
// from k8s.io/api), without apiVersion and kind.
const storageMagic = "k8s\x00"

// storageFormat names the format storageMagic marks, for errors.
const storageFormat = `kube-apiserver's protobuf (prefix "k8s\x00", a runtime.Unknown around the object)`

// oldMagic marked the objects of kplane builds before kube-apiserver's
// envelope: the object's protobuf followed it directly.
const oldMagic = "kplane-pb2\x00"

// oldFormat names the format oldMagic marks, for errors.
const oldFormat = `kplane protobuf v2 (Kubernetes' field numbers, prefix "kplane-pb2\x00")`

// The field numbers of runtime.Unknown and runtime.TypeMeta
// (k8s.io/apimachinery/pkg/runtime/generated.proto).
const (
	unknownTypeMeta        protowire.Number = 1
	unknownRaw             protowire.Number = 2
	unknownContentEncoding protowire.Number = 3
	unknownContentType     protowire.Number = 4
	typeMetaAPIVersion     protowire.Number = 1
	typeMetaKind           protowire.Number = 2
)

// ErrStorageFormat is the error (wrapped) for a stored value in another
// format than this build's.
var ErrStorageFormat = errors.New("stored object is not in this build's storage format")

// appendStored appends obj in kube-apiserver's storage format to b:
// storageMagic, then runtime.Unknown{typeMeta: {apiVersion, kind}, raw: obj,
// contentEncoding: "", contentType: ""}, byte for byte as kube-apiserver
// writes it (the empty strings included). obj is marshalled once, straight
// into the result: its size, computed first, is reused for the marshal.
func appendStored(b []byte, apiVersion, kind string, obj proto.Message) ([]byte, error) {
	n := proto.MarshalOptions{Deterministic: true}.Size(obj)
	tm := protowire.SizeTag(typeMetaAPIVersion) + protowire.SizeBytes(len(apiVersion)) +
		protowire.SizeTag(typeMetaKind) + protowire.SizeBytes(len(kind))
	total := len(storageMagic) + protowire.SizeTag(unknownTypeMeta) + protowire.SizeBytes(tm) +
		protowire.SizeTag(unknownRaw) + protowire.SizeBytes(n) + 4
	b = slices.Grow(b, total)
	b = append(b, storageMagic...)
	b = protowire.AppendTag(b, unknownTypeMeta, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(tm))
	b = protowire.AppendTag(b, typeMetaAPIVersion, protowire.BytesType)
	b = protowire.AppendString(b, apiVersion)
	b = protowire.AppendTag(b, typeMetaKind, protowire.BytesType)
	b = protowire.AppendString(b, kind)
	b = protowire.AppendTag(b, unknownRaw, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	start := len(b)
	b, err := proto.MarshalOptions{Deterministic: true, UseCachedSize: true}.MarshalAppend(b, obj)
	if err != nil {
		return nil, err
	}
	if len(b)-start != n {
		return nil, fmt.Errorf("object changed while it was encoded (%d bytes, sized %d)", len(b)-start, n)
	}
	b = protowire.AppendTag(b, unknownContentEncoding, protowire.BytesType)
	b = protowire.AppendVarint(b, 0)
	b = protowire.AppendTag(b, unknownContentType, protowire.BytesType)
	return protowire.AppendVarint(b, 0), nil
}

// appendStoredRaw is appendStored of an object already marshalled (raw).
func appendStoredRaw(b []byte, apiVersion, kind string, raw []byte) []byte {
	b = append(b, storageMagic...)
	tm := protowire.SizeTag(typeMetaAPIVersion) + protowire.SizeBytes(len(apiVersion)) +
		protowire.SizeTag(typeMetaKind) + protowire.SizeBytes(len(kind))
	b = protowire.AppendTag(b, unknownTypeMeta, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(tm))
	b = protowire.AppendTag(b, typeMetaAPIVersion, protowire.BytesType)
	b = protowire.AppendString(b, apiVersion)
	b = protowire.AppendTag(b, typeMetaKind, protowire.BytesType)
	b = protowire.AppendString(b, kind)
	b = protowire.AppendTag(b, unknownRaw, protowire.BytesType)
	b = protowire.AppendBytes(b, raw)
	b = protowire.AppendTag(b, unknownContentEncoding, protowire.BytesType)
	b = protowire.AppendVarint(b, 0)
	b = protowire.AppendTag(b, unknownContentType, protowire.BytesType)
	return protowire.AppendVarint(b, 0)
}

// storedObject is a stored value's envelope, parsed.
type storedObject struct {
	apiVersion, kind string
	// raw is the object's protobuf, a slice of the stored value.
	raw []byte
	// contentType, if set, says raw is not protobuf (kube-apiserver
	// leaves it empty for its own objects).
	contentType string
}

// parseStored parses a value in kube-apiserver's storage format (as read
// from the store, decrypted). raw is a slice of value: nothing is copied.
func parseStored(key string, value []byte) (storedObject, error) {
	var o storedObject
	if len(value) < len(storageMagic) || string(value[:len(storageMagic)]) != storageMagic {
		return o, formatError(key, value)
	}
	b := value[len(storageMagic):]
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return o, fmt.Errorf("%w: %s: malformed envelope: %w", ErrStorageFormat, key, protowire.ParseError(l))
		}
		b = b[l:]
		if typ != protowire.BytesType {
			if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
				return o, fmt.Errorf("%w: %s: malformed envelope: %w", ErrStorageFormat, key, protowire.ParseError(l))
			}
			b = b[l:]
			continue
		}
		v, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return o, fmt.Errorf("%w: %s: malformed envelope: %w", ErrStorageFormat, key, protowire.ParseError(l))
		}
		b = b[l:]
		switch num {
		case unknownTypeMeta:
			if err := parseTypeMeta(v, &o); err != nil {
				return o, fmt.Errorf("%w: %s: malformed envelope: %w", ErrStorageFormat, key, err)
			}
		case unknownRaw:
			o.raw = v
		case unknownContentType:
			o.contentType = string(v)
		}
	}
	return o, nil
}

// parseTypeMeta reads a runtime.TypeMeta into o (a repeated message field
// merges, as in a full decode).
func parseTypeMeta(b []byte, o *storedObject) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if typ == protowire.BytesType && (num == typeMetaAPIVersion || num == typeMetaKind) {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return protowire.ParseError(l)
			}
			b = b[l:]
			if num == typeMetaAPIVersion {
				o.apiVersion = string(v)
			} else {
				o.kind = string(v)
			}
			continue
		}
		if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
	}
	return nil
}

// unmarkStored checks that value, as read from the store (decrypted), is
// one of r's objects in this build's format and returns the object's
// protobuf (a slice of value).
func unmarkStored(r *resourceInfo, key string, value []byte) ([]byte, error) {
	o, err := parseStored(key, value)
	if err != nil {
		return nil, err
	}
	r = r.storedAs()
	if o.apiVersion != r.APIVersion() || o.kind != r.Kind {
		return nil, fmt.Errorf("%w: %s holds a %s %s; this build stores and reads %s as %s %s only", ErrStorageFormat, key, o.apiVersion, o.kind, r.Resource, r.APIVersion(), r.Kind)
	}
	if o.contentType != "" && o.contentType != "application/vnd.kubernetes.protobuf" {
		return nil, fmt.Errorf("%w: %s holds content type %q inside the protobuf envelope; this build reads protobuf only", ErrStorageFormat, key, o.contentType)
	}
	return o.raw, nil
}

// formatError is the refusal of a value that is not in kube-apiserver's
// format, naming the format it is in when known.
func formatError(key string, value []byte) error {
	switch {
	case len(value) >= len(oldMagic) && string(value[:len(oldMagic)]) == oldMagic:
		return fmt.Errorf("%w: %s was written by an older kplane build, format %s; this build reads only %s: read it with the build that wrote it, or recreate the data directory with this build", ErrStorageFormat, key, oldFormat, storageFormat)
	case len(value) > 0 && value[0] == '{':
		return fmt.Errorf("%w: %s is JSON; this build reads only %s for this resource", ErrStorageFormat, key, storageFormat)
	}
	return fmt.Errorf("%w: %s has no format marker: it was written by a kplane build older than %s (hand-numbered protobuf fields, which this build would misread); this build reads only %s: recreate the data directory with this build, or read it with the build that wrote it", ErrStorageFormat, key, oldFormat, storageFormat)
}

// checkStorageFormat refuses, before serving, a store whose first object
// of a built-in resource is in another format than this build's (a data
// directory written by an older build), so that the service stops with the
// reason instead of serving errors. A store it cannot reach now is left to
// the watch caches, which report and retry.
func (s *Server) checkStorageFormat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := s.store.cli.Get(ctx, s.store.prefix, clientv3.WithPrefix(), clientv3.WithLimit(1))
	if err != nil || len(resp.Kvs) == 0 {
		return nil
	}
	key := string(resp.Kvs[0].Key)
	r := s.resourceOfKey(key)
	if r == nil || r.custom != nil || isCRDs(r) {
		// A custom resource's object (JSON), or a key kube-apiserver
		// keeps beside the objects: check a namespace instead, which
		// every store holds.
		r = s.resources["namespaces"]
		resp, err = s.store.cli.Get(ctx, s.store.key(r, "", ""), clientv3.WithPrefix(), clientv3.WithLimit(1))
		if err != nil || len(resp.Kvs) == 0 {
			return nil
		}
		key = string(resp.Kvs[0].Key)
	}
	value := resp.Kvs[0].Value
	if t := s.store.enc.For(r.Resource, r.Group); t != nil {
		if value, err = t.FromStorage(key, value); err != nil {
			return nil // the caches report it
		}
	}
	if _, err := unmarkStored(r, key, value); err != nil {
		return fmt.Errorf("refusing to serve this store: %w", err)
	}
	return nil
}

// resourceOfKey is the built-in resource whose objects are stored under
// key, or nil.
func (s *Server) resourceOfKey(key string) *resourceInfo {
	for _, r := range s.resources {
		if p := s.store.collectionKey(r, ""); len(key) > len(p) && key[:len(p)] == p {
			return r
		}
	}
	return nil
}
