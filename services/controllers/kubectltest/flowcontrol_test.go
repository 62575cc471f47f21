// This file holds the kubectl tests (1.27 and 1.33, through the gateway)
// of the flowcontrol.apiserver.k8s.io kinds: get flowschemas lists
// Kubernetes' bootstrap schemas in matching order with kube-apiserver's
// columns, and a priority level and a FlowSchema of one's own are applied
// (created, then unchanged), listed, described and deleted.
package kubectltest

import (
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
)

func TestKubectlFlowControl(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	gwConn := env.Dial(t, "")
	cases := []kindCase{
		{resource: "prioritylevelconfigurations", name: "batch", manifest: `apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: batch}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    limitResponse: {type: Queue, queuing: {queues: 16, handSize: 4}}
`, header: "NAME TYPE NOMINALCONCURRENCYSHARES QUEUES HANDSIZE QUEUELENGTHLIMIT AGE", row: "Limited 5 16 4 50", describe: "Nominal Concurrency Shares:"},
		{resource: "flowschemas", name: "batch-jobs", manifest: `apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: batch-jobs}
spec:
  matchingPrecedence: 900
  priorityLevelConfiguration: {name: batch}
  distinguisherMethod: {type: ByNamespace}
  rules:
  - subjects: [{kind: Group, group: {name: batch-runners}}]
    resourceRules: [{verbs: ["*"], apiGroups: [batch], resources: [jobs], namespaces: ["*"]}]
`, header: "NAME PRIORITYLEVEL MATCHINGPRECEDENCE DISTINGUISHERMETHOD AGE MISSINGPL", row: "batch 900 ByNamespace", describe: "Matching Precedence:"},
	}
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, gwConn, apiservertest.AdminToken, bin)
			kubectl := kubectlRunner(k, 60*time.Second)
			run := func(stdin string, args ...string) string {
				t.Helper()
				out, err := kubectl(stdin, args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			// The bootstrap configuration, in matching order: exempt
			// (precedence 1) first, catch-all (10000) last.
			lines := strings.Split(strings.TrimSpace(run("", "get", "flowschemas")), "\n")
			if len(lines) < 3 || !strings.HasPrefix(fields(lines[1]), "exempt exempt 1 <none>") ||
				!strings.HasPrefix(fields(lines[len(lines)-1]), "catch-all catch-all 10000 ByUser") {
				t.Errorf("kubectl get flowschemas: want exempt first and catch-all last\n%s", strings.Join(lines, "\n"))
			}
			if out := run("", "get", "prioritylevelconfigurations", "exempt"); !strings.Contains(fields(out), "exempt Exempt <none> <none> <none> <none>") {
				t.Errorf("kubectl get prioritylevelconfigurations exempt:\n%s", out)
			}
			for _, c := range cases {
				t.Run(c.resource, func(t *testing.T) {
					if out := run(c.manifest, "apply", "-f", "-"); !strings.Contains(out, " created") {
						t.Fatalf("kubectl apply: %s", out)
					}
					if out := run(c.manifest, "apply", "-f", "-"); !strings.Contains(out, " unchanged") {
						t.Errorf("kubectl apply again: %s", out)
					}
					out := run("", "get", c.resource, c.name)
					lines := strings.Split(strings.TrimSpace(out), "\n")
					if len(lines) != 2 || !strings.HasPrefix(fields(lines[0]), c.header) || !strings.HasPrefix(fields(lines[1]), c.name+" "+c.row) {
						t.Errorf("kubectl get %s %s: want header %q and row %q\n%s", c.resource, c.name, c.header, c.name+" "+c.row, out)
					}
					if out := run("", "describe", c.resource, c.name); !strings.Contains(out, c.describe) {
						t.Errorf("kubectl describe %s %s: no %q in\n%s", c.resource, c.name, c.describe, out)
					}
				})
			}
			for _, c := range []kindCase{cases[1], cases[0]} {
				if out := run("", "delete", c.resource, c.name); !strings.Contains(out, "deleted") {
					t.Errorf("kubectl delete: %s", out)
				}
			}
		})
	}
}
