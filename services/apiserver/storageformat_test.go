// This file tests the storage format: objects are stored in
// kube-apiserver's "k8s\x00" envelope, and a value in an older kplane
// build's format (its "kplane-pb2\x00" marker, or none) is refused with an
// error naming both formats, never misread.

package apiserver

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
)

func TestUnmarkStored(t *testing.T) {
	r := resourcesByName()["configmaps"]
	const key = "/registry/configmaps/default/c"
	b, err := proto.Marshal(&corev1.ConfigMap{Metadata: om("default", "c"), Data: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := (&storage{}).marshalStored(r, &corev1.ConfigMap{Metadata: om("default", "c"), Data: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := unmarkStored(r, key, stored)
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("stored value: %q, %v", got, err)
	}
	old := append([]byte(oldMagic), b...)
	for _, v := range [][]byte{old, b, nil} {
		_, err := unmarkStored(r, key, v)
		if !errors.Is(err, ErrStorageFormat) || !strings.Contains(err.Error(), "kplane-pb2") || !strings.Contains(err.Error(), `k8s\x00`) {
			t.Errorf("older build's value %q: err = %v, want ErrStorageFormat naming both formats", v, err)
		}
	}
	if _, err := unmarkStored(r, key, old); err == nil || !strings.Contains(err.Error(), "older kplane build") {
		t.Errorf("kplane-pb2 value: err = %v, want it to say an older kplane build wrote it", err)
	}
	// Another kind, or another version, in the envelope is not misread.
	other, err := appendStored(nil, "v1", "Secret", &corev1.Secret{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unmarkStored(r, key, other); !errors.Is(err, ErrStorageFormat) || !strings.Contains(err.Error(), "v1 Secret") {
		t.Errorf("a Secret under a ConfigMap's key: err = %v, want ErrStorageFormat naming it", err)
	}
	if _, err := unmarkStored(r, key, []byte("k8s\x00\x0a\x05v1")); !errors.Is(err, ErrStorageFormat) {
		t.Errorf("truncated envelope: err = %v, want ErrStorageFormat", err)
	}
}

// TestOldStorageFormatRefused: the API service stores objects in
// kube-apiserver's envelope, and answers a read of a value an older build
// wrote (its marker and protobuf, or plain protobuf) with an InternalError
// naming the format.
func TestOldStorageFormatRefused(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	cm := &corev1.ConfigMap{Metadata: om("default", "new"), Data: map[string]string{"k": "v"}}
	if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm}); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(context.Background(), "/registry/configmaps/default/new")
	if err != nil || len(resp.Kvs) != 1 || !bytes.HasPrefix(resp.Kvs[0].Value, []byte("k8s\x00\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12")) {
		t.Fatalf("stored value is not in kube-apiserver's envelope: %v %v", resp, err)
	}
	old, err := proto.Marshal(&corev1.ConfigMap{Metadata: om("default", "old"), Data: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range [][]byte{append([]byte(oldMagic), old...), old} {
		if _, err := cli.Put(context.Background(), "/registry/configmaps/default/old", string(v)); err != nil {
			t.Fatal(err)
		}
		_, err = e.cms.GetConfigMap(ctx, &corev1.GetConfigMapRequest{Namespace: "default", Name: "old"})
		if err == nil {
			t.Fatalf("an older build's value %q was read", v)
		}
		if apierrors.ReasonOf(err) != apierrors.ReasonInternalError || !strings.Contains(err.Error(), "kplane-pb2") || !strings.Contains(err.Error(), "older") {
			t.Fatalf("err = %v, want an InternalError naming the storage format", err)
		}
	}
}

// TestOldStoreRefusedAtStart: an API service started on a store whose
// objects an older build wrote ("kplane-pb2\x00") stops at once with an
// error naming both formats.
func TestOldStoreRefusedAtStart(t *testing.T) {
	e := newEnv(t, nil)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	old, err := proto.Marshal(&rbacv1.ClusterRoleBinding{Metadata: om("", "aaa-old")})
	if err != nil {
		t.Fatal(err)
	}
	old = append([]byte(oldMagic), old...)
	// The first key of the store: before every key the running service
	// wrote (its bootstrap RBAC, namespaces...).
	if _, err := cli.Put(context.Background(), "/registry/clusterrolebindings/aaa-old", string(old)); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{StoreEndpoints: e.eps, Authenticator: tokenAuthn{}, Authorizer: denyNobody{}})
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Run(context.Background())
	if !errors.Is(err, ErrStorageFormat) || !strings.Contains(err.Error(), "kplane-pb2") || !strings.Contains(err.Error(), `k8s\x00`) {
		t.Fatalf("Run = %v, want ErrStorageFormat naming both formats", err)
	}
}

// TestOldStoreRefusedAtStartBehindCustomResources: a store whose first key
// is a custom object's (JSON, as kube-apiserver stores them) is checked on
// a namespace instead.
func TestOldStoreRefusedAtStartBehindCustomResources(t *testing.T) {
	e := newEnv(t, nil)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	bg := context.Background()
	if _, err := cli.Put(bg, "/registry/a.example.com/widgets/default/w", `{"apiVersion":"a.example.com/v1","kind":"Widget"}`); err != nil {
		t.Fatal(err)
	}
	start := func() error {
		srv, err := New(Config{StoreEndpoints: e.eps, Authenticator: tokenAuthn{}, Authorizer: denyNobody{}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		select {
		case err := <-done:
			cancel()
			return err
		case <-srv.Ready():
			cancel()
			return <-done
		}
	}
	if err := start(); err != nil {
		t.Fatalf("a store in this build's format behind a custom object: Run = %v", err)
	}
	old, err := proto.Marshal(&corev1.Namespace{Metadata: om("", "aaa-old")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(bg, "/registry/namespaces/aaa-old", string(old)); err != nil {
		t.Fatal(err)
	}
	if err := start(); !errors.Is(err, ErrStorageFormat) {
		t.Fatalf("Run = %v, want ErrStorageFormat", err)
	}
}
