// This file holds the test that a JSON list holds its in-flight slot until
// its caller has read it, as kube-apiserver holds a list's seat while it
// writes the response.

package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	listjsonv1 "github.com/kplane/kplane/proto/kplane/listjson/v1"
)

func TestListJSONHoldsItsSlotUntilRead(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxRequestsInflight = 1 })
	ctx := admin(t)
	// 2 MB of ConfigMaps: eight pieces, far more than the flow-control
	// windows below let the API service send ahead of the reader.
	value := strings.Repeat("x", 20<<10)
	for i := range 100 {
		cm := &corev1.ConfigMap{Metadata: om("default", fmt.Sprintf("big-%03d", i)), Data: map[string]string{"v": value}}
		if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm}); err != nil {
			t.Fatal(err)
		}
	}
	// Fixed 64 KiB windows (no BDP growth), so that the client's transport
	// does not take the whole List in before the test reads it.
	conn, err := grpc.NewClient(e.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lists := listjsonv1.NewListJSONServiceClient(conn)
	req := &listjsonv1.ListJSONRequest{Version: "v1", Resource: "configmaps", Namespace: "default"}

	stream, err := lists.ListJSON(as(t, "alice"), req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	// Unread, the list still holds the only read slot: another read waits
	// in no queue and is refused, as on kube-apiserver.
	_, err = e.cms.ListConfigMaps(as(t, "bob"), &corev1.ListConfigMapsRequest{Namespace: "kube-system"})
	if se := apierrors.FromError(err); se == nil || se.Code != 429 {
		t.Fatalf("a read while a list is being read: %v, want 429", err)
	}

	var all bytes.Buffer
	all.Write(first.GetData())
	for {
		piece, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		all.Write(piece.GetData())
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(all.Bytes(), &list); err != nil || len(list.Items) != 100 {
		t.Fatalf("the pieces joined: %d items, %v; want a List of 100", len(list.Items), err)
	}
	// Read to the end, the list has freed its slot.
	if _, err := e.cms.ListConfigMaps(as(t, "bob"), &corev1.ListConfigMapsRequest{Namespace: "kube-system"}); err != nil {
		t.Fatalf("a read after the list was read: %v", err)
	}
}
