// This file holds the ServiceAccount test with the real kubectl (1.27 and
// 1.33) through the gateway while the controllers run: a namespace made
// by kubectl gets its default ServiceAccount; create sa, apply -f, get sa
// and explain work; create token fails as the subresource is not served.
package kubectltest

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

func TestKubectlServiceAccounts(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	conn := startControlPlane(t, env, false, controllers.ServiceAccount, controllers.Namespace)
	ctx := context.Background()
	sas := client.Must[*corev1.ServiceAccount](conn)
	gwConn := env.Dial(t, "")

	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, gwConn, apiservertest.AdminToken, bin)
			kubectl := kubectlRunner(k, 60*time.Second)
			run := func(args ...string) string {
				t.Helper()
				out, err := kubectl("", args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			ns := "x" + strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl."), ".", "")

			run("create", "ns", ns)
			// The controller creates it from the namespace's watch event:
			// wait for it with a watch, then read it with kubectl.
			wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
			defer wcancel()
			w, err := sas.Watch(wctx, ns, client.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for {
				ev, err := w.Next()
				if err != nil {
					t.Fatalf("waiting for the default ServiceAccount of %s: %v", ns, err)
				}
				if ev.Object.GetMetadata().GetName() == "default" {
					break
				}
			}
			w.Close()
			out := run("get", "sa", "default", "-n", ns)
			if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
				!strings.HasPrefix(strings.Join(strings.Fields(lines[0]), " "), "NAME SECRETS AGE") ||
				!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "default 0 ") {
				t.Errorf("kubectl get sa default:\n%s", out)
			}

			run("create", "sa", "robot", "-n", ns)
			manifest := `apiVersion: v1
kind: ServiceAccount
metadata:
  name: builder
  namespace: ` + ns + `
automountServiceAccountToken: false
imagePullSecrets:
- name: registry
secrets:
- name: builder-token
`
			if out, err := kubectl(manifest, "apply", "-f", "-"); err != nil || !strings.Contains(out, "serviceaccount/builder created") {
				t.Fatalf("kubectl apply: %v\n%s", err, out)
			}
			if out, err := kubectl(manifest, "apply", "-f", "-"); err != nil || !strings.Contains(out, "serviceaccount/builder unchanged") {
				t.Fatalf("kubectl apply again: %v\n%s", err, out)
			}
			out = run("get", "serviceaccounts", "-n", ns, "-o", "custom-columns=NAME:.metadata.name,SECRETS:.secrets[*].name,AUTOMOUNT:.automountServiceAccountToken")
			for _, want := range []string{"builder   builder-token   false", "default   <none>", "robot     <none>"} {
				if !strings.Contains(out, want) {
					t.Errorf("kubectl get serviceaccounts: no %q in\n%s", want, out)
				}
			}
			out = run("get", "sa", "builder", "-n", ns)
			if !strings.Contains(strings.Join(strings.Fields(out), " "), "builder 1 ") {
				t.Errorf("kubectl get sa builder: want 1 secret\n%s", out)
			}

			// Strict field validation names the unknown field.
			bad := strings.Replace(manifest, "automountServiceAccountToken: false", "automountServiceAccountToken: false\nautomount: true", 1)
			if out, err := kubectl(bad, "apply", "-f", "-"); err == nil || !strings.Contains(out, `unknown field "automount"`) {
				t.Errorf("kubectl apply with an unknown field: %v\n%s", err, out)
			}

			if out := run("explain", "serviceaccount.automountServiceAccountToken"); !strings.Contains(out, "AutomountServiceAccountToken indicates") {
				t.Errorf("kubectl explain:\n%s", out)
			}

			// The controller's default ServiceAccount gets a token for itself.
			tok := strings.TrimSpace(run("create", "token", "default", "-n", ns))
			parts := strings.Split(tok, ".")
			if len(parts) != 3 {
				t.Fatalf("kubectl create token: want a JWT, got %q", tok)
			}
			claims, err := base64.RawURLEncoding.DecodeString(parts[1])
			if err != nil || !strings.Contains(string(claims), `"sub":"system:serviceaccount:`+ns+`:default"`) {
				t.Errorf("kubectl create token: claims %s (%v)", claims, err)
			}
		})
	}
}
