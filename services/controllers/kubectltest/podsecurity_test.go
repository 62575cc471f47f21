// This file holds the Pod Security admission test with the real kubectl
// (1.27 and 1.33) through the gateway: labelling a namespace restricted
// warns about the pods already in it, `kubectl run` of a pod that breaks
// the level is refused with kube-apiserver's message, `kubectl create
// deployment` is admitted with the warning on stderr, and an invalid level
// label is refused.
package kubectltest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
)

// restrictedFor lists what the restricted level finds wrong with a
// container kubectl made from an image alone.
func restrictedFor(c string) string {
	return `allowPrivilegeEscalation != false (container "` + c + `" must set securityContext.allowPrivilegeEscalation=false), ` +
		`unrestricted capabilities (container "` + c + `" must set securityContext.capabilities.drop=["ALL"]), ` +
		`runAsNonRoot != true (pod or container "` + c + `" must set securityContext.runAsNonRoot=true), ` +
		`seccompProfile (pod or container "` + c + `" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`
}

func TestKubectlPodSecurity(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	gwConn := env.Dial(t, "")
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, gwConn, apiservertest.AdminToken, bin)
			run := func(args ...string) (string, string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := k.Command(ctx, args...)
				var out, errOut bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errOut
				err := cmd.Run()
				return out.String(), errOut.String(), err
			}
			ns := "psa" + strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl."), ".", "")
			if out, errOut, err := run("create", "ns", ns); err != nil {
				t.Fatalf("create ns: %v\n%s%s", err, out, errOut)
			}
			if out, errOut, err := run("run", "old", "-n", ns, "--image=nginx"); err != nil {
				t.Fatalf("run before the label: %v\n%s%s", err, out, errOut)
			}

			// The label is set, with a warning about the pod already there.
			out, errOut, err := run("label", "ns", ns, "pod-security.kubernetes.io/enforce=restricted")
			wantWarnings := "Warning: existing pods in namespace \"" + ns + "\" violate the new PodSecurity enforce level \"restricted:latest\"\n" +
				"Warning: old: allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile\n"
			if err != nil || !strings.Contains(out, "namespace/"+ns+" labeled") || errOut != wantWarnings {
				t.Errorf("label: %v\nstdout %q\nstderr %q\nwant stderr %q", err, out, errOut, wantWarnings)
			}

			// The label reaches admission through the API service's
			// namespace cache: a server-side dry run shows when.
			refused := false
			for range 200 {
				if _, _, err := run("run", "probe", "-n", ns, "--image=nginx", "--dry-run=server"); err != nil {
					refused = true
					break
				}
				time.Sleep(25 * time.Millisecond)
			}
			if !refused {
				t.Fatal("the restricted level never refused a pod")
			}
			_, errOut, err = run("run", "p", "-n", ns, "--image=nginx")
			want := `Error from server (Forbidden): pods "p" is forbidden: violates PodSecurity "restricted:latest": ` + restrictedFor("p")
			if err == nil || strings.TrimSpace(errOut) != want {
				t.Errorf("run: got %v\n%s\nwant\n%s", err, errOut, want)
			}

			// A Deployment is admitted (its pods are what enforce
			// refuses), with the warning the unset warn label defaults to.
			out, errOut, err = run("create", "deployment", "web", "-n", ns, "--image=nginx")
			wantWarning := `Warning: would violate PodSecurity "restricted:latest": ` + restrictedFor("nginx")
			if err != nil || !strings.Contains(out, "deployment.apps/web created") || strings.TrimSpace(errOut) != wantWarning {
				t.Errorf("create deployment: %v\nstdout %q\nstderr %q\nwant stderr %q", err, out, errOut, wantWarning)
			}

			// A level Kubernetes does not know is refused.
			_, errOut, err = run("label", "ns", ns, "pod-security.kubernetes.io/audit=strict")
			want = `The Namespace "` + ns + `" is invalid: metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: "strict": must be one of privileged, baseline, restricted`
			if err == nil || strings.TrimSpace(errOut) != want {
				t.Errorf("bad label: got %v\n%s\nwant\n%s", err, errOut, want)
			}
		})
	}
}
