// This file holds the test comparing kplane's answers to writes of custom
// resources (Gateway API's published HTTPRoute CRD and a CRD with the
// shapes operators use: defaults, pattern and CEL refusals, int-or-string,
// preserved fields, list-map keys, unknown fields warned about or refused)
// with kube-apiserver's recorded answers to the same requests.
package kubectltest

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"testing"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/internal/apidiff"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/controllers"
)

func TestCustomResourcesLikeKubernetes(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	startControlPlane(t, env, false, controllers.CRD)
	gw, err := gateway.New(gateway.Config{Conn: env.Dial(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(gw)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	apidiff.Check(t, "testdata/crcases/corpus.yaml", "testdata/crcases/recorded.json",
		apidiff.HTTPSender(context.Background(), srv.Client(), srv.URL, apiservertest.AdminToken))
}
