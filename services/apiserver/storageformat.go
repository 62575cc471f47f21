// This file holds the marker of the format objects are stored in, so that
// a store written by a build with another format is refused with an error
// naming both formats instead of being misread.
package apiserver

import (
	"errors"
	"fmt"
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
