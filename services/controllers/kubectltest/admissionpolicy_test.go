// This file holds the ValidatingAdmissionPolicy test with the real kubectl
// (1.27 and 1.33) through the gateway: a policy and binding applied with
// kubectl forbid Deployments of more than 3 replicas in one namespace
// (selected by its kubernetes.io/metadata.name label), and `kubectl create
// deploy --replicas=4` is refused with kube-apiserver's message; a Warn
// binding's failure shows as `Warning:` on kubectl's stderr; get prints
// kube-apiserver's columns and explain the descriptions.
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

const maxReplicasPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: max-replicas-SUFFIX}
spec:
  matchConstraints:
    resourceRules: [{operations: [CREATE, UPDATE], apiGroups: [apps], apiVersions: [v1], resources: [deployments]}]
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: NS}}
  validations:
  - expression: "object.spec.replicas <= 3"
    messageExpression: "'replicas must be at most 3, got ' + string(object.spec.replicas)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: max-replicas-SUFFIX}
spec: {policyName: max-replicas-SUFFIX, validationActions: [Deny]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: needs-team-SUFFIX}
spec:
  matchConstraints:
    resourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: NS}}
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: "a team label is expected"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: needs-team-SUFFIX}
spec: {policyName: needs-team-SUFFIX, validationActions: [Warn]}
`

func TestKubectlValidatingAdmissionPolicy(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	gwConn := env.Dial(t, "")
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, gwConn, apiservertest.AdminToken, bin)
			// run returns stdout and stderr apart: warnings go to stderr.
			run := func(stdin string, args ...string) (string, string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := k.Command(ctx, args...)
				cmd.Stdin = strings.NewReader(stdin)
				var out, errOut bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errOut
				err := cmd.Run()
				return out.String(), errOut.String(), err
			}
			suffix := strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl."), ".", "")
			ns := "vap" + suffix
			if out, errOut, err := run("", "create", "ns", ns); err != nil {
				t.Fatalf("create ns: %v\n%s%s", err, out, errOut)
			}
			manifest := strings.NewReplacer("SUFFIX", suffix, "NS", ns).Replace(maxReplicasPolicy)
			out, errOut, err := run(manifest, "apply", "-f", "-")
			if err != nil {
				t.Fatalf("apply: %v\n%s%s", err, out, errOut)
			}
			for _, want := range []string{
				"validatingadmissionpolicy.admissionregistration.k8s.io/max-replicas-" + suffix + " created",
				"validatingadmissionpolicybinding.admissionregistration.k8s.io/max-replicas-" + suffix + " created",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("apply: got %q, want %q", out, want)
				}
			}

			// The policies reach admission through the API service's
			// watch: a server-side dry run shows when they are in force.
			active := false
			for range 200 {
				if _, _, err := run("", "create", "deploy", "probe", "-n", ns, "--image=nginx", "--replicas=4", "--dry-run=server"); err != nil {
					active = true
					break
				}
				time.Sleep(25 * time.Millisecond)
			}
			if !active {
				t.Fatal("the policy never refused a Deployment of 4 replicas")
			}
			_, errOut, err = run("", "create", "deploy", "big", "-n", ns, "--image=nginx", "--replicas=4")
			want := `error: failed to create deployment: deployments.apps "big" is forbidden: ValidatingAdmissionPolicy 'max-replicas-` + suffix +
				`' with binding 'max-replicas-` + suffix + `' denied request: replicas must be at most 3, got 4`
			if err == nil || strings.TrimSpace(errOut) != want {
				t.Errorf("create deploy --replicas=4: got %v\n%s\nwant\n%s", err, errOut, want)
			}
			if out, errOut, err := run("", "create", "deploy", "small", "-n", ns, "--image=nginx", "--replicas=3"); err != nil ||
				!strings.Contains(out, "deployment.apps/small created") {
				t.Errorf("create deploy --replicas=3: %v\n%s%s", err, out, errOut)
			}

			// Warn: created, with kube-apiserver's warning on stderr.
			wantWarning := "Warning: Validation failed for ValidatingAdmissionPolicy 'needs-team-" + suffix +
				"' with binding 'needs-team-" + suffix + "': a team label is expected"
			warned := false
			for range 200 {
				out, errOut, err := run("", "create", "cm", "plain", "-n", ns, "--from-literal=a=b", "--dry-run=server")
				if err != nil {
					t.Fatalf("create cm (dry run): %v\n%s%s", err, out, errOut)
				}
				if strings.Contains(errOut, "Warning:") {
					warned = true
					break
				}
				time.Sleep(25 * time.Millisecond)
			}
			if !warned {
				t.Fatal("the Warn binding never warned")
			}
			out, errOut, err = run("", "create", "cm", "plain", "-n", ns, "--from-literal=a=b")
			if err != nil || !strings.Contains(out, "configmap/plain created") || strings.TrimSpace(errOut) != wantWarning {
				t.Errorf("create cm: %v\nstdout %q\nstderr %q\nwant stderr %q", err, out, errOut, wantWarning)
			}
			labelled := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: labelled, namespace: " + ns + ", labels: {team: a}}\n"
			if out, errOut, err := run(labelled, "apply", "-f", "-"); err != nil || errOut != "" {
				t.Errorf("apply of a labelled ConfigMap warned or failed: %v %s%s", err, out, errOut)
			}

			out, _, err = run("", "get", "validatingadmissionpolicies", "max-replicas-"+suffix)
			if lines := strings.Split(strings.TrimSpace(out), "\n"); err != nil || len(lines) != 2 ||
				strings.Join(strings.Fields(lines[0]), " ") != "NAME VALIDATIONS PARAMKIND AGE" ||
				!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "max-replicas-"+suffix+" 1 <unset> ") {
				t.Errorf("get validatingadmissionpolicies: %v\n%s", err, out)
			}
			out, _, err = run("", "explain", "validatingadmissionpolicies.spec.validations")
			if err != nil || !strings.Contains(out, "messageExpression") || !strings.Contains(out, "ValidatingAdmissionPolicy") {
				t.Errorf("explain validatingadmissionpolicies.spec.validations: %v\n%s", err, out)
			}
			out, _, err = run("", "get", "validatingadmissionpolicybindings", "max-replicas-"+suffix)
			if lines := strings.Split(strings.TrimSpace(out), "\n"); err != nil || len(lines) != 2 ||
				strings.Join(strings.Fields(lines[0]), " ") != "NAME POLICYNAME PARAMREF AGE" ||
				!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "max-replicas-"+suffix+" max-replicas-"+suffix+" <unset> ") {
				t.Errorf("get validatingadmissionpolicybindings: %v\n%s", err, out)
			}
		})
	}
}
