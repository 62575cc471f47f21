// This file serves authorization.k8s.io/v1: SelfSubjectAccessReview,
// SubjectAccessReview and LocalSubjectAccessReview answered by the service's
// own authorizer, and SelfSubjectRulesReview from its rule resolver.

package apiserver

import (
	"context"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kplane/kplane/proto/apierrors"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// accessReviews serves authorization.k8s.io/v1 SelfSubjectAccessReview,
// SubjectAccessReview, LocalSubjectAccessReview and SelfSubjectRulesReview:
// the caller (who must be allowed to create the review) asks the service's
// authorizers a question; nothing is stored.
type accessReviews struct {
	authorizationv1.UnimplementedAuthorizationServiceServer
	s *Server
}

var (
	selfReviews  = &resourceInfo{Group: "authorization.k8s.io", Version: "v1", Kind: "SelfSubjectAccessReview", Resource: "selfsubjectaccessreviews"}
	reviews      = &resourceInfo{Group: "authorization.k8s.io", Version: "v1", Kind: "SubjectAccessReview", Resource: "subjectaccessreviews"}
	localReviews = &resourceInfo{Group: "authorization.k8s.io", Version: "v1", Kind: "LocalSubjectAccessReview", Resource: "localsubjectaccessreviews", Namespaced: true}
	selfRules    = &resourceInfo{Group: "authorization.k8s.io", Version: "v1", Kind: "SelfSubjectRulesReview", Resource: "selfsubjectrulesreviews"}
)

func (x *accessReviews) CreateSelfSubjectAccessReview(ctx context.Context, req *authorizationv1.CreateSelfSubjectAccessReviewRequest) (*authorizationv1.CreateSelfSubjectAccessReviewResponse, error) {
	review := req.GetSelfSubjectAccessReview()
	st, err := x.s.review(ctx, selfReviews, "", review.GetSpec().GetResourceAttributes(), review.GetSpec().GetNonResourceAttributes(), nil, nil)
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
	st, err := x.s.review(ctx, reviews, "", spec.GetResourceAttributes(), spec.GetNonResourceAttributes(), subject, nil)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &authorizationv1.CreateSubjectAccessReviewResponse{SubjectAccessReview: &authorizationv1.SubjectAccessReview{
		ApiVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview", Metadata: review.GetMetadata(), Spec: spec, Status: st,
	}}, nil
}

// CreateLocalSubjectAccessReview is a SubjectAccessReview confined to the
// namespace the request names: the caller needs create on
// localsubjectaccessreviews there only (admin has it), the review's
// metadata.namespace (set from the request's when empty) and
// spec.resourceAttributes.namespace must be that namespace, and
// non-resource attributes are refused, as on Kubernetes.
func (x *accessReviews) CreateLocalSubjectAccessReview(ctx context.Context, req *authorizationv1.CreateLocalSubjectAccessReviewRequest) (*authorizationv1.CreateLocalSubjectAccessReviewResponse, error) {
	review := proto.Clone(req.GetLocalSubjectAccessReview()).(*authorizationv1.LocalSubjectAccessReview)
	if review.Metadata == nil {
		review.Metadata = &metav1.ObjectMeta{}
	}
	ns := req.GetNamespace()
	spec := review.GetSpec()
	subject := &request.User{Name: spec.GetUser(), UID: spec.GetUid(), Groups: spec.GetGroups()}
	check := func() (field.ErrorList, error) {
		if ns == "" {
			return nil, apierrors.NewBadRequest("namespace is required on this type: ")
		}
		switch review.Metadata.Namespace {
		case "":
			review.Metadata.Namespace = ns
		case ns:
		default:
			return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		var errs field.ErrorList
		rest := proto.Clone(review.Metadata).(*metav1.ObjectMeta)
		rest.Namespace, rest.ManagedFields = "", nil
		if !proto.Equal(rest, &metav1.ObjectMeta{}) {
			errs = append(errs, field.Invalid(field.NewPath("metadata"), prototext.Format(rest), "must be empty except for namespace"))
		}
		if ra := spec.GetResourceAttributes(); ra != nil && ra.GetNamespace() != review.Metadata.Namespace {
			errs = append(errs, field.Invalid(field.NewPath("spec", "resourceAttributes", "namespace"), ra.GetNamespace(), "must match metadata.namespace"))
		}
		if nra := spec.GetNonResourceAttributes(); nra != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "nonResourceAttributes"), prototext.Format(nra), "disallowed on this kind of request"))
		}
		return errs, nil
	}
	st, err := x.s.review(ctx, localReviews, ns, spec.GetResourceAttributes(), spec.GetNonResourceAttributes(), subject, check)
	if err != nil {
		return nil, toGRPC(err)
	}
	review.ApiVersion, review.Kind, review.Status = "authorization.k8s.io/v1", "LocalSubjectAccessReview", st
	return &authorizationv1.CreateLocalSubjectAccessReviewResponse{LocalSubjectAccessReview: review}, nil
}

// review authenticates the caller, checks it may create the review (in
// namespace ns, for a namespaced review), validates the spec and, with
// check, the rest of the review (check's error, a Bad Request, comes before
// any field error, as Kubernetes checks the namespace before validating),
// then asks the authorizer
// about subject (the caller itself if nil).
func (s *Server) review(ctx context.Context, r *resourceInfo, ns string, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes, subject *request.User, check func() (field.ErrorList, error)) (_ *authorizationv1.SubjectAccessReviewStatus, err error) {
	c := s.begin(ctx, "create", r, "", ns, "")
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	var errs field.ErrorList
	spec := field.NewPath("spec")
	switch {
	case ra != nil && nra != nil:
		errs = append(errs, field.Invalid(spec.Child("nonResourceAttributes"), prototext.Format(nra), "cannot be specified in combination with resourceAttributes"))
	case ra == nil && nra == nil:
		errs = append(errs, field.Invalid(spec.Child("resourceAttributes"), nil, "exactly one of nonResourceAttributes or resourceAttributes must be specified"))
	}
	if subject != nil && subject.Name == "" && len(subject.Groups) == 0 {
		errs = append(errs, field.Invalid(spec.Child("user"), "", "at least one of user or group must be specified"))
	}
	if check != nil {
		more, err := check()
		if err != nil {
			return nil, err
		}
		errs = append(errs, more...)
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
		return &authorizationv1.SubjectAccessReviewStatus{Allowed: false, EvaluationError: aerr.Error()}, nil
	}
	return &authorizationv1.SubjectAccessReviewStatus{Allowed: d.Allowed, Reason: d.Reason}, nil
}

func (x *accessReviews) CreateSelfSubjectRulesReview(ctx context.Context, req *authorizationv1.CreateSelfSubjectRulesReviewRequest) (*authorizationv1.CreateSelfSubjectRulesReviewResponse, error) {
	review := req.GetSelfSubjectRulesReview()
	st, err := x.s.rulesReview(ctx, review.GetSpec().GetNamespace())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &authorizationv1.CreateSelfSubjectRulesReviewResponse{SelfSubjectRulesReview: &authorizationv1.SelfSubjectRulesReview{
		ApiVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectRulesReview", Metadata: review.GetMetadata(), Spec: review.GetSpec(), Status: st,
	}}, nil
}

// rulesReview authenticates the caller, checks it may create the review,
// then lists the rules the authorizer has for it in namespace.
func (s *Server) rulesReview(ctx context.Context, namespace string) (_ *authorizationv1.SubjectRulesReviewStatus, err error) {
	c := s.begin(ctx, "create", selfRules, "", "", "")
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	if namespace == "" {
		return nil, apierrors.NewBadRequest("no namespace on request")
	}
	rr, ok := s.cfg.Authorizer.(RuleResolver)
	if !ok {
		return &authorizationv1.SubjectRulesReviewStatus{Incomplete: true, EvaluationError: "the authorizer cannot list rules"}, nil
	}
	rules, incomplete, rerr := rr.RulesFor(ctx, c.attrs.User, namespace)
	st := &authorizationv1.SubjectRulesReviewStatus{Incomplete: incomplete}
	if rerr != nil {
		st.EvaluationError = rerr.Error()
	}
	for _, r := range rules {
		if len(r.Resources) > 0 {
			st.ResourceRules = append(st.ResourceRules, &authorizationv1.ResourceRule{
				Verbs: r.Verbs, ApiGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames})
		}
		if len(r.NonResourceURLs) > 0 {
			st.NonResourceRules = append(st.NonResourceRules, &authorizationv1.NonResourceRule{
				Verbs: r.Verbs, NonResourceUrls: r.NonResourceURLs})
		}
	}
	return st, nil
}
