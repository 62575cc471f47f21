// This file holds the tests of CertificateSigningRequests: the requester
// stamped on create, what each of the object, its status and its approval
// subresource may change, and the refusals of Kubernetes' validation.

package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	certificatesv1 "github.com/kplane/kplane/proto/kplane/certificates/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// testCSRPEM is a PEM certificate request for e2e.example.com.
func testCSRPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "e2e.example.com"}, DNSNames: []string{"e2e.example.com"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// testCertPEM is a PEM self-signed certificate.
func testCertPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e.example.com"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<33, 0)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func testCSR(t *testing.T, name string) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{Metadata: om("", name), Spec: &certificatesv1.CertificateSigningRequestSpec{
		Request: testCSRPEM(t), SignerName: "example.com/e2e", ExpirationSeconds: proto.Int32(3600),
		Usages: []string{"digital signature", "key encipherment", "server auth"},
		// A client cannot choose the identity: the requester's is kept.
		Username: "someone-else", Groups: []string{"system:masters"},
	}}
}

func TestCSRLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as(t, "alice")
	csrs := certificatesv1.NewCertificateSigningRequestServiceClient(e.conn)

	cr, err := csrs.CreateCertificateSigningRequest(ctx, &certificatesv1.CreateCertificateSigningRequestRequest{CertificateSigningRequest: testCSR(t, "c1")})
	if err != nil {
		t.Fatal(err)
	}
	got := cr.GetCertificateSigningRequest()
	if sp := got.GetSpec(); sp.GetUsername() != "alice" || strings.Join(sp.GetGroups(), ",") != "system:authenticated" {
		t.Errorf("requester: got %q %v, want alice [system:authenticated]", sp.GetUsername(), sp.GetGroups())
	}
	if got.GetMetadata().GetGeneration() != 0 {
		t.Errorf("generation: got %d, want 0", got.GetMetadata().GetGeneration())
	}

	// An update of the object changes metadata only.
	upd := proto.Clone(got).(*certificatesv1.CertificateSigningRequest)
	upd.Metadata.Annotations = map[string]string{"updated": "true"}
	upd.Spec.SignerName = "example.com/other"
	upd.Status = &certificatesv1.CertificateSigningRequestStatus{Certificate: testCertPEM(t)}
	ur, err := csrs.UpdateCertificateSigningRequest(ctx, &certificatesv1.UpdateCertificateSigningRequestRequest{Name: "c1", CertificateSigningRequest: upd})
	if err != nil {
		t.Fatal(err)
	}
	if u := ur.GetCertificateSigningRequest(); u.GetMetadata().GetAnnotations()["updated"] != "true" || u.GetSpec().GetSignerName() != "example.com/e2e" || len(u.GetStatus().GetCertificate()) != 0 {
		t.Errorf("update: got annotations %v, signer %q, certificate %d bytes; want the annotation only", u.GetMetadata().GetAnnotations(), u.GetSpec().GetSignerName(), len(u.GetStatus().GetCertificate()))
	}

	// Approval is not written through status.
	st := proto.Clone(ur.GetCertificateSigningRequest()).(*certificatesv1.CertificateSigningRequest)
	st.Status = &certificatesv1.CertificateSigningRequestStatus{Conditions: []*certificatesv1.CertificateSigningRequestCondition{{Type: "Approved", Status: "True", Reason: "X"}}}
	_, err = csrs.UpdateCertificateSigningRequestStatus(ctx, &certificatesv1.UpdateCertificateSigningRequestStatusRequest{Name: "c1", CertificateSigningRequest: st})
	se := wantReason(t, err, apierrors.ReasonInvalid)
	if want := `status.conditions: Forbidden: updates may not add a condition of type "Approved"`; !strings.Contains(se.Message, want) {
		t.Errorf("message: got %q, want it to contain %q", se.Message, want)
	}

	// Approved through approval, with its times stamped.
	ar, err := csrs.UpdateCertificateSigningRequestApproval(ctx, &certificatesv1.UpdateCertificateSigningRequestApprovalRequest{Name: "c1", CertificateSigningRequest: st})
	if err != nil {
		t.Fatal(err)
	}
	conds := ar.GetCertificateSigningRequest().GetStatus().GetConditions()
	if len(conds) != 1 || conds[0].GetType() != "Approved" || conds[0].GetLastUpdateTime() == nil || conds[0].GetLastTransitionTime() == nil {
		t.Errorf("approval: got conditions %v", conds)
	}

	// Denied beside Approved, or Approved taken away, is refused.
	both := proto.Clone(ar.GetCertificateSigningRequest()).(*certificatesv1.CertificateSigningRequest)
	both.Status.Conditions = append(both.Status.Conditions, &certificatesv1.CertificateSigningRequestCondition{Type: "Denied", Status: "True"})
	_, err = csrs.UpdateCertificateSigningRequestApproval(ctx, &certificatesv1.UpdateCertificateSigningRequestApprovalRequest{Name: "c1", CertificateSigningRequest: both})
	se = wantReason(t, err, apierrors.ReasonInvalid)
	if want := `status.conditions[1].type: Invalid value: "Denied": Approved and Denied conditions are mutually exclusive`; !strings.Contains(se.Message, want) {
		t.Errorf("message: got %q, want it to contain %q", se.Message, want)
	}
	none := proto.Clone(ar.GetCertificateSigningRequest()).(*certificatesv1.CertificateSigningRequest)
	none.Status.Conditions = nil
	_, err = csrs.UpdateCertificateSigningRequestApproval(ctx, &certificatesv1.UpdateCertificateSigningRequestApprovalRequest{Name: "c1", CertificateSigningRequest: none})
	se = wantReason(t, err, apierrors.ReasonInvalid)
	if want := `status.conditions: Forbidden: updates may not remove a condition of type "Approved"`; !strings.Contains(se.Message, want) {
		t.Errorf("message: got %q, want it to contain %q", se.Message, want)
	}

	// The certificate is written through status, once.
	issued := proto.Clone(ar.GetCertificateSigningRequest()).(*certificatesv1.CertificateSigningRequest)
	issued.Status.Certificate = testCertPEM(t)
	sr, err := csrs.UpdateCertificateSigningRequestStatus(ctx, &certificatesv1.UpdateCertificateSigningRequestStatusRequest{Name: "c1", CertificateSigningRequest: issued})
	if err != nil {
		t.Fatal(err)
	}
	if c := sr.GetCertificateSigningRequest().GetStatus(); len(c.GetCertificate()) == 0 || len(c.GetConditions()) != 1 {
		t.Errorf("status: got %v", c)
	}
	again := proto.Clone(sr.GetCertificateSigningRequest()).(*certificatesv1.CertificateSigningRequest)
	again.Status.Certificate = testCertPEM(t)
	_, err = csrs.UpdateCertificateSigningRequestStatus(ctx, &certificatesv1.UpdateCertificateSigningRequestStatusRequest{Name: "c1", CertificateSigningRequest: again})
	se = wantReason(t, err, apierrors.ReasonInvalid)
	if want := "status.certificate: Forbidden: updates may not modify existing certificate content"; !strings.Contains(se.Message, want) {
		t.Errorf("message: got %q, want it to contain %q", se.Message, want)
	}

	// Listed by signer.
	if _, err := csrs.CreateCertificateSigningRequest(ctx, &certificatesv1.CreateCertificateSigningRequestRequest{CertificateSigningRequest: func() *certificatesv1.CertificateSigningRequest {
		c := testCSR(t, "c2")
		c.Spec.SignerName = "example.com/other"
		return c
	}()}); err != nil {
		t.Fatal(err)
	}
	l, err := csrs.ListCertificateSigningRequests(ctx, &certificatesv1.ListCertificateSigningRequestsRequest{FieldSelector: "spec.signerName=example.com/other"})
	if err != nil {
		t.Fatal(err)
	}
	if items := l.GetList().GetItems(); len(items) != 1 || items[0].GetMetadata().GetName() != "c2" {
		t.Errorf("spec.signerName=example.com/other: got %v", items)
	}
}

func TestCSRValidation(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	csrs := certificatesv1.NewCertificateSigningRequestServiceClient(e.conn)
	for _, tc := range []struct {
		name string
		mod  func(*certificatesv1.CertificateSigningRequest)
		want []string
	}{
		{name: "not a request", mod: func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = []byte("hello") },
			want: []string{"spec.request: Invalid value: []byte{0x68, 0x65, 0x6c, 0x6c, 0x6f}: PEM block type must be CERTIFICATE REQUEST"}},
		{name: "no usages", mod: func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages = nil },
			want: []string{"spec.usages: Required value"}},
		{name: "usage twice", mod: func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []string{"server auth", "server auth"}
		},
			want: []string{`spec.usages[1]: Duplicate value: "server auth"`}},
		{name: "legacy signer", mod: func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "kubernetes.io/legacy-unknown" },
			want: []string{`spec.signerName: Invalid value: "kubernetes.io/legacy-unknown": the legacy signerName is not allowed via this API version`}},
		{name: "signer without path", mod: func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example.com" },
			want: []string{`spec.signerName: Invalid value: "example.com": must be a fully qualified domain and path of the form 'example.com/signer-name'`}},
		{name: "short duration", mod: func(c *certificatesv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = proto.Int32(599) },
			want: []string{"spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCSR(t, strings.ReplaceAll(tc.name, " ", "-"))
			tc.mod(c)
			_, err := csrs.CreateCertificateSigningRequest(ctx, &certificatesv1.CreateCertificateSigningRequestRequest{CertificateSigningRequest: c})
			se := wantReason(t, err, apierrors.ReasonInvalid)
			var got []string
			for _, cause := range se.Causes {
				got = append(got, cause.Field+": "+cause.Message)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("causes:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// noSigners lets everyone do anything but approve or sign for a signer:
// only admin may.
type noSigners struct{}

func (noSigners) Authorize(_ context.Context, a request.Attributes) (request.Decision, error) {
	return request.Decision{Allowed: a.Resource != "signers" || a.User.Name == "admin"}, nil
}

func TestCSRAdmission(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Authorizer = noSigners{} })
	csrs := certificatesv1.NewCertificateSigningRequestServiceClient(e.conn)
	cr, err := csrs.CreateCertificateSigningRequest(as(t, "bob"), &certificatesv1.CreateCertificateSigningRequestRequest{CertificateSigningRequest: testCSR(t, "c")})
	if err != nil {
		t.Fatal(err)
	}
	approve := proto.Clone(cr.GetCertificateSigningRequest()).(*certificatesv1.CertificateSigningRequest)
	approve.Status = &certificatesv1.CertificateSigningRequestStatus{Conditions: []*certificatesv1.CertificateSigningRequestCondition{{Type: "Approved", Status: "True"}}}
	_, err = csrs.UpdateCertificateSigningRequestApproval(as(t, "bob"), &certificatesv1.UpdateCertificateSigningRequestApprovalRequest{Name: "c", CertificateSigningRequest: approve})
	se := wantReason(t, err, apierrors.ReasonForbidden)
	if want := `certificatesigningrequests.certificates.k8s.io "c" is forbidden: user not permitted to approve requests with signerName "example.com/e2e"`; se.Message != want {
		t.Errorf("message: got %q, want %q", se.Message, want)
	}
	if _, err := csrs.UpdateCertificateSigningRequestApproval(admin(t), &certificatesv1.UpdateCertificateSigningRequestApprovalRequest{Name: "c", CertificateSigningRequest: approve}); err != nil {
		t.Fatal(err)
	}
	sign := proto.Clone(approve).(*certificatesv1.CertificateSigningRequest)
	sign.Metadata.ResourceVersion = ""
	sign.Status.Certificate = testCertPEM(t)
	_, err = csrs.UpdateCertificateSigningRequestStatus(as(t, "bob"), &certificatesv1.UpdateCertificateSigningRequestStatusRequest{Name: "c", CertificateSigningRequest: sign})
	se = wantReason(t, err, apierrors.ReasonForbidden)
	if want := `user not permitted to sign requests with signerName "example.com/e2e"`; !strings.Contains(se.Message, want) {
		t.Errorf("message: got %q, want it to contain %q", se.Message, want)
	}

	// No system:masters client certificate from kube-apiserver's signer.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "root", Organization: []string{"system:masters"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	masters := testCSR(t, "masters")
	masters.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	masters.Spec.SignerName = "kubernetes.io/kube-apiserver-client"
	masters.Spec.Usages = []string{"client auth"}
	_, err = csrs.CreateCertificateSigningRequest(admin(t), &certificatesv1.CreateCertificateSigningRequestRequest{CertificateSigningRequest: masters})
	se = wantReason(t, err, apierrors.ReasonForbidden)
	if want := "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"; !strings.Contains(se.Message, want) {
		t.Errorf("message: got %q, want it to contain %q", se.Message, want)
	}
}
