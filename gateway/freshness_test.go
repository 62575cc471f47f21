// This file holds the tests of read-your-writes through the gateway: a
// caller's reads carry its latest write's revision, others' do not, and
// the memory of it expires.
package gateway

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/identity"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// recordingConn answers every call with an object at revision rev and
// keeps the min-revision each call carried.
type recordingConn struct {
	grpc.ClientConnInterface
	rev  string
	seen []string
}

func (c *recordingConn) Invoke(ctx context.Context, _ string, _, reply any, _ ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	v := md.Get(identity.MinRevisionKey)
	if len(v) == 0 {
		v = []string{""}
	}
	c.seen = append(c.seen, v[0])
	if r, ok := reply.(*corev1.CreateConfigMapResponse); ok {
		proto.Merge(r, &corev1.CreateConfigMapResponse{ConfigMap: &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{ResourceVersion: c.rev}}})
	}
	return nil
}

func TestReadYourWrites(t *testing.T) {
	rc := &recordingConn{rev: "42"}
	fc := newFreshConn(rc)
	now := time.Unix(1000, 0)
	fc.now = func() time.Time { return now }
	as := func(user string) context.Context {
		return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(identity.ImpersonateUserKey, user))
	}
	call := func(ctx context.Context, method string, reply any) string {
		t.Helper()
		if err := fc.Invoke(ctx, method, nil, reply); err != nil {
			t.Fatal(err)
		}
		return rc.seen[len(rc.seen)-1]
	}
	const (
		create = "/kplane.core.v1.ConfigMapService/CreateConfigMap"
		get    = "/kplane.core.v1.ConfigMapService/GetConfigMap"
		list   = "/kplane.core.v1.ConfigMapService/ListConfigMaps"
	)
	if got := call(as("alice"), get, &corev1.GetConfigMapResponse{}); got != "" {
		t.Errorf("a read before any write carried %q", got)
	}
	call(as("alice"), create, &corev1.CreateConfigMapResponse{})
	if got := call(as("alice"), get, &corev1.GetConfigMapResponse{}); got != "42" {
		t.Errorf("alice's get after her write carried %q, want 42", got)
	}
	if got := call(as("alice"), list, &corev1.ListConfigMapsResponse{}); got != "42" {
		t.Errorf("alice's list after her write carried %q, want 42", got)
	}
	if got := call(as("bob"), get, &corev1.GetConfigMapResponse{}); got != "" {
		t.Errorf("bob's get carried alice's write: %q", got)
	}
	// An older revision (a write answered late) never lowers it.
	rc.rev = "7"
	call(as("alice"), create, &corev1.CreateConfigMapResponse{})
	if got := call(as("alice"), get, &corev1.GetConfigMapResponse{}); got != "42" {
		t.Errorf("after an older write: %q, want 42", got)
	}
	now = now.Add(freshnessWindow + time.Second)
	if got := call(as("alice"), get, &corev1.GetConfigMapResponse{}); got != "" {
		t.Errorf("after the window: %q, want none", got)
	}
}
