// This file serves the service account issuer discovery documents,
// /.well-known/openid-configuration and /openid/v1/jwks, as kube-apiserver
// does: the API service authorizes the non-resource path (Kubernetes'
// system:service-account-issuer-discovery role lets every ServiceAccount
// get them) and holds the documents.
package gateway

import (
	"net/http"

	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/apierrors"
	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
)

// The paths of the discovery documents, as kube-apiserver serves them.
const (
	openIDConfigPath = "/.well-known/openid-configuration"
	jwksPath         = "/openid/v1/jwks"
)

func (g *Gateway) serveIssuerDiscovery(w http.ResponseWriter, r *http.Request, path, auditID string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, methodNotAllowed())
		return
	}
	md, err := g.identity(r)
	if err != nil {
		writeError(w, err)
		return
	}
	md = withOrigin(withImpersonation(md, r.Header), r, auditID)
	ctx := r.Context()
	if md != nil {
		ctx = metadata.NewOutgoingContext(ctx, md)
	} else if auth := r.Header.Get("Authorization"); auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	var body []byte
	contentType := "application/json"
	if path == jwksPath {
		resp, err := g.issuer.GetServiceAccountIssuerJWKS(ctx, &authenticationv1.GetServiceAccountIssuerJWKSRequest{})
		if err != nil {
			writeError(w, apierrors.FromError(err))
			return
		}
		body, contentType = resp.GetJson(), "application/jwk-set+json"
	} else {
		resp, err := g.issuer.GetServiceAccountIssuerOpenIDConfiguration(ctx, &authenticationv1.GetServiceAccountIssuerOpenIDConfigurationRequest{})
		if err != nil {
			writeError(w, apierrors.FromError(err))
			return
		}
		body = resp.GetJson()
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}
