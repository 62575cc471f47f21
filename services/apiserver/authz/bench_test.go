// This file holds the benchmark of an RBAC authorization decision.

package authz

import (
	"context"
	"fmt"
	"testing"

	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// BenchmarkAuthorize measures one decision with the bootstrap policy plus
// 100 namespaces each holding 10 role bindings, for a user bound in one of
// them (allowed) and for a user bound nowhere (denied after every binding).
func BenchmarkAuthorize(b *testing.B) {
	r := NewRBAC(nil)
	msgs, err := BootstrapMessages()
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range msgs {
		r.Upsert(m)
	}
	for ns := range 100 {
		for i := range 10 {
			r.Upsert(&rbacv1.RoleBinding{Metadata: meta(fmt.Sprintf("ns-%d", ns), fmt.Sprintf("rb-%d", i)),
				Subjects: []*rbacv1.Subject{{Kind: "User", Name: fmt.Sprintf("user-%d-%d", ns, i)}},
				RoleRef:  &rbacv1.RoleRef{Kind: "ClusterRole", Name: "edit"}})
		}
	}
	u := NewDefault(r, nil)
	for _, bc := range []struct {
		name string
		a    request.Attributes
	}{
		{name: "allowed", a: request.Attributes{User: request.User{Name: "user-50-9", Groups: []string{request.AuthenticatedGroup}},
			Verb: "update", APIGroup: "apps", Resource: "deployments", Namespace: "ns-50", Name: "web"}},
		{name: "denied", a: request.Attributes{User: request.User{Name: "nobody", Groups: []string{request.AuthenticatedGroup}},
			Verb: "update", APIGroup: "apps", Resource: "deployments", Namespace: "ns-50", Name: "web"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := u.Authorize(context.Background(), bc.a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
