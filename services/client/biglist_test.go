// This file holds the test that an unpaginated list larger than gRPC's
// default 4 MiB receive limit reaches a client dialled with client.Dial.

package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

// TestUnpaginatedListOverFourMiB: a list whose objects add up to more than
// grpc-go's default 4 MiB receive limit reaches a client dialled with
// client.Dial (the gateway's and every component's connection), as
// kube-apiserver answers an unpaginated list of any size.
func TestUnpaginatedListOverFourMiB(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	conn, err := client.Dial([]string{env.Addr}, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(client.BearerToken(apiservertest.AdminToken)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cms := corev1.NewConfigMapServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n, size = 6, 900 << 10 // 5.3 MiB in all, each object under the store's 1.5 MiB request limit
	for i := range n {
		c := &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "big-" + string(rune('a'+i))},
			Data: map[string]string{"blob": strings.Repeat("x", size)}}
		if _, err := cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: c}); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	resp, err := cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default"})
	if err != nil {
		t.Fatalf("list of %d ConfigMaps of %d KiB: %v", n, size>>10, err)
	}
	if got := len(resp.GetList().GetItems()); got != n {
		t.Fatalf("got %d ConfigMaps, want %d", got, n)
	}
}
