// This file holds the authorization of the non-resource paths the gateway
// answers itself (discovery, OpenAPI, /metrics): as kube-apiserver, it
// serves them only to callers RBAC lets get the path (Kubernetes' bootstrap
// policy gives system:discovery, bound to system:authenticated, the
// discovery and OpenAPI paths, and system:monitoring /metrics).

package gateway

import (
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/identity"
	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
)

// isDiscoveryPath reports whether path (without a trailing slash) is one the
// gateway answers from its own tables: /api, /apis, a group, a group
// version's resource list, or an OpenAPI document.
func isDiscoveryPath(path string) bool {
	if path == "/openapi/v2" || path == "/openapi/v3" || strings.HasPrefix(path, "/openapi/v3/") {
		return true
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) == 1:
		return parts[0] == "api" || parts[0] == "apis"
	case parts[0] == "api":
		return len(parts) == 2
	case parts[0] == "apis":
		return len(parts) == 2 || len(parts) == 3
	}
	return false
}

// authorizeDiscovery checks that the HTTP client may get path: 401 without
// valid credentials, 403 when RBAC does not allow it. It asks the API
// service with a SelfSubjectAccessReview for the non-resource path, on the
// client's identity. In forwarding mode (no Authenticator: the development
// setup without TLS) the gateway cannot tell who the client is, and serves
// discovery to anyone.
func (g *Gateway) authorizeDiscovery(r *http.Request, path string) error {
	if g.authn == nil {
		return nil
	}
	md, err := g.identity(r)
	if err != nil {
		return err
	}
	md = withImpersonation(md, r.Header)
	ctx := metadata.NewOutgoingContext(r.Context(), md)
	resp, err := g.reviews.CreateSelfSubjectAccessReview(ctx, &authorizationv1.CreateSelfSubjectAccessReviewRequest{
		SelfSubjectAccessReview: &authorizationv1.SelfSubjectAccessReview{Spec: &authorizationv1.SelfSubjectAccessReviewSpec{
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
		}},
	})
	if err != nil {
		return apierrors.FromError(err)
	}
	if resp.GetSelfSubjectAccessReview().GetStatus().GetAllowed() {
		return nil
	}
	user := md.Get(identity.ImpersonateUserKey)
	if as := r.Header.Get("Impersonate-User"); as != "" {
		user = []string{as}
	}
	name := ""
	if len(user) > 0 {
		name = user[0]
	} else if len(md.Get(identity.ForwardedTokenKey)) > 0 {
		// A forwarded token: only the API service knows whose it is.
		if r, err := g.issuer.CreateSelfSubjectReview(ctx, &authenticationv1.CreateSelfSubjectReviewRequest{}); err == nil {
			name = r.GetSelfSubjectReview().GetStatus().GetUserInfo().GetUsername()
		}
	}
	return &apierrors.StatusError{Reason: apierrors.ReasonForbidden, Code: http.StatusForbidden,
		Message: fmt.Sprintf("forbidden: User %q cannot get path %q", name, path)}
}
