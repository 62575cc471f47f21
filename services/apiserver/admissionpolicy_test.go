// This file holds the tests of ValidatingAdmissionPolicies on a real API
// service: denial, warnings, audit annotations, params, matchConditions,
// messageExpression, failurePolicy, and the validation of the policies
// themselves. The expected messages are those kube-apiserver v1.33.13 gave
// for the same policies and requests.

package apiserver_test

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// policyClients are the clients the policy tests use.
type policyClients struct {
	policies admissionregistrationv1.ValidatingAdmissionPolicyServiceClient
	bindings admissionregistrationv1.ValidatingAdmissionPolicyBindingServiceClient
	cms      corev1.ConfigMapServiceClient
	secrets  corev1.SecretServiceClient
	svcs     corev1.ServiceServiceClient
	sas      corev1.ServiceAccountServiceClient
	deps     appsv1.DeploymentServiceClient
}

// fromYAML decodes a Kubernetes YAML document into m.
func fromYAML(t *testing.T, doc string, m proto.Message) {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := kubejson.Unmarshal(j, m, kubejson.Options{}); err != nil {
		t.Fatal(err)
	}
}

// bind creates a policy and its binding from YAML.
func (c policyClients) bind(t *testing.T, policyYAML, bindingYAML string) {
	t.Helper()
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	fromYAML(t, policyYAML, p)
	if _, err := c.policies.CreateValidatingAdmissionPolicy(withToken(t, "admintoken"),
		&admissionregistrationv1.CreateValidatingAdmissionPolicyRequest{ValidatingAdmissionPolicy: p}); err != nil {
		t.Fatalf("create policy: %v", err)
	}
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	fromYAML(t, bindingYAML, b)
	if _, err := c.bindings.CreateValidatingAdmissionPolicyBinding(withToken(t, "admintoken"),
		&admissionregistrationv1.CreateValidatingAdmissionPolicyBindingRequest{ValidatingAdmissionPolicyBinding: b}); err != nil {
		t.Fatalf("create binding: %v", err)
	}
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: &appsv1.DeploymentSpec{
		Replicas: proto.Int32(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: labels},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}}}}}
}

func wantRefusal(t *testing.T, err error, code int32, reason apierrors.Reason, msg string) {
	t.Helper()
	se := apierrors.FromError(err)
	if se == nil {
		t.Fatalf("got no error, want %d %s %q", code, reason, msg)
	}
	if se.Code != code || se.Reason != reason || se.Message != msg {
		t.Errorf("got %d %s %q,\nwant %d %s %q", se.Code, se.Reason, se.Message, code, reason, msg)
	}
}

func TestValidatingAdmissionPolicies(t *testing.T) {
	conn, auditPath := startStack(t)
	c := policyClients{
		policies: admissionregistrationv1.NewValidatingAdmissionPolicyServiceClient(conn),
		bindings: admissionregistrationv1.NewValidatingAdmissionPolicyBindingServiceClient(conn),
		cms:      corev1.NewConfigMapServiceClient(conn), secrets: corev1.NewSecretServiceClient(conn),
		svcs: corev1.NewServiceServiceClient(conn), sas: corev1.NewServiceAccountServiceClient(conn),
		deps: appsv1.NewDeploymentServiceClient(conn),
	}
	dry := []string{"All"}

	t.Run("deny with messageExpression", func(t *testing.T) {
		c.bind(t, `
metadata: {name: max-replicas}
spec:
  matchConstraints:
    resourceRules: [{operations: [CREATE, UPDATE], apiGroups: [apps], apiVersions: [v1], resources: [deployments]}]
  validations:
  - expression: "object.spec.replicas <= 3"
    messageExpression: "'replicas must be at most 3, got ' + string(object.spec.replicas)"
`, `
metadata: {name: max-replicas}
spec: {policyName: max-replicas, validationActions: [Deny]}
`)
		create := func(d *appsv1.Deployment, dryRun []string) error {
			_, err := c.deps.CreateDeployment(withToken(t, "admintoken"), &appsv1.CreateDeploymentRequest{Namespace: "default", Deployment: d, DryRun: dryRun})
			return err
		}
		testutil.EventuallyWithin(t, 5*time.Second, "the policy denies", func() bool { return create(deployment("big", 5), dry) != nil })
		wantRefusal(t, create(deployment("big", 5), nil), 422, apierrors.ReasonInvalid,
			`deployments.apps "big" is forbidden: ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas' denied request: replicas must be at most 3, got 5`)
		if err := create(deployment("small", 3), nil); err != nil {
			t.Errorf("3 replicas: %v", err)
		}
		// An update is checked too.
		d := deployment("small", 4)
		_, err := c.deps.UpdateDeployment(withToken(t, "admintoken"), &appsv1.UpdateDeploymentRequest{Namespace: "default", Name: "small", Deployment: d})
		wantRefusal(t, err, 422, apierrors.ReasonInvalid,
			`deployments.apps "small" is forbidden: ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas' denied request: replicas must be at most 3, got 4`)
	})

	t.Run("warn", func(t *testing.T) {
		c.bind(t, `
metadata: {name: needs-team}
spec:
  matchConstraints:
    resourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: "a team label is expected"
    reason: Forbidden
`, `
metadata: {name: needs-team-warn}
spec: {policyName: needs-team, validationActions: [Warn]}
`)
		want := `299 - "Validation failed for ValidatingAdmissionPolicy 'needs-team' with binding 'needs-team-warn': a team label is expected"`
		create := func(name string, labels map[string]string, dryRun []string) (metadata.MD, error) {
			var h metadata.MD
			_, err := c.cms.CreateConfigMap(withToken(t, "admintoken"), &corev1.CreateConfigMapRequest{Namespace: "default", DryRun: dryRun,
				ConfigMap: &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: name, Labels: labels}}}, grpc.Header(&h))
			return h, err
		}
		testutil.EventuallyWithin(t, 5*time.Second, "the policy warns", func() bool {
			h, err := create("probe", nil, dry)
			return err == nil && len(h.Get(apierrors.WarningHeader)) > 0
		})
		h, err := create("unlabelled", nil, nil)
		if err != nil {
			t.Fatalf("a Warn binding refused: %v", err)
		}
		if got := h.Get(apierrors.WarningHeader); len(got) != 1 || got[0] != want {
			t.Errorf("warnings: got %q, want [%q]", got, want)
		}
		if h, err = create("labelled", map[string]string{"team": "a"}, nil); err != nil || len(h.Get(apierrors.WarningHeader)) != 0 {
			t.Errorf("labelled: got %v, warnings %q; want no error, no warning", err, h.Get(apierrors.WarningHeader))
		}
	})

	t.Run("audit", func(t *testing.T) {
		c.bind(t, `
metadata: {name: audited}
spec:
  matchConstraints:
    resourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [serviceaccounts]}]
  variables:
  - {name: prefixed, expression: "object.metadata.name.startsWith('app-')"}
  validations:
  - expression: "variables.prefixed"
    message: "names start with app-"
  auditAnnotations:
  - {key: who, valueExpression: "request.userInfo.username + ' made ' + object.metadata.name"}
`, `
metadata: {name: audited}
spec: {policyName: audited, validationActions: [Audit]}
`)
		var h metadata.MD
		testutil.EventuallyWithin(t, 5*time.Second, "the policy audits", func() bool {
			var ph metadata.MD
			_, err := c.sas.CreateServiceAccount(withToken(t, "admintoken"), &corev1.CreateServiceAccountRequest{Namespace: "default", DryRun: dry,
				ServiceAccount: &corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Name: "probe"}}}, grpc.Header(&ph))
			id := ph.Get("audit-id")
			return err == nil && len(id) == 1 && auditAnnotations(t, auditPath)[id[0]]["audited/who"] != ""
		})
		if _, err := c.sas.CreateServiceAccount(withToken(t, "admintoken"), &corev1.CreateServiceAccountRequest{Namespace: "default",
			ServiceAccount: &corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Name: "robot"}}}, grpc.Header(&h)); err != nil {
			t.Fatalf("an Audit binding refused: %v", err)
		}
		id := h.Get("audit-id")
		if len(id) != 1 {
			t.Fatalf("audit-id: %v", h)
		}
		got := auditAnnotations(t, auditPath)[id[0]]
		if got["audited/who"] != "admin made robot" {
			t.Errorf("audit annotation audited/who: got %q, want %q", got["audited/who"], "admin made robot")
		}
		var failures []map[string]any
		if err := json.Unmarshal([]byte(got["validation.policy.admission.k8s.io/validation_failure"]), &failures); err != nil {
			t.Fatalf("validation_failure annotation %q: %v", got["validation.policy.admission.k8s.io/validation_failure"], err)
		}
		if len(failures) != 1 || failures[0]["message"] != "names start with app-" || failures[0]["policy"] != "audited" ||
			failures[0]["binding"] != "audited" || failures[0]["expressionIndex"] != 0.0 {
			t.Errorf("validation_failure: got %v", failures)
		}
	})

	t.Run("params", func(t *testing.T) {
		c.bind(t, `
metadata: {name: with-params}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [services]}]
  validations:
  - expression: "object.metadata.name.size() <= int(params.data.maxLen)"
    messageExpression: "'name longer than ' + params.data.maxLen"
    reason: Forbidden
`, `
metadata: {name: with-params}
spec:
  policyName: with-params
  validationActions: [Deny]
  paramRef: {name: svc-limits, parameterNotFoundAction: Deny}
`)
		create := func(name string, dryRun []string) error {
			_, err := c.svcs.CreateService(withToken(t, "admintoken"), &corev1.CreateServiceRequest{Namespace: "default", DryRun: dryRun,
				Service: &corev1.Service{Metadata: &metav1.ObjectMeta{Name: name}, Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 80}}}}})
			return err
		}
		testutil.EventuallyWithin(t, 5*time.Second, "the policy needs its params", func() bool { return create("probe", dry) != nil })
		wantRefusal(t, create("averyveryverylongname", nil), 422, apierrors.ReasonInvalid,
			"services \"averyveryverylongname\" is forbidden: ValidatingAdmissionPolicy 'with-params' with binding 'with-params' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction")
		if _, err := c.cms.CreateConfigMap(withToken(t, "admintoken"), &corev1.CreateConfigMapRequest{Namespace: "default",
			ConfigMap: &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: "svc-limits", Labels: map[string]string{"team": "a"}}, Data: map[string]string{"maxLen": "5"}}}); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWithin(t, 5*time.Second, "the params are seen", func() bool { return create("short", dry) == nil })
		wantRefusal(t, create("longername", nil), 403, apierrors.ReasonForbidden,
			`services "longername" is forbidden: ValidatingAdmissionPolicy 'with-params' with binding 'with-params' denied request: name longer than 5`)
	})

	t.Run("params by selector, excluded names", func(t *testing.T) {
		for name, max := range map[string]string{"limits-a": "10", "limits-b": "3"} {
			if _, err := c.cms.CreateConfigMap(withToken(t, "admintoken"), &corev1.CreateConfigMapRequest{Namespace: "default",
				ConfigMap: &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: name, Labels: map[string]string{"limits": "secrets", "team": "a"}},
					Data: map[string]string{"maxLen": max}}}); err != nil {
				t.Fatal(err)
			}
		}
		c.bind(t, `
metadata: {name: secret-names}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [secrets]}]
    excludeResourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [secrets], resourceNames: [exempt]}]
    objectSelector: {matchLabels: {names: checked}}
  validations:
  - expression: "object.metadata.name.size() <= int(params.data.maxLen)"
    messageExpression: "'longer than ' + params.data.maxLen + ' (' + params.metadata.name + ')'"
`, `
metadata: {name: secret-names}
spec:
  policyName: secret-names
  validationActions: [Deny]
  paramRef: {selector: {matchLabels: {limits: secrets}}, parameterNotFoundAction: Allow}
`)
		create := func(name string, dryRun []string) error {
			_, err := c.secrets.CreateSecret(withToken(t, "admintoken"), &corev1.CreateSecretRequest{Namespace: "default", DryRun: dryRun,
				Secret: &corev1.Secret{Metadata: &metav1.ObjectMeta{Name: name, Labels: map[string]string{"names": "checked"}}}})
			return err
		}
		testutil.EventuallyWithin(t, 5*time.Second, "the policy denies", func() bool { return create("abcd", dry) != nil })
		// Evaluated once per param: limits-b (3) refuses, limits-a (10)
		// would not.
		wantRefusal(t, create("abcd", nil), 422, apierrors.ReasonInvalid,
			`secrets "abcd" is forbidden: ValidatingAdmissionPolicy 'secret-names' with binding 'secret-names' denied request: longer than 3 (limits-b)`)
		for _, name := range []string{"abc", "exempt"} {
			if err := create(name, nil); err != nil {
				t.Errorf("secret %s: %v", name, err)
			}
		}
	})

	t.Run("failurePolicy and matchConditions", func(t *testing.T) {
		// labels.team is missing on most objects: an evaluation error.
		for _, fp := range []string{"Fail", "Ignore"} {
			name := "team-a-" + strings.ToLower(fp)
			c.bind(t, `
metadata: {name: `+name+`}
spec:
  failurePolicy: `+fp+`
  matchConstraints:
    resourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [secrets]}]
    objectSelector: {matchLabels: {policy: `+fp+`}}
  matchConditions:
  - {name: not-exempt, expression: "!has(object.metadata.annotations) || !('exempt' in object.metadata.annotations)"}
  validations:
  - expression: "object.metadata.labels.team == 'a'"
  - {expression: "object.metadata.name != 'blocked'", message: blocked}
`, `
metadata: {name: `+name+`}
spec: {policyName: `+name+`, validationActions: [Deny]}
`)
		}
		create := func(name, fp string, annotations map[string]string, dryRun []string) error {
			_, err := c.secrets.CreateSecret(withToken(t, "admintoken"), &corev1.CreateSecretRequest{Namespace: "default", DryRun: dryRun,
				Secret: &corev1.Secret{Metadata: &metav1.ObjectMeta{Name: name, Labels: map[string]string{"policy": fp}, Annotations: annotations}}})
			return err
		}
		// Both policies are active once each refuses the name "blocked".
		for _, fp := range []string{"Fail", "Ignore"} {
			testutil.EventuallyWithin(t, 5*time.Second, fp+" policy active", func() bool { return create("blocked", fp, nil, dry) != nil })
		}
		wantRefusal(t, create("blocked", "Ignore", nil, nil), 422, apierrors.ReasonInvalid,
			`secrets "blocked" is forbidden: ValidatingAdmissionPolicy 'team-a-ignore' with binding 'team-a-ignore' denied request: blocked`)
		wantRefusal(t, create("s1", "Fail", nil, nil), 422, apierrors.ReasonInvalid,
			`secrets "s1" is forbidden: ValidatingAdmissionPolicy 'team-a-fail' with binding 'team-a-fail' denied request: expression 'object.metadata.labels.team == 'a'' resulted in error: no such key: team`)
		if err := create("s2", "Fail", map[string]string{"exempt": "yes"}, nil); err != nil {
			t.Errorf("a request the matchConditions exclude: %v", err)
		}
		// Under Ignore the expression's error lets the request through.
		if err := create("s3", "Ignore", nil, nil); err != nil {
			t.Errorf("failurePolicy Ignore: %v", err)
		}
	})

	t.Run("policies are validated", func(t *testing.T) {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		fromYAML(t, `
metadata: {name: broken}
spec:
  matchConstraints:
    resourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}]
  validations:
  - expression: "object.spec.containers.all(c, c.image"
`, p)
		_, err := c.policies.CreateValidatingAdmissionPolicy(withToken(t, "admintoken"), &admissionregistrationv1.CreateValidatingAdmissionPolicyRequest{ValidatingAdmissionPolicy: p})
		se := apierrors.FromError(err)
		if se == nil || se.Reason != apierrors.ReasonInvalid || len(se.Causes) != 1 || se.Causes[0].Field != "spec.validations[0].expression" ||
			!strings.Contains(se.Causes[0].Message, "compilation failed: ERROR: <input>:1:") {
			t.Errorf("a policy whose expression does not compile: got %v", err)
		}
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		fromYAML(t, `
metadata: {name: both}
spec: {policyName: x, validationActions: [Deny, Warn]}
`, b)
		_, err = c.bindings.CreateValidatingAdmissionPolicyBinding(withToken(t, "admintoken"), &admissionregistrationv1.CreateValidatingAdmissionPolicyBindingRequest{ValidatingAdmissionPolicyBinding: b})
		wantRefusal(t, err, 422, apierrors.ReasonInvalid,
			`ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io "both" is invalid: spec.validationActions: Invalid value: []admissionregistration.ValidationAction{"Deny", "Warn"}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)`)
	})
}

// TestAdmissionPolicyParamAccess: as kube-apiserver's strategies, a writer
// who may not read a policy's paramKind (or a binding's params) is refused.
func TestAdmissionPolicyParamAccess(t *testing.T) {
	conn, _ := startStack(t)
	grantCluster(t, conn, "vap-writer", "bob", &rbacv1.PolicyRule{Verbs: []string{"create"}, ApiGroups: []string{"admissionregistration.k8s.io"},
		Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"}})
	waitAllowed(t, conn, "bobtoken", &authorizationv1.ResourceAttributes{Verb: "create", Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"})
	policies := admissionregistrationv1.NewValidatingAdmissionPolicyServiceClient(conn)
	bindings := admissionregistrationv1.NewValidatingAdmissionPolicyBindingServiceClient(conn)
	policy := `
metadata: {name: NAME}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}]
  validations: [{expression: "true"}]
`
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	fromYAML(t, strings.ReplaceAll(policy, "NAME", "bobs"), p)
	_, err := policies.CreateValidatingAdmissionPolicy(withToken(t, "bobtoken"), &admissionregistrationv1.CreateValidatingAdmissionPolicyRequest{ValidatingAdmissionPolicy: p})
	wantRefusal(t, err, 422, apierrors.ReasonInvalid,
		`ValidatingAdmissionPolicy.admissionregistration.k8s.io "bobs" is invalid: spec.paramKind: Forbidden: user &{bob 2 [system:authenticated] map[]} must have "get" permission on all objects of the referenced paramKind (kind=ConfigMap, apiVersion=v1)`)

	fromYAML(t, strings.ReplaceAll(policy, "NAME", "cm-params"), p)
	if _, err := policies.CreateValidatingAdmissionPolicy(withToken(t, "admintoken"), &admissionregistrationv1.CreateValidatingAdmissionPolicyRequest{ValidatingAdmissionPolicy: p}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, spec, want string }{
		{name: "unknown policy", spec: `{policyName: nope, validationActions: [Deny], paramRef: {name: p, namespace: default, parameterNotFoundAction: Deny}}`,
			want: `ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io "bobs" is invalid: spec.paramRef: Forbidden: unable to get policy nope to determine minimum required permissions and user &{bob 2 [system:authenticated] map[]} does not have "get" permission for all groups, versions and resources`},
		{name: "selector", spec: `{policyName: cm-params, validationActions: [Deny], paramRef: {selector: {}, parameterNotFoundAction: Allow}}`,
			want: `ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io "bobs" is invalid: spec.paramRef: Forbidden: user &{bob 2 [system:authenticated] map[]} does not have "list" permission on the object referenced by paramRef`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			fromYAML(t, "metadata: {name: bobs}\nspec: "+tc.spec, b)
			_, err := bindings.CreateValidatingAdmissionPolicyBinding(withToken(t, "bobtoken"), &admissionregistrationv1.CreateValidatingAdmissionPolicyBindingRequest{ValidatingAdmissionPolicyBinding: b})
			wantRefusal(t, err, 422, apierrors.ReasonInvalid, tc.want)
		})
	}
}

// TestAdmissionPolicyAuthorizer: CEL's authorizer asks kplane's RBAC about
// the requesting user, and namespaceObject is the request's namespace.
func TestAdmissionPolicyAuthorizer(t *testing.T) {
	conn, _ := startStack(t)
	grantCluster(t, conn, "cm-writer", "bob", &rbacv1.PolicyRule{Verbs: []string{"create"}, ApiGroups: []string{""}, Resources: []string{"configmaps"}})
	waitAllowed(t, conn, "bobtoken", &authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: "default"})
	c := policyClients{
		policies: admissionregistrationv1.NewValidatingAdmissionPolicyServiceClient(conn),
		bindings: admissionregistrationv1.NewValidatingAdmissionPolicyBindingServiceClient(conn),
		cms:      corev1.NewConfigMapServiceClient(conn),
	}
	c.bind(t, `
metadata: {name: needs-secrets}
spec:
  matchConstraints:
    resourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
  validations:
  - expression: "namespaceObject.metadata.name == object.metadata.namespace && namespaceObject.status.phase == 'Active'"
    message: "namespaceObject is the request's"
  - expression: "authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('list').allowed()"
    messageExpression: "request.userInfo.username + ' may not list secrets'"
`, `
metadata: {name: needs-secrets}
spec: {policyName: needs-secrets, validationActions: [Deny]}
`)
	create := func(token string, dryRun []string) error {
		_, err := c.cms.CreateConfigMap(withToken(t, token), &corev1.CreateConfigMapRequest{Namespace: "default", DryRun: dryRun,
			ConfigMap: &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: "cm"}}})
		return err
	}
	testutil.EventuallyWithin(t, 5*time.Second, "the policy denies bob", func() bool { return create("bobtoken", []string{"All"}) != nil })
	wantRefusal(t, create("bobtoken", nil), 422, apierrors.ReasonInvalid,
		`configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'needs-secrets' with binding 'needs-secrets' denied request: bob may not list secrets`)
	if err := create("admintoken", nil); err != nil {
		t.Errorf("admin, who may list secrets: %v", err)
	}
}

// TestAdmissionPolicyTypeChecking: a policy's status.typeChecking is what
// kube-controller-manager v1.33.13's policy status controller wrote for the
// same policy on kube-apiserver (testdata/typechecking.json): per
// expression, the type errors against each kind it matches.
func TestAdmissionPolicyTypeChecking(t *testing.T) {
	conn, _ := startStack(t)
	raw, err := os.ReadFile("testdata/typechecking.json")
	if err != nil {
		t.Fatal(err)
	}
	var recorded struct {
		Spec   json.RawMessage
		Status struct {
			ObservedGeneration int64
			TypeChecking       struct {
				ExpressionWarnings []struct{ FieldRef, Warning string }
			}
		}
	}
	if err := json.Unmarshal(raw, &recorded); err != nil {
		t.Fatal(err)
	}
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := kubejson.Unmarshal([]byte(`{"metadata":{"name":"typos"},"spec":`+string(recorded.Spec)+`}`), p, kubejson.Options{}); err != nil {
		t.Fatal(err)
	}
	policies := admissionregistrationv1.NewValidatingAdmissionPolicyServiceClient(conn)
	resp, err := policies.CreateValidatingAdmissionPolicy(withToken(t, "admintoken"), &admissionregistrationv1.CreateValidatingAdmissionPolicyRequest{ValidatingAdmissionPolicy: p})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetValidatingAdmissionPolicy().GetStatus()
	if st.GetObservedGeneration() != recorded.Status.ObservedGeneration {
		t.Errorf("observedGeneration: got %d, want %d", st.GetObservedGeneration(), recorded.Status.ObservedGeneration)
	}
	got := st.GetTypeChecking().GetExpressionWarnings()
	want := recorded.Status.TypeChecking.ExpressionWarnings
	if len(got) != len(want) {
		t.Fatalf("got %d warnings, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].GetFieldRef() != want[i].FieldRef || got[i].GetWarning() != want[i].Warning {
			t.Errorf("warning %d:\n got %s %q\nwant %s %q", i, got[i].GetFieldRef(), got[i].GetWarning(), want[i].FieldRef, want[i].Warning)
		}
	}

	// A new generation is checked again; a spec without type errors has none.
	p = resp.GetValidatingAdmissionPolicy()
	p.Spec.Validations = p.Spec.Validations[:1]
	p.Spec.Validations[0].Expression = "object.spec.replicas > 1 || !has(object.spec.replicas)"
	p.Spec.Validations[0].MessageExpression = "'x' + object.metadata.name"
	p.Spec.MatchConstraints.ResourceRules = p.Spec.MatchConstraints.ResourceRules[:1]
	up, err := policies.UpdateValidatingAdmissionPolicy(withToken(t, "admintoken"), &admissionregistrationv1.UpdateValidatingAdmissionPolicyRequest{Name: "typos", ValidatingAdmissionPolicy: p})
	if err != nil {
		t.Fatal(err)
	}
	if st := up.GetValidatingAdmissionPolicy().GetStatus(); st.GetObservedGeneration() != 2 || len(st.GetTypeChecking().GetExpressionWarnings()) != 0 {
		t.Errorf("after the fix: got status %v, want observedGeneration 2 and no warnings", st)
	}
}

// TestAdmissionPolicyAfterNodeRestriction: as in kube-apiserver,
// NodeRestriction refuses before the policies are asked.
func TestAdmissionPolicyAfterNodeRestriction(t *testing.T) {
	conn, _ := startStack(t)
	c := policyClients{
		policies: admissionregistrationv1.NewValidatingAdmissionPolicyServiceClient(conn),
		bindings: admissionregistrationv1.NewValidatingAdmissionPolicyBindingServiceClient(conn),
	}
	c.bind(t, `
metadata: {name: no-nodes}
spec:
  matchConstraints:
    resourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [nodes]}]
  validations: [{expression: "false", message: "no new nodes"}]
`, `
metadata: {name: no-nodes}
spec: {policyName: no-nodes, validationActions: [Deny]}
`)
	nodes := corev1.NewNodeServiceClient(conn)
	create := func(token, name string, dryRun []string) error {
		_, err := nodes.CreateNode(withToken(t, token), &corev1.CreateNodeRequest{DryRun: dryRun, Node: &corev1.Node{Metadata: &metav1.ObjectMeta{Name: name}}})
		return err
	}
	testutil.EventuallyWithin(t, 5*time.Second, "the policy denies", func() bool { return create("admintoken", "x", []string{"All"}) != nil })
	wantRefusal(t, create("admintoken", "x", nil), 422, apierrors.ReasonInvalid,
		`nodes "x" is forbidden: ValidatingAdmissionPolicy 'no-nodes' with binding 'no-nodes' denied request: no new nodes`)
	err := create("nodeatoken", "b", nil)
	if se := apierrors.FromError(err); se == nil || se.Reason != apierrors.ReasonForbidden || strings.Contains(se.Message, "ValidatingAdmissionPolicy") {
		t.Errorf("node a creating node b: got %v, want NodeRestriction's refusal", err)
	}
}

// auditAnnotations reads the audit log's annotations by audit ID.
func auditAnnotations(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			AuditID     string            `json:"auditID"`
			Annotations map[string]string `json:"annotations"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if len(l.Annotations) > 0 {
			out[l.AuditID] = l.Annotations
		}
	}
	return out
}
