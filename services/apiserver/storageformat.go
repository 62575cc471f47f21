// This file holds the marker of the format objects are stored in, so that
// a store written by a build with another format is refused with an error
// naming both formats instead of being misread.
package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// storageMagic prefixes every stored object (inside encryption at rest, as
// kube-apiserver's "k8s\x00" does): what follows is the object's protobuf
// with Kubernetes' field numbers (the messages proto/internal/kubegen
// generates from k8s.io/api).
const storageMagic = "kplane-pb2\x00"

// storageFormat names the format storageMagic marks, for errors.
const storageFormat = `kplane protobuf v2 (Kubernetes' field numbers, prefix "kplane-pb2\x00")`

// ErrStorageFormat is the error (wrapped) for a stored value in another
// format than this build's.
var ErrStorageFormat = errors.New("stored object is not in this build's storage format")

// unmarkStored checks that value, as read from the store (decrypted), is in
// this build's format and returns the protobuf after the marker.
func unmarkStored(key string, value []byte) ([]byte, error) {
	if len(value) >= len(storageMagic) && string(value[:len(storageMagic)]) == storageMagic {
		return value[len(storageMagic):], nil
	}
	if len(value) >= 4 && string(value[:4]) == "k8s\x00" {
		return nil, fmt.Errorf("%w: %s is in kube-apiserver's format (k8s\\x00 envelope), this build reads only %s", ErrStorageFormat, key, storageFormat)
	}
	return nil, fmt.Errorf("%w: %s has no format marker: it was written by a kplane build older than %s (hand-numbered protobuf fields, which this build would misread); recreate the data directory with this build, or read it with the build that wrote it", ErrStorageFormat, key, storageFormat)
}

// checkStorageFormat refuses, before serving, a store whose first object
// is in another format than this build's (a data directory written by an
// older build), so that the service stops with the reason instead of
// serving errors. A store it cannot reach now is left to the watch
// caches, which report and retry.
func (s *Server) checkStorageFormat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := s.store.cli.Get(ctx, s.store.prefix, clientv3.WithPrefix(), clientv3.WithLimit(1))
	if err != nil || len(resp.Kvs) == 0 {
		return nil
	}
	key := string(resp.Kvs[0].Key)
	res, _, _ := strings.Cut(strings.TrimPrefix(key, s.store.prefix), "/")
	if strings.Contains(res, ".") {
		// A custom resource's group (its objects are JSON, without the
		// marker): check a namespace instead, which every store holds.
		resp, err = s.store.cli.Get(ctx, s.store.prefix+"namespaces/", clientv3.WithPrefix(), clientv3.WithLimit(1))
		if err != nil || len(resp.Kvs) == 0 {
			return nil
		}
		key, res = string(resp.Kvs[0].Key), "namespaces"
	}
	for _, r := range s.resources {
		if r.Resource != res {
			continue
		}
		value := resp.Kvs[0].Value
		if t := s.store.enc.For(r.Resource, r.Group); t != nil {
			if value, err = t.FromStorage(key, value); err != nil {
				return nil // the caches report it
			}
		}
		if _, err := unmarkStored(key, value); err != nil {
			return fmt.Errorf("refusing to serve this store: %w", err)
		}
		return nil
	}
	return nil
}
