// This file holds impersonation: a request acting as another user, groups or
// uid once the authorizer allowed the caller to impersonate each, as
// Kubernetes checks it.

package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/identity"
	"github.com/kplane/kplane/services/apiserver/request"
)

// impersonate returns the user the authenticated user u acts as: u itself
// when the request asks for no impersonation, else the requested user,
// after the authorizer allowed u the verb "impersonate" on each requested
// user (or service account), group and uid, as Kubernetes checks it. The
// impersonated user gets system:authenticated (system:unauthenticated for
// system:anonymous) and, for a service account without requested groups,
// system:serviceaccounts and system:serviceaccounts:<namespace>.
func (s *Server) impersonate(ctx context.Context, u request.User) (request.User, bool, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	names, groups, uids := md.Get(identity.ActAsUserKey), md.Get(identity.ActAsGroupKey), md.Get(identity.ActAsUIDKey)
	var extras []string
	for k := range md {
		if strings.HasPrefix(k, identity.ActAsExtraKeyPrefix) {
			extras = append(extras, k)
		}
	}
	if len(names) == 0 && len(groups) == 0 && len(uids) == 0 && len(extras) == 0 {
		return u, false, nil
	}
	if len(names) != 1 || names[0] == "" {
		return request.User{}, false, apierrors.NewBadRequest(fmt.Sprintf(
			"requested impersonation of groups %q, uid %q without impersonating exactly one user", groups, uids))
	}
	if len(extras) > 0 {
		return request.User{}, false, apierrors.NewBadRequest("impersonating user extras (Impersonate-Extra-*) is not supported")
	}
	if len(uids) > 1 {
		return request.User{}, false, apierrors.NewBadRequest("Impersonate-Uid may be given once")
	}
	target := request.User{Name: names[0]}
	if len(uids) == 1 {
		target.UID = uids[0]
	}
	checks := []request.Attributes{{Verb: "impersonate", Resource: "users", Name: target.Name}}
	if rest, ok := strings.CutPrefix(target.Name, serviceAccountPrefix); ok {
		if ns, sa, ok := strings.Cut(rest, ":"); ok {
			checks[0] = request.Attributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: ns, Name: sa}
			if len(groups) == 0 {
				target.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}
			}
		}
	}
	for _, g := range groups {
		if g == "" {
			return request.User{}, false, apierrors.NewBadRequest("Impersonate-Group may not be empty")
		}
		checks = append(checks, request.Attributes{Verb: "impersonate", Resource: "groups", Name: g})
		if !slices.Contains(target.Groups, g) {
			target.Groups = append(target.Groups, g)
		}
	}
	if target.UID != "" {
		checks = append(checks, request.Attributes{Verb: "impersonate", APIGroup: "authentication.k8s.io", Resource: "uids", Name: target.UID})
	}
	for _, a := range checks {
		a.User = u
		a.APIVersion = "v1"
		d, err := s.cfg.Authorizer.Authorize(ctx, a)
		if err != nil {
			return request.User{}, false, apierrors.NewInternalError(fmt.Errorf("authorizer: %w", err))
		}
		if !d.Allowed {
			why := d.Reason
			if why == "" {
				why = forbiddenReason(a)
			}
			return request.User{}, false, apierrors.NewForbidden(a.APIGroup, a.Resource, a.Name, why)
		}
	}
	switch {
	case target.Name == request.AnonymousUser:
		if !slices.Contains(target.Groups, request.UnauthenticatedGroup) {
			target.Groups = append(target.Groups, request.UnauthenticatedGroup)
		}
	case !slices.Contains(target.Groups, request.AuthenticatedGroup):
		target.Groups = append(target.Groups, request.AuthenticatedGroup)
	}
	return target, true, nil
}

// serviceAccountPrefix prefixes a service account's user name:
// system:serviceaccount:<namespace>:<name>.
const serviceAccountPrefix = "system:serviceaccount:"
