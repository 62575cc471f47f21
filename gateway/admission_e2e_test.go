// This file holds the test comparing kplane's admission (LimitRange,
// ResourceQuota, Priority, Pod Security) with kube-apiserver's recorded
// answers to the same cases.

package gateway_test

import (
	"context"
	"testing"

	"github.com/kplane/kplane/internal/apidiff"
)

// TestAdmissionLikeKubernetes runs the cases of testdata/admission through
// the gateway, as RECORDER=./internal/apidiff/record
// scripts/record-tables.sh ran them against kube-apiserver v1.33.13, and
// compares every answer: the code, a refusal's reason and message, the
// Warning headers, and the fields each case names of what was created
// (defaults a LimitRange set, the priority resolved...).
func TestAdmissionLikeKubernetes(t *testing.T) {
	srv, _, client := startImpersonating(t)
	apidiff.Check(t, "testdata/admission/corpus.yaml", "testdata/admission/recorded.json",
		apidiff.HTTPSender(context.Background(), client(nil), srv.URL, "admin-token"))
}
