// This file holds the end-to-end tests of ServiceAccount tokens against a
// real API service on a real store: TokenRequest (defaults, validation and
// bound objects with Kubernetes' errors), authentication of the tokens
// (valid, expired, wrong audience, wrong issuer, unknown key, ServiceAccount
// deleted or recreated, bound pod deleted), TokenReview, SelfSubjectReview
// and the issuer discovery documents.
package apiservertest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/apiserver/serviceaccount"
)

// tokenEnv is an API service with helpers for tokens.
type tokenEnv struct {
	*Env
	t     *testing.T
	auth  authenticationv1.AuthenticationServiceClient
	sas   corev1.ServiceAccountServiceClient
	pods  corev1.PodServiceClient
	sec   corev1.SecretServiceClient
	nodes corev1.NodeServiceClient
}

func newTokenEnv(t *testing.T) *tokenEnv {
	env := Start(t, Options{})
	conn := env.Dial(t, AdminToken)
	return &tokenEnv{Env: env, t: t, auth: authenticationv1.NewAuthenticationServiceClient(conn),
		sas: corev1.NewServiceAccountServiceClient(conn), pods: corev1.NewPodServiceClient(conn),
		sec: corev1.NewSecretServiceClient(conn), nodes: corev1.NewNodeServiceClient(conn)}
}

func (e *tokenEnv) createSA(name string) *corev1.ServiceAccount {
	e.t.Helper()
	r, err := e.sas.CreateServiceAccount(ctxT(e.t), &corev1.CreateServiceAccountRequest{Namespace: "default",
		ServiceAccount: &corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Name: name}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetServiceAccount()
}

func (e *tokenEnv) request(name string, spec *authenticationv1.TokenRequestSpec) (*authenticationv1.TokenRequest, error) {
	r, err := e.auth.CreateServiceAccountToken(ctxT(e.t), &authenticationv1.CreateServiceAccountTokenRequest{Namespace: "default", Name: name,
		TokenRequest: &authenticationv1.TokenRequest{Spec: spec}})
	return r.GetTokenRequest(), err
}

func (e *tokenEnv) token(name string, spec *authenticationv1.TokenRequestSpec) string {
	e.t.Helper()
	tr, err := e.request(name, spec)
	if err != nil {
		e.t.Fatalf("token for %s: %v", name, err)
	}
	return tr.GetStatus().GetToken()
}

// whoami is the SelfSubjectReview of the caller with token, or its error.
func (e *tokenEnv) whoami(token string) (*authenticationv1.UserInfo, error) {
	conn := e.Dial(e.t, token)
	r, err := authenticationv1.NewAuthenticationServiceClient(conn).CreateSelfSubjectReview(ctxT(e.t), &authenticationv1.CreateSelfSubjectReviewRequest{})
	return r.GetSelfSubjectReview().GetStatus().GetUserInfo(), err
}

func (e *tokenEnv) unauthorized(token string) bool {
	_, err := e.whoami(token)
	return err != nil && apierrors.FromError(err).Reason == apierrors.ReasonUnauthorized
}

// claims decodes a token's payload (unverified).
func claims(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a JWS", token)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTokenRequest(t *testing.T) {
	e := newTokenEnv(t)
	sa := e.createSA("robot")

	tr, err := e.request("robot", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.GetSpec().GetAudiences(); len(got) != 1 || got[0] != ServiceAccountIssuer {
		t.Errorf("spec.audiences: got %v, want [%s]", got, ServiceAccountIssuer)
	}
	if got := tr.GetSpec().GetExpirationSeconds(); got != 3600 {
		t.Errorf("spec.expirationSeconds: got %d, want 3600", got)
	}
	if tr.GetMetadata().GetName() != "robot" || tr.GetMetadata().GetNamespace() != "default" || tr.GetKind() != "TokenRequest" {
		t.Errorf("got %s %s/%s, want TokenRequest default/robot", tr.GetKind(), tr.GetMetadata().GetNamespace(), tr.GetMetadata().GetName())
	}
	c := claims(t, tr.GetStatus().GetToken())
	exp := tr.GetStatus().GetExpirationTimestamp().AsTime()
	if int64(c["exp"].(float64)) != exp.Unix() || int64(c["exp"].(float64))-int64(c["iat"].(float64)) != 3600 || c["nbf"] != c["iat"] {
		t.Errorf("times: got exp %v iat %v nbf %v, status expirationTimestamp %v", c["exp"], c["iat"], c["nbf"], exp)
	}
	if c["iss"] != ServiceAccountIssuer || c["sub"] != "system:serviceaccount:default:robot" || c["jti"] == "" {
		t.Errorf("claims: got %v", c)
	}
	k8s, _ := json.Marshal(c["kubernetes.io"])
	want := `{"namespace":"default","serviceaccount":{"name":"robot","uid":"` + sa.GetMetadata().GetUid() + `"}}`
	if string(k8s) != want {
		t.Errorf("kubernetes.io: got %s, want %s", k8s, want)
	}

	u, err := e.whoami(tr.GetStatus().GetToken())
	if err != nil {
		t.Fatal(err)
	}
	wantUser := &authenticationv1.UserInfo{Username: "system:serviceaccount:default:robot", Uid: sa.GetMetadata().GetUid(),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"},
		Extra:  map[string]*authenticationv1.ExtraValue{serviceaccount.ExtraCredentialID: {Items: []string{"JTI=" + c["jti"].(string)}}}}
	if !proto.Equal(u, wantUser) {
		t.Errorf("whoami: got %v, want %v", u, wantUser)
	}

	// The audit log: the TokenRequest's event names the issued credential
	// ID, and the token's requests carry it in their user's extra, as
	// Kubernetes records them.
	var issued, used bool
	f, err := os.Open(e.AuditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	credentialID := "JTI=" + c["jti"].(string)
	for sc.Scan() {
		var ev struct {
			User struct {
				Username string
				Extra    map[string][]string
			}
			ObjectRef   struct{ Resource, Subresource, Name string } `json:"objectRef"`
			Annotations map[string]string
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		switch {
		case ev.ObjectRef.Resource == "serviceaccounts" && ev.ObjectRef.Subresource == "token" &&
			ev.Annotations["authentication.kubernetes.io/issued-credential-id"] == credentialID:
			issued = true
		case ev.User.Username == "system:serviceaccount:default:robot" && slices.Equal(ev.User.Extra[serviceaccount.ExtraCredentialID], []string{credentialID}):
			used = true
		}
	}
	if !issued || !used {
		t.Errorf("audit log: TokenRequest with the issued credential ID %v, the token's use with it in user.extra %v; want both", issued, used)
	}

	// A longer request is kept (no --service-account-max-token-expiration here).
	if tr, err := e.request("robot", &authenticationv1.TokenRequestSpec{ExpirationSeconds: proto.Int64(7200), Audiences: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	} else if c := claims(t, tr.GetStatus().GetToken()); int64(c["exp"].(float64))-int64(c["iat"].(float64)) != 7200 || len(c["aud"].([]any)) != 2 {
		t.Errorf("got exp-iat %v and aud %v, want 7200 and [a b]", c["exp"].(float64)-c["iat"].(float64), c["aud"])
	}

	e.createSecret("s1")
	for _, tc := range []struct {
		name       string
		sa         string
		tr         *authenticationv1.TokenRequest
		wantReason apierrors.Reason
		wantMsg    string
		wantField  string
	}{
		{name: "too short", sa: "robot", tr: &authenticationv1.TokenRequest{Spec: &authenticationv1.TokenRequestSpec{ExpirationSeconds: proto.Int64(100)}},
			wantReason: apierrors.ReasonInvalid, wantField: "spec.expirationSeconds",
			wantMsg: `TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 100: may not specify a duration less than 10 minutes`},
		{name: "other name", sa: "robot", tr: &authenticationv1.TokenRequest{Metadata: &metav1.ObjectMeta{Name: "x"}},
			wantReason: apierrors.ReasonInvalid, wantField: "metadata.name",
			wantMsg: `TokenRequest.authentication.k8s.io "robot" is invalid: metadata.name: Invalid value: "x": must match the service account name if specified`},
		{name: "no such service account", sa: "nope", tr: &authenticationv1.TokenRequest{},
			wantReason: apierrors.ReasonNotFound, wantMsg: `serviceaccounts "nope" not found`},
		{name: "bound to a config map", sa: "robot", tr: bound("ConfigMap", "v1", "cm1", ""),
			wantReason: apierrors.ReasonBadRequest, wantMsg: "cannot bind token to object of type /v1, Kind=ConfigMap"},
		{name: "bound to a missing pod", sa: "robot", tr: bound("Pod", "v1", "p", ""),
			wantReason: apierrors.ReasonNotFound, wantMsg: `pods "p" not found`},
		{name: "bound to a missing node", sa: "robot", tr: bound("Node", "v1", "n", ""),
			wantReason: apierrors.ReasonNotFound, wantMsg: `nodes "n" not found`},
		{name: "bound to a secret of another uid", sa: "robot", tr: bound("Secret", "v1", "s1", "wrong"),
			wantReason: apierrors.ReasonConflict,
			wantMsg:    `Operation cannot be fulfilled on Secret "s1": the UID in the bound object reference (wrong) does not match the UID in record. The object might have been deleted and then recreated`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.auth.CreateServiceAccountToken(ctxT(t), &authenticationv1.CreateServiceAccountTokenRequest{Namespace: "default", Name: tc.sa, TokenRequest: tc.tr})
			se := apierrors.FromError(err)
			if err == nil || se.Reason != tc.wantReason || se.Message != tc.wantMsg {
				t.Fatalf("got %v (%s), want %s: %s", err, se.Reason, tc.wantReason, tc.wantMsg)
			}
			if tc.wantField != "" && (len(se.Causes) != 1 || se.Causes[0].Field != tc.wantField) {
				t.Errorf("causes: got %v, want one on %s", se.Causes, tc.wantField)
			}
		})
	}

	// RBAC: bob may not ask for a token until edit is his in default.
	bob := authenticationv1.NewAuthenticationServiceClient(e.Dial(t, BobToken))
	_, err = bob.CreateServiceAccountToken(ctxT(t), &authenticationv1.CreateServiceAccountTokenRequest{Namespace: "default", Name: "robot"})
	if se := apierrors.FromError(err); se.Reason != apierrors.ReasonForbidden ||
		se.Message != `serviceaccounts "robot" is forbidden: User "bob" cannot create resource "serviceaccounts/token" in API group "" in the namespace "default"` {
		t.Fatalf("bob: got %v, want Forbidden", err)
	}
	e.bind("bob-edit", "edit", &rbacv1.Subject{Kind: "User", ApiGroup: "rbac.authorization.k8s.io", Name: "bob"})
	testutil.Eventually(t, "bob may create tokens", func() bool {
		_, err := bob.CreateServiceAccountToken(ctxT(t), &authenticationv1.CreateServiceAccountTokenRequest{Namespace: "default", Name: "robot"})
		return err == nil
	})
}

func bound(kind, apiVersion, name, uid string) *authenticationv1.TokenRequest {
	return &authenticationv1.TokenRequest{Spec: &authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: kind, ApiVersion: apiVersion, Name: name, Uid: uid}}}
}

func (e *tokenEnv) createSecret(name string) *corev1.Secret {
	e.t.Helper()
	r, err := e.sec.CreateSecret(ctxT(e.t), &corev1.CreateSecretRequest{Namespace: "default", Secret: &corev1.Secret{Metadata: &metav1.ObjectMeta{Name: name}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetSecret()
}

// bind gives the subject the ClusterRole role in namespace default.
func (e *tokenEnv) bind(name, role string, subject *rbacv1.Subject) {
	e.t.Helper()
	rbs := rbacv1.NewRoleBindingServiceClient(e.Dial(e.t, AdminToken))
	_, err := rbs.CreateRoleBinding(ctxT(e.t), &rbacv1.CreateRoleBindingRequest{Namespace: "default", RoleBinding: &rbacv1.RoleBinding{
		Metadata: &metav1.ObjectMeta{Name: name},
		RoleRef:  &rbacv1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []*rbacv1.Subject{subject}}})
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestServiceAccountTokenAuthentication: which tokens authenticate and
// which get 401, as kube-apiserver's ServiceAccount token authenticator.
func TestServiceAccountTokenAuthentication(t *testing.T) {
	e := newTokenEnv(t)
	sa := e.createSA("robot")
	valid := e.token("robot", nil)
	if u, err := e.whoami(valid); err != nil || u.GetUsername() != "system:serviceaccount:default:robot" {
		t.Fatalf("valid token: got %v, %v", u, err)
	}
	ref := serviceaccount.Ref{Name: "robot", UID: sa.GetMetadata().GetUid()}
	issue := func(iss string, key *ecdsa.PrivateKey, now time.Time, auds ...string) string {
		t.Helper()
		i, err := serviceaccount.NewIssuer(iss, key)
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := i.Issue(now, serviceaccount.Binding{Namespace: "default", ServiceAccount: ref, Audiences: auds, ExpirationSeconds: 3600})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct {
		name  string
		token string
	}{
		{name: "expired", token: issue(ServiceAccountIssuer, e.ServiceAccountKey, now.Add(-2*time.Hour), ServiceAccountIssuer)},
		{name: "not valid yet", token: issue(ServiceAccountIssuer, e.ServiceAccountKey, now.Add(time.Hour), ServiceAccountIssuer)},
		{name: "wrong audience", token: e.token("robot", &authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}})},
		{name: "wrong issuer", token: issue("https://elsewhere.example", e.ServiceAccountKey, now, ServiceAccountIssuer)},
		{name: "unknown key", token: issue(ServiceAccountIssuer, otherKey, now, ServiceAccountIssuer)},
		{name: "tampered", token: valid[:len(valid)-4] + "AAAA"},
		{name: "not a JWT", token: "garbage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.whoami(tc.token)
			se := apierrors.FromError(err)
			if se.Reason != apierrors.ReasonUnauthorized || se.Message != "Unauthorized" {
				t.Errorf("got %v, want 401 Unauthorized", err)
			}
		})
	}
	// Within the leeway (a minute), as Kubernetes: a token that expired
	// 30 s ago still authenticates.
	if _, err := e.whoami(issue(ServiceAccountIssuer, e.ServiceAccountKey, now.Add(-time.Hour-30*time.Second), ServiceAccountIssuer)); err != nil {
		t.Errorf("token within the leeway: %v", err)
	}

	t.Run("service account deleted, then recreated", func(t *testing.T) {
		if _, err := e.sas.DeleteServiceAccount(ctxT(t), &corev1.DeleteServiceAccountRequest{Namespace: "default", Name: "robot"}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the token of a deleted ServiceAccount refused", func() bool { return e.unauthorized(valid) })
		again := e.createSA("robot")
		fresh := e.token("robot", nil)
		testutil.Eventually(t, "the recreated ServiceAccount's token accepted", func() bool { _, err := e.whoami(fresh); return err == nil })
		if !e.unauthorized(valid) {
			t.Errorf("a token of the ServiceAccount's old uid %s still authenticates (new uid %s)", sa.GetMetadata().GetUid(), again.GetMetadata().GetUid())
		}
	})

	t.Run("bound pod deleted", func(t *testing.T) {
		e.createSA("runner")
		pod, err := e.pods.CreatePod(ctxT(t), &corev1.CreatePodRequest{Namespace: "default", Pod: &corev1.Pod{
			Metadata: &metav1.ObjectMeta{Name: "p1"},
			Spec:     &corev1.PodSpec{ServiceAccountName: "runner", NodeName: "n1", Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		uid := pod.GetPod().GetMetadata().GetUid()
		tok := e.token("runner", bound("Pod", "v1", "p1", uid).GetSpec())
		k8s, _ := json.Marshal(claims(t, tok)["kubernetes.io"])
		if !strings.Contains(string(k8s), `"pod":{"name":"p1","uid":"`+uid+`"}`) || !strings.Contains(string(k8s), `"node":{"name":"n1"}`) {
			t.Errorf("kubernetes.io: got %s, want the pod and its (missing) node n1", k8s)
		}
		var u *authenticationv1.UserInfo
		testutil.Eventually(t, "the pod-bound token accepted", func() bool { u, err = e.whoami(tok); return err == nil })
		for k, want := range map[string]string{serviceaccount.ExtraPodName: "p1", serviceaccount.ExtraPodUID: uid, serviceaccount.ExtraNodeName: "n1"} {
			if got := u.GetExtra()[k].GetItems(); len(got) != 1 || got[0] != want {
				t.Errorf("extra %s: got %v, want [%s]", k, got, want)
			}
		}
		if _, ok := u.GetExtra()[serviceaccount.ExtraNodeUID]; ok {
			t.Errorf("extra %s set for a node that does not exist", serviceaccount.ExtraNodeUID)
		}
		if _, err := e.request("robot", bound("Pod", "v1", "p1", "").GetSpec()); apierrors.FromError(err).Reason != apierrors.ReasonBadRequest {
			t.Errorf("token for robot bound to runner's pod: got %v, want BadRequest", err)
		}
		if _, err := e.pods.DeletePod(ctxT(t), &corev1.DeletePodRequest{Namespace: "default", Name: "p1", GracePeriodSeconds: proto.Int64(0)}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the deleted pod's token refused", func() bool { return e.unauthorized(tok) })
	})

	t.Run("RBAC", func(t *testing.T) {
		e.createSA("reader")
		e.bind("reader-view", "view", &rbacv1.Subject{Kind: "ServiceAccount", Name: "reader", Namespace: "default"})
		tok := e.token("reader", nil)
		pods := corev1.NewPodServiceClient(e.Dial(t, tok))
		testutil.Eventually(t, "the reader may list pods", func() bool {
			_, err := pods.ListPods(ctxT(t), &corev1.ListPodsRequest{Namespace: "default"})
			return err == nil
		})
		_, err := pods.CreatePod(ctxT(t), &corev1.CreatePodRequest{Namespace: "default", Pod: &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "x"},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}}}})
		if se := apierrors.FromError(err); se.Reason != apierrors.ReasonForbidden ||
			se.Message != `pods is forbidden: User "system:serviceaccount:default:reader" cannot create resource "pods" in API group "" in the namespace "default"` {
			t.Errorf("create pod: got %v, want Forbidden", err)
		}
	})
}

func TestTokenReviewAndIssuerDiscovery(t *testing.T) {
	e := newTokenEnv(t)
	sa := e.createSA("robot")
	tok := e.token("robot", nil)

	review := func(client authenticationv1.AuthenticationServiceClient, token string, auds ...string) (*authenticationv1.TokenReviewStatus, error) {
		r, err := client.CreateTokenReview(ctxT(t), &authenticationv1.CreateTokenReviewRequest{TokenReview: &authenticationv1.TokenReview{
			Spec: &authenticationv1.TokenReviewSpec{Token: token, Audiences: auds}}})
		return r.GetTokenReview().GetStatus(), err
	}
	st, err := review(e.auth, tok)
	if err != nil {
		t.Fatal(err)
	}
	if !st.GetAuthenticated() || st.GetUser().GetUsername() != "system:serviceaccount:default:robot" || st.GetUser().GetUid() != sa.GetMetadata().GetUid() ||
		len(st.GetAudiences()) != 1 || st.GetAudiences()[0] != ServiceAccountIssuer {
		t.Errorf("review: got %v", st)
	}
	st, _ = review(e.auth, tok, "x")
	if st.GetAuthenticated() || st.GetError() != `[invalid bearer token, token audiences ["`+ServiceAccountIssuer+`"] is invalid for the target audiences ["x"]]` {
		t.Errorf("review for audience x: got %v", st)
	}
	if st, _ = review(e.auth, "garbage"); st.GetAuthenticated() || st.GetError() != "invalid bearer token" {
		t.Errorf("review of garbage: got %v", st)
	}
	if st, _ = review(e.auth, BobToken); !st.GetAuthenticated() || st.GetUser().GetUsername() != "bob" {
		t.Errorf("review of bob's static token: got %v", st)
	}
	if _, err := review(e.auth, ""); apierrors.FromError(err).Message != "token is required for TokenReview in authentication" {
		t.Errorf("review without token: got %v", err)
	}
	bob := authenticationv1.NewAuthenticationServiceClient(e.Dial(t, BobToken))
	if _, err := review(bob, tok); apierrors.FromError(err).Message != `tokenreviews.authentication.k8s.io is forbidden: User "bob" cannot create resource "tokenreviews" in API group "authentication.k8s.io" at the cluster scope` {
		t.Errorf("bob's review: got %v, want Forbidden", err)
	}
	crbs := rbacv1.NewClusterRoleBindingServiceClient(e.Dial(t, AdminToken))
	if _, err := crbs.CreateClusterRoleBinding(ctxT(t), &rbacv1.CreateClusterRoleBindingRequest{ClusterRoleBinding: &rbacv1.ClusterRoleBinding{
		Metadata: &metav1.ObjectMeta{Name: "bob-delegator"}, RoleRef: &rbacv1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects: []*rbacv1.Subject{{Kind: "User", ApiGroup: "rbac.authorization.k8s.io", Name: "bob"}}}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "bob, an auth delegator, reviews tokens", func() bool { st, err := review(bob, tok); return err == nil && st.GetAuthenticated() })

	// Discovery: every ServiceAccount may read the documents, bob may not.
	saAuth := authenticationv1.NewAuthenticationServiceClient(e.Dial(t, tok))
	jwks, err := saAuth.GetServiceAccountIssuerJWKS(ctxT(t), &authenticationv1.GetServiceAccountIssuerJWKSRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []struct{ Use, Kty, Kid, Alg, Crv string }
	}
	if err := json.Unmarshal(jwks.GetJson(), &set); err != nil {
		t.Fatal(err)
	}
	kid, _ := serviceaccount.KeyID(&e.ServiceAccountKey.PublicKey)
	if len(set.Keys) != 1 || set.Keys[0].Kid != kid || set.Keys[0].Alg != "ES256" || set.Keys[0].Use != "sig" || set.Keys[0].Kty != "EC" {
		t.Errorf("jwks: got %s", jwks.GetJson())
	}
	cfg, err := saAuth.GetServiceAccountIssuerOpenIDConfiguration(ctxT(t), &authenticationv1.GetServiceAccountIssuerOpenIDConfigurationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantCfg := `{"issuer":"` + ServiceAccountIssuer + `","jwks_uri":"` + ServiceAccountIssuer + `/openid/v1/jwks","response_types_supported":["id_token"],"subject_types_supported":["public"],"id_token_signing_alg_values_supported":["ES256"]}`
	if string(cfg.GetJson()) != wantCfg {
		t.Errorf("openid configuration: got %s, want %s", cfg.GetJson(), wantCfg)
	}
	if _, err := bob.GetServiceAccountIssuerJWKS(ctxT(t), &authenticationv1.GetServiceAccountIssuerJWKSRequest{}); apierrors.FromError(err).Reason != apierrors.ReasonForbidden {
		t.Errorf("bob's jwks: got %v, want Forbidden", err)
	}
}

// TestTokenRequestExpiration: --service-account-max-token-expiration
// shortens longer requests; a pod-bound token asked for 3607 s is issued
// for a year with warnafter at 3607 s, as Kubernetes does for the node's
// projected tokens.
func TestTokenRequestExpiration(t *testing.T) {
	env := Start(t, Options{Configure: func(c *apiserver.Config) { c.ServiceAccountTokens.MaxExpiration = 2 * time.Hour }})
	conn := env.Dial(t, AdminToken)
	e := &tokenEnv{Env: env, t: t, auth: authenticationv1.NewAuthenticationServiceClient(conn),
		sas: corev1.NewServiceAccountServiceClient(conn), pods: corev1.NewPodServiceClient(conn)}
	e.createSA("robot")
	var header metadata.MD
	r, err := e.auth.CreateServiceAccountToken(ctxT(t), &authenticationv1.CreateServiceAccountTokenRequest{Namespace: "default", Name: "robot",
		TokenRequest: &authenticationv1.TokenRequest{Spec: &authenticationv1.TokenRequestSpec{ExpirationSeconds: proto.Int64(3 * 3600)}}}, grpc.Header(&header))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := header.Get(apierrors.WarningHeader), `299 - "requested expiration of 10800 seconds shortened to 7200 seconds"`; len(got) != 1 || got[0] != want {
		t.Errorf("warning: got %q, want [%s]", got, want)
	}
	tr := r.GetTokenRequest()
	c := claims(t, tr.GetStatus().GetToken())
	if got := tr.GetSpec().GetExpirationSeconds(); got != 7200 || int64(c["exp"].(float64))-int64(c["iat"].(float64)) != 7200 {
		t.Errorf("spec.expirationSeconds %d, exp-iat %v: want both 7200", got, c["exp"].(float64)-c["iat"].(float64))
	}

	pod, err := e.pods.CreatePod(ctxT(t), &corev1.CreatePodRequest{Namespace: "default", Pod: &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "p"},
		Spec: &corev1.PodSpec{ServiceAccountName: "robot", Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	spec := bound("Pod", "v1", "p", pod.GetPod().GetMetadata().GetUid()).GetSpec()
	spec.ExpirationSeconds = proto.Int64(serviceaccount.WarnOnlyExpirationSeconds)
	tr, err = e.request("robot", spec)
	if err != nil {
		t.Fatal(err)
	}
	c = claims(t, tr.GetStatus().GetToken())
	iat := int64(c["iat"].(float64))
	k8s := c["kubernetes.io"].(map[string]any)
	if int64(c["exp"].(float64))-iat != serviceaccount.ExtendedExpirationSeconds || int64(k8s["warnafter"].(float64))-iat != serviceaccount.WarnOnlyExpirationSeconds {
		t.Errorf("exp-iat %v, warnafter-iat %v: want a year and 3607", c["exp"].(float64)-float64(iat), k8s["warnafter"])
	}
	if got := tr.GetStatus().GetExpirationTimestamp().AsTime().Unix() - iat; got != serviceaccount.WarnOnlyExpirationSeconds {
		t.Errorf("status.expirationTimestamp: %d s after iat, want 3607 (the asked expiration, as Kubernetes reports it)", got)
	}
	// Not for other audiences.
	spec.Audiences = []string{"vault"}
	tr, err = e.request("robot", spec)
	if err != nil {
		t.Fatal(err)
	}
	if c := claims(t, tr.GetStatus().GetToken()); int64(c["exp"].(float64))-int64(c["iat"].(float64)) != serviceaccount.WarnOnlyExpirationSeconds {
		t.Errorf("audience vault: exp-iat %v, want 3607", c["exp"].(float64)-c["iat"].(float64))
	}
}

// TestTokensAcrossReplicas: two API service replicas on one store with the
// same key (as kplane up, compose and Helm run them) accept each other's
// tokens, and a replica with another key accepts neither.
func TestTokensAcrossReplicas(t *testing.T) {
	a := newTokenEnv(t)
	b := Start(t, Options{Etcd: a.Etcd, ServiceAccountKey: a.ServiceAccountKey})
	c := Start(t, Options{Etcd: a.Etcd})
	a.createSA("robot")
	fromA := a.token("robot", nil)
	fromB, err := authenticationv1.NewAuthenticationServiceClient(b.Dial(t, AdminToken)).CreateServiceAccountToken(ctxT(t),
		&authenticationv1.CreateServiceAccountTokenRequest{Namespace: "default", Name: "robot"})
	if err != nil {
		t.Fatal(err)
	}
	whoami := func(env *Env, token string) error {
		_, err := authenticationv1.NewAuthenticationServiceClient(env.Dial(t, token)).CreateSelfSubjectReview(ctxT(t), &authenticationv1.CreateSelfSubjectReviewRequest{})
		return err
	}
	testutil.Eventually(t, "replica b accepts replica a's token", func() bool { return whoami(b, fromA) == nil })
	// Each replica authenticates from its own watch-fed cache, which may
	// see the ServiceAccount a moment after its creation.
	testutil.Eventually(t, "replica a accepts replica b's token", func() bool { return whoami(a.Env, fromB.GetTokenRequest().GetStatus().GetToken()) == nil })
	fromC, err := authenticationv1.NewAuthenticationServiceClient(c.Dial(t, AdminToken)).CreateServiceAccountToken(ctxT(t),
		&authenticationv1.CreateServiceAccountTokenRequest{Namespace: "default", Name: "robot"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "replica c accepts its own token", func() bool { return whoami(c, fromC.GetTokenRequest().GetStatus().GetToken()) == nil })
	if err := whoami(c, fromA); apierrors.FromError(err).Reason != apierrors.ReasonUnauthorized {
		t.Errorf("a replica with another key: got %v, want Unauthorized", err)
	}
}
