// This file holds the tests of the Helm chart: linted, rendered, every
// manifest decoded strictly into Kubernetes' types, and the topology and
// command lines it deploys checked.

package packaging

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/kplane/kplane/internal/testutil"
)

const helmInstall = "go install helm.sh/helm/v3/cmd/helm@v3.22.0 (scripts/install-deps.sh does it)"

// helmBinary finds helm on the PATH or where `go install` puts it.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "helm")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return testutil.RequireBinary(t, "helm", helmInstall)
}

// helm runs helm with its home directories in a temp dir (offline, no
// state left behind).
func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

// rendered is the chart's manifests, decoded strictly into Kubernetes' API
// types.
type rendered struct {
	statefulSets []*appsv1.StatefulSet
	deployments  []*appsv1.Deployment
	services     []*corev1.Service
	pdbs         []*policyv1.PodDisruptionBudget
	jobs         []*batchv1.Job
}

// decodeManifests splits helm template's output and decodes each document
// into its kind's type, rejecting unknown and duplicate fields: what the
// API server's strict field validation would refuse.
func decodeManifests(out []byte) (*rendered, error) {
	r := &rendered{}
	for i, doc := range bytes.Split(out, []byte("\n---")) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if head.Kind == "" {
			continue // comments only
		}
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 StatefulSet":
			o := &appsv1.StatefulSet{}
			r.statefulSets, obj = append(r.statefulSets, o), o
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			r.deployments, obj = append(r.deployments, o), o
		case "v1 Service":
			o := &corev1.Service{}
			r.services, obj = append(r.services, o), o
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			r.pdbs, obj = append(r.pdbs, o), o
		case "batch/v1 Job":
			o := &batchv1.Job{}
			r.jobs, obj = append(r.jobs, o), o
		default:
			return nil, fmt.Errorf("document %d: %s %s has no schema in this test; add its type", i, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, head.Kind, err)
		}
	}
	return r, nil
}

func TestDecodeManifestsIsStrict(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":   "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {replica: 2}\n",
		"wrong type":      "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: https}]}\n",
		"duplicate field": "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nmetadata: {name: b}\n",
		"unknown kind":    "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n",
	} {
		if _, err := decodeManifests([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// TestHelmChart lints charts/kplane, renders it, decodes every manifest
// strictly into the Kubernetes API types, and checks the topology: the
// store a StatefulSet of 3 behind a headless Service, with claims,
// anti-affinity and a disruption budget; the API service, gateway,
// scheduler and controllers Deployments of 2; a node agent; TLS from the
// Secret; every kplane command line accepted by the binary.
func TestHelmChart(t *testing.T) {
	chart := filepath.Join(repoRoot(), "charts", "kplane")
	helm(t, "lint", "--strict", chart)
	helm(t, "lint", "--strict", chart, "--set", "store.antiAffinity=soft,otel.endpoint=http://jaeger:4317,nodeagent.nodes=5")

	k := &Kplane{Bin: kplaneBinary(t)}
	ctx := context.Background()
	up, err := k.UpTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeManifests(helm(t, "template", "kp", chart, "--namespace", "kplane"))
	if err != nil {
		t.Fatalf("rendered manifests: %v", err)
	}

	// Every kplane command line in every pod template, and the probes.
	checkPod := func(what string, spec corev1.PodSpec) string {
		t.Helper()
		if len(spec.Containers) != 1 {
			t.Fatalf("%s: %d containers", what, len(spec.Containers))
		}
		c := spec.Containers[0]
		if err := k.CheckArgs(ctx, c.Args); err != nil {
			t.Errorf("%s: %v", what, err)
		}
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if p != nil && p.Exec != nil {
				if p.Exec.Command[0] != "/kplane" {
					t.Errorf("%s: probe runs %q (the image has only /kplane)", what, p.Exec.Command[0])
				} else if err := k.CheckArgs(ctx, p.Exec.Command[1:]); err != nil {
					t.Errorf("%s probe: %v", what, err)
				}
			}
		}
		if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: pods may run as root", what)
		}
		return c.Args[0]
	}
	usesSecret := func(what string, spec corev1.PodSpec) {
		t.Helper()
		if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == "kplane-pki"
		}) {
			t.Errorf("%s: TLS Secret kplane-pki not mounted", what)
		}
	}

	// The kubelet restarts a container that exits (a scheduler that lost
	// its Lease, a crash), as kplane up restarts a process that fails;
	// only the bootstrap Job's is a one-shot.
	restarts := func(what string, spec corev1.PodSpec) {
		t.Helper()
		if spec.RestartPolicy != "" && spec.RestartPolicy != corev1.RestartPolicyAlways {
			t.Errorf("%s: restartPolicy %s, want Always", what, spec.RestartPolicy)
		}
	}
	components := map[string]int{}
	for _, d := range r.deployments {
		comp := checkPod("Deployment "+d.Name, d.Spec.Template.Spec)
		restarts("Deployment "+d.Name, d.Spec.Template.Spec)
		usesSecret("Deployment "+d.Name, d.Spec.Template.Spec)
		components[comp] += int(*d.Spec.Replicas)
		want := int32(2)
		if comp == "nodeagent" {
			want = 1
			n, _ := FlagValue(d.Spec.Template.Spec.Containers[0].Args, "nodes")
			if n != fmt.Sprint(up.Nodes) {
				t.Errorf("node agent carries --nodes=%s, kplane up's %d", n, up.Nodes)
			}
		}
		if *d.Spec.Replicas != want {
			t.Errorf("Deployment %s: %d replicas, want %d", d.Name, *d.Spec.Replicas, want)
		}
		sel, err := metav1LabelSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Deployment %s: selector does not match its pods (%v)", d.Name, err)
		}
	}
	if len(r.statefulSets) != 1 {
		t.Fatalf("%d StatefulSets, want the store's", len(r.statefulSets))
	}
	ss := r.statefulSets[0]
	restarts("StatefulSet "+ss.Name, ss.Spec.Template.Spec)
	if comp := checkPod("StatefulSet "+ss.Name, ss.Spec.Template.Spec); comp != "store" {
		t.Errorf("StatefulSet runs kplane %s", comp)
	}
	components["store"] = int(*ss.Spec.Replicas)
	if *ss.Spec.Replicas != 3 {
		t.Errorf("store: %d replicas, want 3", *ss.Spec.Replicas)
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 || !slices.ContainsFunc(ss.Spec.Template.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
		dir, _ := FlagValue(ss.Spec.Template.Spec.Containers[0].Args, "data-dir")
		return m.Name == ss.Spec.VolumeClaimTemplates[0].Name && m.MountPath == dir
	}) {
		t.Errorf("store: no PersistentVolumeClaim mounted at its --data-dir")
	}
	if a := ss.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Errorf("store: no required pod anti-affinity by default")
	}
	ssSel, _ := metav1LabelSelector(ss.Spec.Selector)
	var headless *corev1.Service
	for _, s := range r.services {
		if s.Name == ss.Spec.ServiceName {
			headless = s
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses ||
		!ssSel.Matches(labels.Set(headless.Spec.Selector)) {
		t.Errorf("store: serviceName %q is not a headless Service publishing not-ready members and selecting them: %+v", ss.Spec.ServiceName, headless)
	}
	// The members' peer URLs name their pods under the headless Service.
	ic, _ := FlagValue(ss.Spec.Template.Spec.Containers[0].Args, "initial-cluster")
	for i := range 3 {
		pod := fmt.Sprintf("%s-%d", ss.Name, i)
		if !strings.Contains(ic, fmt.Sprintf("%s=https://%s.%s.kplane.svc:2380", pod, pod, ss.Spec.ServiceName)) {
			t.Errorf("--initial-cluster %s does not name member %s", ic, pod)
		}
	}
	var storePDB bool
	for _, p := range r.pdbs {
		sel, _ := metav1LabelSelector(p.Spec.Selector)
		if sel.Matches(labels.Set(ss.Spec.Template.Labels)) {
			storePDB = p.Spec.MaxUnavailable != nil && p.Spec.MaxUnavailable.IntValue() == 1
		}
	}
	if !storePDB {
		t.Errorf("store: no PodDisruptionBudget with maxUnavailable 1")
	}

	// Every certificate a pod names is in the Secret README.md tells how
	// to make: kplane certs' files, flat (nodes/ included).
	tmp := t.TempDir()
	members := make([]string, 3)
	for i := range members {
		members[i] = fmt.Sprintf("%s-%d", ss.Name, i)
	}
	if out, err := exec.Command(k.Bin, "certs", "--data-dir="+tmp, "--apiservers=1", "--nodes=3",
		"--store-members="+strings.Join(members, ",")).CombinedOutput(); err != nil {
		t.Fatalf("kplane certs: %v: %s", err, out)
	}
	inSecret := func(f string) bool {
		for _, dir := range []string{"pki", filepath.Join("pki", "nodes")} {
			if st, err := os.Stat(filepath.Join(tmp, dir, f)); err == nil && !st.IsDir() {
				return true
			}
		}
		return false
	}
	var specs []corev1.PodSpec
	for _, d := range r.deployments {
		specs = append(specs, d.Spec.Template.Spec)
	}
	for _, j := range r.jobs {
		specs = append(specs, j.Spec.Template.Spec)
	}
	specs = append(specs, ss.Spec.Template.Spec)
	for _, spec := range specs {
		c := spec.Containers[0]
		refs := PKIFiles(c.Args)
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if p != nil && p.Exec != nil {
				refs = append(refs, PKIFiles(p.Exec.Command)...)
			}
		}
		for _, f := range refs {
			names := []string{f}
			if strings.Contains(f, "$(POD_NAME)") {
				names = nil
				for _, m := range members {
					names = append(names, strings.ReplaceAll(f, "$(POD_NAME)", m))
				}
			}
			for _, n := range names {
				if !inSecret(n) {
					t.Errorf("%s names %s/%s, which kplane certs does not write", c.Name, PKIDir, n)
				}
			}
		}
		if dir, ok := FlagValue(c.Args, "cert-dir"); ok {
			for i := 1; i <= up.Nodes; i++ {
				if dir != PKIDir || !inSecret(fmt.Sprintf("node-%d.crt", i)) {
					t.Errorf("%s: --cert-dir %s has no node-%d.crt", c.Name, dir, i)
				}
			}
		}
		if len(refs) > 0 {
			usesSecret(c.Name, spec)
		}
	}

	// Only the members and the API services reach the store (the store
	// CA's certificates, members' names on the peer port); the probes
	// verify the member with the store CA.
	var apis [][]string
	for _, d := range r.deployments {
		if c := d.Spec.Template.Spec.Containers[0]; len(c.Args) > 0 && c.Args[0] == "apiserver" {
			apis = append(apis, c.Args)
		}
	}
	if len(apis) == 0 {
		t.Error("no API service Deployment")
	}
	storeC := ss.Spec.Template.Spec.Containers[0]
	checkStoreTrust(t, filepath.Join(tmp, "pki"), [][]string{storeC.Args}, members, apis, members[0])
	for _, p := range []*corev1.Probe{storeC.ReadinessProbe, storeC.LivenessProbe} {
		if p == nil || p.Exec == nil {
			t.Errorf("store: a probe that does not run kplane healthcheck: %+v", p)
			continue
		}
		if ca, _ := FlagValue(p.Exec.Command, "ca-file"); ca != StoreCAFile {
			t.Errorf("store probe --ca-file %q, want %s", ca, StoreCAFile)
		}
	}

	// Same components as kplane up.
	for comp := range up.Processes {
		if components[comp] == 0 {
			t.Errorf("the chart runs no %s", comp)
		}
	}
	for comp := range components {
		if _, ok := up.Processes[comp]; !ok {
			t.Errorf("the chart runs %s, which kplane up does not", comp)
		}
	}
	if len(r.jobs) != 1 || checkPod("Job", r.jobs[0].Spec.Template.Spec) != "bootstrap" {
		t.Errorf("want one bootstrap Job")
	}

	// The values that change the rendering still give valid manifests.
	if _, err := decodeManifests(helm(t, "template", "kp", chart, "--set", "store.antiAffinity=soft,otel.endpoint=http://jaeger:4317,nodeagent.enabled=false,bootstrap.enabled=false")); err != nil {
		t.Errorf("with other values: %v", err)
	}
}
