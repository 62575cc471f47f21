// This file holds the Job test with the real kubectl (1.27 and 1.33)
// through the gateway, on a cluster whose pods run: the scheduler, the Job
// controller and the garbage collector, and a node agent on the built-in
// runtime, whose containers exit after KPLANE_SIM_RUN_SECONDS or when their
// script ends. create job,
// apply -f, wait --for=condition=complete (and failed), get jobs, describe
// job, explain and delete work as on Kubernetes.
package kubectltest

import (
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/controllers"
)

const simImage = "kplane.test/busybox:1"

// startJobCluster runs, until the test ends, the controllers named, the
// scheduler and one node agent (n1) on the built-in runtime.
func startJobCluster(t *testing.T, which ...string) *apiservertest.Env {
	t.Helper()
	env := apiservertest.Start(t, apiservertest.Options{TLS: true})
	startControlPlane(t, env, true, which...)
	startSimNode(t, env, "n1", simImage)
	return env
}

func TestKubectlJobs(t *testing.T) {
	env := startJobCluster(t, controllers.Job, controllers.CronJob, controllers.GarbageCollector)
	gwConn := env.Dial(t, "")

	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, gwConn, apiservertest.AdminToken, bin)
			kubectl := kubectlRunner(k, 90*time.Second)
			run := func(args ...string) string {
				t.Helper()
				out, err := kubectl("", args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			fields := func(s string) string { return strings.Join(strings.Fields(s), " ") }
			ns := "x" + strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl."), ".", "")
			run("create", "ns", ns)

			// A job whose command is a script completes when the script
			// ends (the built-in runtime runs scripts, nodeagent/README.md).
			if out := run("create", "job", "echo", "--image="+simImage, "-n", ns, "--", "sh", "-c", "echo hi from $HOSTNAME"); !strings.Contains(out, "job.batch/echo created") {
				t.Errorf("kubectl create job echo:\n%s", out)
			}
			if out := run("wait", "--for=condition=complete", "job/echo", "-n", ns, "--timeout=60s"); !strings.Contains(out, "condition met") {
				t.Errorf("kubectl wait complete:\n%s", out)
			}
			if out := run("delete", "job", "echo", "-n", ns); !strings.Contains(out, `job.batch "echo" deleted`) {
				t.Errorf("kubectl delete job echo:\n%s", out)
			}

			// kubectl create job: its pod runs (a scripted container
			// sleeping an hour runs until stopped).
			if out := run("create", "job", "hello", "--image="+simImage, "-n", ns, "--", "sleep", "3600"); !strings.Contains(out, "job.batch/hello created") {
				t.Errorf("kubectl create job:\n%s", out)
			}
			if out := run("wait", "--for=jsonpath={.status.ready}=1", "job/hello", "-n", ns, "--timeout=60s"); !strings.Contains(out, "condition met") {
				t.Errorf("kubectl wait ready:\n%s", out)
			}
			out := run("get", "jobs", "-n", ns)
			if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
				fields(lines[0]) != "NAME STATUS COMPLETIONS DURATION AGE" || !strings.HasPrefix(fields(lines[1]), "hello Running 0/1 ") {
				t.Errorf("kubectl get jobs:\n%s", out)
			}
			out = run("get", "pods", "-n", ns, "-l", "job-name=hello", "-o", "jsonpath={.items[*].metadata.name} {.items[*].status.phase}")
			if !strings.HasPrefix(out, "hello-") || !strings.HasSuffix(out, " Running") {
				t.Errorf("the pod of hello: %q", out)
			}

			// kubectl apply -f: two pods that exit 0 after a second.
			manifest := `apiVersion: batch/v1
kind: Job
metadata:
  name: pi
  namespace: ` + ns + `
spec:
  completions: 2
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: pi
        image: ` + simImage + `
        env:
        - {name: KPLANE_SIM_RUN_SECONDS, value: "1"}
`
			if out, err := kubectl(manifest, "apply", "-f", "-"); err != nil || !strings.Contains(out, "job.batch/pi created") {
				t.Fatalf("kubectl apply: %v\n%s", err, out)
			}
			if out := run("wait", "--for=condition=complete", "job/pi", "-n", ns, "--timeout=60s"); !strings.Contains(out, "job.batch/pi condition met") {
				t.Errorf("kubectl wait --for=condition=complete:\n%s", out)
			}
			if out, err := kubectl(manifest, "apply", "-f", "-"); err != nil || !strings.Contains(out, "job.batch/pi unchanged") {
				t.Errorf("kubectl apply again: %v\n%s", err, out)
			}
			out = run("get", "job", "pi", "-n", ns, "-o", "wide")
			if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
				fields(lines[0]) != "NAME STATUS COMPLETIONS DURATION AGE CONTAINERS IMAGES SELECTOR" ||
				!strings.HasPrefix(fields(lines[1]), "pi Complete 2/2 ") || !strings.Contains(lines[1], "batch.kubernetes.io/controller-uid=") {
				t.Errorf("kubectl get job pi -o wide:\n%s", out)
			}
			out = run("describe", "job", "pi", "-n", ns)
			for _, want := range []string{
				"Name:             pi", "Completions:      2", "Parallelism:      2", "Completion Mode:  NonIndexed",
				"Pods Statuses:    0 Active (0 Ready) / 2 Succeeded / 0 Failed", "batch.kubernetes.io/job-name=pi",
				"SuccessfulCreate", "job-controller", "Created pod: pi-", "Completed", "Job completed",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("kubectl describe job: no %q in\n%s", want, out)
				}
			}

			// A pod exiting 1 with backoffLimit 0: the Job fails.
			bad := strings.NewReplacer("name: pi\n", "name: bad\n", "completions: 2", "backoffLimit: 0", "parallelism: 2", "completions: 1",
				`value: "1"}`, `value: "0.2"}`+"\n        - {name: KPLANE_SIM_EXIT_CODE, value: \"1\"}").Replace(manifest)
			if out, err := kubectl(bad, "apply", "-f", "-"); err != nil || !strings.Contains(out, "job.batch/bad created") {
				t.Fatalf("kubectl apply bad:\n%s\n%v\n%s", bad, err, out)
			}
			if out := run("wait", "--for=condition=failed", "job/bad", "-n", ns, "--timeout=60s"); !strings.Contains(out, "condition met") {
				t.Errorf("kubectl wait --for=condition=failed:\n%s", out)
			}
			out = run("get", "job", "bad", "-n", ns, "-o", "jsonpath={.status.failed} {.status.conditions[*].type} {.status.conditions[*].reason}")
			if out != "1 FailureTarget Failed BackoffLimitExceeded BackoffLimitExceeded" {
				t.Errorf("failed Job status: %q", out)
			}

			// Invalid: Kubernetes' words.
			invalid := strings.Replace(manifest, "restartPolicy: Never", "restartPolicy: Always", 1)
			if out, err := kubectl(invalid, "apply", "-f", "-"); err == nil ||
				!strings.Contains(out, `spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"`) {
				t.Errorf("kubectl apply with restartPolicy Always: %v\n%s", err, out)
			}

			if out := run("explain", "job.spec"); !strings.Contains(out, "JobSpec describes how the job execution will look like") ||
				!strings.Contains(out, "backoffLimit") {
				t.Errorf("kubectl explain job.spec:\n%s", out)
			}

			// A CronJob, and a Job made from it by hand.
			cron := `apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
  namespace: ` + ns + `
spec:
  schedule: "0 3 * * *"
  timeZone: Europe/Berlin
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: backup
            image: ` + simImage + `
            env:
            - {name: KPLANE_SIM_RUN_SECONDS, value: "0.5"}
`
			if out, err := kubectl(cron, "apply", "-f", "-"); err != nil || !strings.Contains(out, "cronjob.batch/nightly created") {
				t.Fatalf("kubectl apply cronjob: %v\n%s", err, out)
			}
			out = run("get", "cronjobs", "-n", ns)
			if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
				fields(lines[0]) != "NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE" ||
				!strings.HasPrefix(fields(lines[1]), "nightly 0 3 * * * Europe/Berlin False 0 <none> ") {
				t.Errorf("kubectl get cronjobs:\n%s", out)
			}
			if out := run("get", "cj", "nightly", "-n", ns, "-o", "name"); strings.TrimSpace(out) != "cronjob.batch/nightly" {
				t.Errorf("kubectl get cj: %q", out)
			}
			if out := run("get", "all", "-n", ns, "-o", "name"); !strings.Contains(out, "job.batch/pi") || !strings.Contains(out, "cronjob.batch/nightly") {
				t.Errorf("kubectl get all:\n%s", out)
			}
			if out := run("create", "job", "manual", "--from=cronjob/nightly", "-n", ns); !strings.Contains(out, "job.batch/manual created") {
				t.Errorf("kubectl create job --from=cronjob/nightly:\n%s", out)
			}
			if out := run("wait", "--for=condition=complete", "job/manual", "-n", ns, "--timeout=60s"); !strings.Contains(out, "condition met") {
				t.Errorf("kubectl wait for the manual Job:\n%s", out)
			}
			out = run("get", "job", "manual", "-n", ns, "-o", "jsonpath={.metadata.annotations.cronjob\\.kubernetes\\.io/instantiate} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}")
			if out != "manual CronJob/nightly" {
				t.Errorf("the manual Job's annotation and owner: %q", out)
			}
			if out := run("explain", "cronjob.spec.timeZone"); !strings.Contains(out, "time zone name for the given schedule") {
				t.Errorf("kubectl explain cronjob.spec.timeZone:\n%s", out)
			}

			// kubectl deletes in the background: the pods go with the Job.
			if out := run("delete", "job", "hello", "-n", ns); !strings.Contains(out, `job.batch "hello" deleted`) {
				t.Errorf("kubectl delete job:\n%s", out)
			}
			if out := run("wait", "--for=delete", "pod", "-l", "job-name=hello", "-n", ns, "--timeout=60s"); strings.Contains(out, "error") {
				t.Errorf("kubectl wait --for=delete:\n%s", out)
			}
		})
	}
}
