package apiserver

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"

	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// accessReviews serves authorization.k8s.io/v1 SelfSubjectAccessReview and
// SubjectAccessReview: the caller (who must be allowed to create the
// review) asks the service's authorizers a question; nothing is stored.
type accessReviews struct {
	authorizationv1.UnimplementedAuthorizationServiceServer
	s *Server
}

var (
	selfReviews = &resourceInfo{Group: "authorization.k8s.io", Version: "v1", Kind: "SelfSubjectAccessReview", Resource: "selfsubjectaccessreviews"}
	reviews     = &resourceInfo{Group: "authorization.k8s.io", Version: "v1", Kind: "SubjectAccessReview", Resource: "subjectaccessreviews"}
)

func (x *accessReviews) CreateSelfSubjectAccessReview(ctx context.Context, req *authorizationv1.CreateSelfSubjectAccessReviewRequest) (*authorizationv1.CreateSelfSubjectAccessReviewResponse, error) {
	review := req.GetSelfSubjectAccessReview()
	st, err := x.s.review(ctx, selfReviews, review.GetSpec().GetResourceAttributes(), review.GetSpec().GetNonResourceAttributes(), nil)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &authorizationv1.CreateSelfSubjectAccessReviewResponse{SelfSubjectAccessReview: &authorizationv1.SelfSubjectAccessReview{
		ApiVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview", Metadata: review.GetMetadata(), Spec: review.GetSpec(), Status: st,
	}}, nil
}

func (x *accessReviews) CreateSubjectAccessReview(ctx context.Context, req *authorizationv1.CreateSubjectAccessReviewRequest) (*authorizationv1.CreateSubjectAccessReviewResponse, error) {
	review := req.GetSubjectAccessReview()
	spec := review.GetSpec()
	subject := &request.User{Name: spec.GetUser(), UID: spec.GetUid(), Groups: spec.GetGroups()}
	st, err := x.s.review(ctx, reviews, spec.GetResourceAttributes(), spec.GetNonResourceAttributes(), subject)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &authorizationv1.CreateSubjectAccessReviewResponse{SubjectAccessReview: &authorizationv1.SubjectAccessReview{
		ApiVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview", Metadata: review.GetMetadata(), Spec: spec, Status: st,
	}}, nil
}

// review authenticates the caller, checks it may create the review, then
// asks the authorizer about subject (the caller itself if nil).
func (s *Server) review(ctx context.Context, r *resourceInfo, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes, subject *request.User) (_ *authorizationv1.SubjectAccessReviewStatus, err error) {
	c := s.begin(ctx, "create", r, "", "", "")
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if (ra == nil) == (nra == nil) {
		errs = append(errs, field.Invalid(spec.Child("resourceAttributes"), nil, "exactly one of nonResourceAttributes or resourceAttributes must be specified"))
	}
	if subject != nil && subject.Name == "" && len(subject.Groups) == 0 {
		errs = append(errs, field.Invalid(spec.Child("user"), "", "at least one of user or group must be specified"))
	}
	if len(errs) > 0 {
		return nil, invalid(r, "", errs)
	}
	who := c.attrs.User
	if subject != nil {
		who = *subject
	}
	a := request.Attributes{User: who}
	if ra != nil {
		a.Verb, a.APIGroup, a.APIVersion, a.Resource = ra.GetVerb(), ra.GetGroup(), ra.GetVersion(), ra.GetResource()
		a.Subresource, a.Namespace, a.Name = ra.GetSubresource(), ra.GetNamespace(), ra.GetName()
	} else {
		a.Verb, a.Path = nra.GetVerb(), nra.GetPath()
	}
	d, aerr := s.cfg.Authorizer.Authorize(ctx, a)
	if aerr != nil {
		return &authorizationv1.SubjectAccessReviewStatus{EvaluationError: aerr.Error()}, nil
	}
	return &authorizationv1.SubjectAccessReviewStatus{Allowed: d.Allowed, Reason: d.Reason}, nil
}
