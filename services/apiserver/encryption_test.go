// This file holds the test of encryption at rest through the service: no
// plaintext in the store, reads decrypted, and key rotation.

package apiserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/encryption"
)

func encryptionConfig(t *testing.T, keys ...string) *encryption.Transformers {
	t.Helper()
	doc := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n"
	for _, k := range keys {
		doc += "      - name: " + k + "\n        secret: " + base64.StdEncoding.EncodeToString([]byte(strings.Repeat(k, 32)[:32])) + "\n"
	}
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := encryption.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestEncryptionAtRest: with an EncryptionConfiguration for secrets, the
// store holds no plaintext (read raw with the etcd client) and reads
// through the API decrypt; after a new key is listed first (rotation), a
// service reads what the old key wrote and writes with the new one.
func TestEncryptionAtRest(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Encryption = encryptionConfig(t, "k1") })
	ctx := admin(t)
	secret := &corev1.Secret{Metadata: om("default", "db"), Data: map[string][]byte{"password": []byte("hunter2-plaintext")}}
	if _, err := e.srv.secretsClient(t).CreateSecret(ctx, &corev1.CreateSecretRequest{Namespace: "default", Secret: secret}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{Metadata: om("default", "cfg"), Data: map[string]string{"k": "visible-plaintext"}}
	if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm}); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	raw := func(key string) []byte {
		t.Helper()
		resp, err := cli.Get(context.Background(), key)
		if err != nil {
			t.Fatalf("raw read of %s: %v", key, err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("raw read of %s: %d keys", key, len(resp.Kvs))
		}
		return resp.Kvs[0].Value
	}
	v := raw("/registry/secrets/default/db")
	if !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:k1:")) || bytes.Contains(v, []byte("hunter2")) {
		t.Fatalf("stored secret is not encrypted with k1: %q", v[:min(len(v), 40)])
	}
	if !bytes.Contains(raw("/registry/configmaps/default/cfg"), []byte("visible-plaintext")) {
		t.Error("a configmap (not configured) was transformed")
	}
	got, err := e.srv.secretsClient(t).GetSecret(ctx, &corev1.GetSecretRequest{Namespace: "default", Name: "db"})
	if err != nil || string(got.GetSecret().GetData()["password"]) != "hunter2-plaintext" {
		t.Fatalf("read through the API: %v, %v", got, err)
	}

	// Rotation: a second service on the same store with [k2, k1].
	rotated, err := New(Config{StoreEndpoints: e.eps, Authenticator: tokenAuthn{}, Authorizer: denyNobody{}, Encryption: encryptionConfig(t, "k2", "k1")})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rotated.Run(rctx) }()
	defer func() { cancel(); <-done }()
	<-rotated.Ready()
	rs := rotated.secretsClient(t)
	got, err = rs.GetSecret(ctx, &corev1.GetSecretRequest{Namespace: "default", Name: "db"})
	if err != nil || string(got.GetSecret().GetData()["password"]) != "hunter2-plaintext" {
		t.Fatalf("read after rotation: %v, %v", got, err)
	}
	s := got.GetSecret()
	s.Data["password"] = []byte("rotated-plaintext")
	if _, err := rs.UpdateSecret(ctx, &corev1.UpdateSecretRequest{Namespace: "default", Name: "db", Secret: s}); err != nil {
		t.Fatal(err)
	}
	if v := raw("/registry/secrets/default/db"); !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:k2:")) || bytes.Contains(v, []byte("rotated")) {
		t.Fatalf("rewritten secret is not encrypted with k2: %q", v[:min(len(v), 40)])
	}
	// The first service (k1 only) cannot read the k2 value: an error, not
	// garbage.
	if _, err := e.srv.secretsClient(t).GetSecret(ctx, &corev1.GetSecretRequest{Namespace: "default", Name: "db"}); err == nil {
		t.Error("a service without k2 read a k2 value")
	}
}

// secretsClient dials s as admin.
func (s *Server) secretsClient(t *testing.T) corev1.SecretServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return corev1.NewSecretServiceClient(conn)
}
