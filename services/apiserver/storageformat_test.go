// This file tests the storage format marker: objects are stored marked,
// and a value written without it (an older build's format) is refused
// with an error naming the format, never misread.

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
)

func TestUnmarkStored(t *testing.T) {
	b, err := proto.Marshal(&corev1.ConfigMap{Metadata: om("default", "c"), Data: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := unmarkStored("/registry/configmaps/default/c", append([]byte(storageMagic), b...))
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("marked value: %q, %v", got, err)
	}
	for _, v := range [][]byte{b, nil, []byte("k8s\x00\x0a\x02v1")} {
		if _, err := unmarkStored("/registry/configmaps/default/c", v); !errors.Is(err, ErrStorageFormat) || !strings.Contains(err.Error(), "kplane-pb2") {
			t.Errorf("unmarked value %q: err = %v, want ErrStorageFormat naming the format", v, err)
		}
	}
}

// TestOldStorageFormatRefused: the API service stores objects with the
// marker, and answers a read of a value an older build wrote (plain
// protobuf, other field numbers) with an InternalError naming the format.
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
	if err != nil || len(resp.Kvs) != 1 || !bytes.HasPrefix(resp.Kvs[0].Value, []byte(storageMagic)) {
		t.Fatalf("stored value lacks the format marker: %v %v", resp, err)
	}
	old, err := proto.Marshal(&corev1.ConfigMap{Metadata: om("default", "old"), Data: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), "/registry/configmaps/default/old", string(old)); err != nil {
		t.Fatal(err)
	}
	_, err = e.cms.GetConfigMap(ctx, &corev1.GetConfigMapRequest{Namespace: "default", Name: "old"})
	if err == nil {
		t.Fatal("an unmarked (older build's) value was read")
	}
	if apierrors.ReasonOf(err) != apierrors.ReasonInternalError || !strings.Contains(err.Error(), "kplane-pb2") || !strings.Contains(err.Error(), "older") {
		t.Fatalf("err = %v, want an InternalError naming the storage format", err)
	}
}

// TestOldStoreRefusedAtStart: an API service started on a store whose
// objects an older build wrote stops at once with an error naming the
// format.
func TestOldStoreRefusedAtStart(t *testing.T) {
	e := newEnv(t, nil)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	old, err := proto.Marshal(&corev1.ConfigMap{Metadata: om("default", "old")})
	if err != nil {
		t.Fatal(err)
	}
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
	if !errors.Is(err, ErrStorageFormat) || !strings.Contains(err.Error(), "kplane-pb2") {
		t.Fatalf("Run = %v, want ErrStorageFormat naming the format", err)
	}
}

// TestOldStoreRefusedAtStartBehindCustomResources: a store whose first key
// is a custom object's (JSON, unmarked by design) is checked on a
// namespace instead.
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
