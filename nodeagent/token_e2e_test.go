// End-to-end test of the ServiceAccount token volume on the built-in
// runtime: the API service's ServiceAccount admission adds it, the agent
// fills it with a token bound to the pod (TokenRequest), and the Node
// authorizer with the API service's NodeRestriction rule limits which
// tokens a node may ask for.

package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/apiserver/serviceaccountadmission"
	"github.com/kplane/kplane/services/client"

	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// startClusterWithSAAdmission is startCluster with the ServiceAccount
// admission plugin installed as `kplane apiserver` installs it.
func startClusterWithSAAdmission(t *testing.T) *cluster {
	t.Helper()
	env := apiservertest.Start(t, apiservertest.Options{TLS: true, Configure: func(c *apiserver.Config) {
		sa := serviceaccountadmission.New(true)
		c.Mutating = append([]apiserver.MutatingAdmission{sa}, c.Mutating...)
		c.Informers["serviceaccounts"] = append(c.Informers["serviceaccounts"], sa)
	}})
	admin := env.Dial(t, apiservertest.AdminToken)
	return &cluster{env: env, admin: admin, pods: client.Must[*corev1.Pod](admin)}
}

// TestServiceAccountTokenVolume: a pod gets the kube-api-access volume; its
// token file holds a token bound to the pod that TokenReview accepts as
// the pod's ServiceAccount, beside ca.crt and namespace. A node may ask
// tokens only for its own pods' ServiceAccounts, bound to its own pods.
func TestServiceAccountTokenVolume(t *testing.T) {
	c := startClusterWithSAAdmission(t)
	root := filepath.Join(shortDir(t), "root")
	startSimNode(t, c, "n1", func(cfg *Config) { cfg.RootDir = root })
	ctx := context.Background()
	sas := client.Must[*corev1.ServiceAccount](c.admin)
	for _, name := range []string{"default", "other"} {
		if _, err := sas.Create(ctx, &corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.Must[*corev1.ConfigMap](c.admin).Create(ctx, &corev1.ConfigMap{
		Metadata: &metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: "default"}, Data: map[string]string{"ca.crt": "THE CA"}}); err != nil {
		t.Fatal(err)
	}

	// A pod naming a ServiceAccount that does not exist is refused.
	_, err := c.pods.Create(ctx, simPod("ghost", nil, func(s *corev1.PodSpec) { s.ServiceAccountName = "ghost" }))
	if want := `pods "ghost" is forbidden: error looking up service account default/ghost: serviceaccount "ghost" not found`; !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("pod with a missing ServiceAccount: got %v, want %q", err, want)
	}

	p := c.runPod(t, simPod("web", nil, nil), "n1")
	if p.Spec.ServiceAccountName != "default" || len(p.Spec.Volumes) != 1 || !strings.HasPrefix(p.Spec.Volumes[0].Name, "kube-api-access-") {
		t.Fatalf("admitted pod: serviceAccountName %q, volumes %v", p.Spec.ServiceAccountName, p.Spec.Volumes)
	}
	c.waitPod(t, "default", "web", "Running", phaseIs(PhaseRunning))
	dir := filepath.Join(root, "pods", p.Metadata.Uid, "volumes", "kubernetes.io~projected", p.Spec.Volumes[0].Name)
	files := map[string]string{}
	for _, f := range []string{"token", "ca.crt", "namespace"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = string(b)
	}
	if files["ca.crt"] != "THE CA" || files["namespace"] != "default" {
		t.Errorf("ca.crt %q, namespace %q", files["ca.crt"], files["namespace"])
	}
	auth := authenticationv1.NewAuthenticationServiceClient(c.admin)
	r, err := auth.CreateTokenReview(ctx, &authenticationv1.CreateTokenReviewRequest{TokenReview: &authenticationv1.TokenReview{
		Spec: &authenticationv1.TokenReviewSpec{Token: files["token"]}}})
	if err != nil {
		t.Fatal(err)
	}
	st := r.GetTokenReview().GetStatus()
	if !st.GetAuthenticated() || st.GetUser().GetUsername() != "system:serviceaccount:default:default" ||
		!slicesHas(st.GetUser().GetExtra()["authentication.kubernetes.io/pod-name"].GetItems(), "web") ||
		!slicesHas(st.GetUser().GetExtra()["authentication.kubernetes.io/node-name"].GetItems(), "n1") {
		t.Errorf("TokenReview of the pod's token: got %v", st)
	}

	// What a node may ask for.
	other := c.runPod(t, simPod("elsewhere", nil, nil), "n2")
	node := authenticationv1.NewAuthenticationServiceClient(c.env.DialCert(t, "system:node:n1", "system:nodes"))
	ask := func(sa string, ref *authenticationv1.BoundObjectReference) error {
		_, err := node.CreateServiceAccountToken(ctx, &authenticationv1.CreateServiceAccountTokenRequest{Namespace: "default", Name: sa,
			TokenRequest: &authenticationv1.TokenRequest{Spec: &authenticationv1.TokenRequestSpec{BoundObjectRef: ref}}})
		if err != nil {
			return apierrors.FromError(err)
		}
		return nil
	}
	podRef := func(p *corev1.Pod) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{ApiVersion: "v1", Kind: "Pod", Name: p.Metadata.Name, Uid: p.Metadata.Uid}
	}
	for _, tt := range []struct {
		name, sa string
		ref      *authenticationv1.BoundObjectReference
		want     string // "" allowed
	}{
		{name: "own pod", sa: "default", ref: podRef(p)},
		{name: "unbound", sa: "default", want: `serviceaccounts "default" is forbidden: node requested token not bound to a pod`},
		{name: "no uid", sa: "default", ref: &authenticationv1.BoundObjectReference{ApiVersion: "v1", Kind: "Pod", Name: "web"},
			want: `serviceaccounts "default" is forbidden: node requested token with a pod binding without a uid`},
		{name: "another node's pod", sa: "default", ref: podRef(other),
			want: `serviceaccounts "default" is forbidden: node requested token bound to a pod scheduled on a different node`},
		{name: "a ServiceAccount none of its pods uses", sa: "other", ref: podRef(p), want: "no relationship found between node 'n1' and this object"},
	} {
		err := ask(tt.sa, tt.ref)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: got %v, want a token", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
		}
	}
}

func slicesHas(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
