// This file holds the kubectl tests of CertificateSigningRequests: created,
// listed with their condition, approved and denied by kubectl certificate,
// and refused as Kubernetes refuses them.

package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"testing"
)

// csrYAML is a CertificateSigningRequest for a fresh key, named name.
func csrYAML(t *testing.T, name string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name + ".example.com"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	req := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	return fmt.Sprintf(`apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata: {name: %s}
spec:
  request: %s
  signerName: example.com/test
  expirationSeconds: 3600
  usages: [digital signature, key encipherment, client auth]
`, name, req)
}

func TestKubectlCertificateSigningRequests(t *testing.T) {
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := startKube(t, bin)
			k.ok([]string{"create", "-f", k.file("a.yaml", csrYAML(t, "a"))}, "certificatesigningrequest.certificates.k8s.io/a created")
			k.ok([]string{"create", "-f", k.file("b.yaml", csrYAML(t, "b"))}, "certificatesigningrequest.certificates.k8s.io/b created")
			k.ok([]string{"get", "csr"}, "NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION", "example.com/test", "admin", "60m", "Pending")

			k.ok([]string{"certificate", "approve", "a"}, "certificatesigningrequest.certificates.k8s.io/a approved")
			k.ok([]string{"get", "csr", "a", "-o", "jsonpath={.status.conditions[0].type} {.status.conditions[0].reason}"}, "Approved KubectlApprove")
			k.ok([]string{"describe", "csr", "a"}, "Requesting User:", "admin", "Signer:", "example.com/test", "Requested Duration:", "60m", "Status:", "Approved", "Common Name:", "a.example.com")
			k.ok([]string{"certificate", "deny", "b"}, "certificatesigningrequest.certificates.k8s.io/b denied")
			k.ok([]string{"get", "csr", "b"}, "Denied")
			// kubectl will not approve a denied request, even with --force.
			k.fails([]string{"certificate", "approve", "b", "--force"}, `certificate signing request "b" is already Denied`)
			// The server refuses it too: Approved and Denied exclude each other.
			var b map[string]any
			if err := json.Unmarshal([]byte(k.ok([]string{"get", "csr", "b", "-o", "json"})), &b); err != nil {
				t.Fatal(err)
			}
			st := b["status"].(map[string]any)
			st["conditions"] = append(st["conditions"].([]any), map[string]any{"type": "Approved", "status": "True"})
			both, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			k.fails([]string{"replace", "--raw", "/apis/certificates.k8s.io/v1/certificatesigningrequests/b/approval", "-f", k.file("both.json", string(both))},
				"Approved and Denied conditions are mutually exclusive")
			k.ok([]string{"get", "--raw", "/apis/certificates.k8s.io/v1/certificatesigningrequests/b/approval"}, `"type":"Denied"`)

			bad := k.file("bad.yaml", `apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata: {name: bad}
spec:
  request: aGVsbG8=
  signerName: example.com/test
  usages: [client auth]
`)
			k.fails([]string{"create", "-f", bad}, "PEM block type must be CERTIFICATE REQUEST")
			k.ok([]string{"delete", "csr", "a", "b"}, `"a" deleted`, `"b" deleted`)
		})
	}
}
