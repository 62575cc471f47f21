// This file holds the test of kubectl rollout status, rollout restart and
// scale on a Deployment, through the gateway while the controllers run.

package kubectltest

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

// TestKubectlRollout drives a Deployment with the real kubectl through the
// gateway while the controllers run: rollout status waits for the rollout,
// rollout restart makes a new ReplicaSet, scale goes through deployments/scale.
func TestKubectlRollout(t *testing.T) {
	kubectl := testutil.RequireBinary(t, "kubectl", "apt-get install kubectl (or the Google Cloud SDK kubectl component)")
	env := apiservertest.Start(t, apiservertest.Options{})
	gw, err := gateway.New(gateway.Config{Conn: env.Dial(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(gw)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kplane
  cluster: {server: %s, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %s}
contexts:
- name: kplane
  context: {cluster: kplane, user: admin, namespace: roll}
current-context: kplane
`, srv.URL, apiservertest.AdminToken)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	exec1 := func(limit time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kc, "KUBECACHEDIR="+filepath.Join(dir, "cache"), "HOME="+dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec1(90*time.Second, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	conn := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	m, err := controllers.New(controllers.Config{Conn: conn, Controllers: []string{controllers.Deployment, controllers.ReplicaSet, controllers.GarbageCollector}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	kubelet(ctx, conn)
	if _, err := client.Must[*corev1.Namespace](conn).Create(ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "roll"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// kubectl rollout status watches the Deployment until its status and
	// conditions say the rollout is complete, prints its verdict and
	// exits; it is killed (and the test fails) if it does not exit.
	rolledOut := func() {
		t.Helper()
		out, err := exec1(90*time.Second, "rollout", "status", "deployment/web", "--timeout=80s")
		if err != nil || !strings.Contains(out, "successfully rolled out") {
			t.Fatalf("kubectl rollout status: %v\n%s", err, out)
		}
	}
	run("create", "deployment", "web", "--image=nginx:1", "--replicas=2")
	rolledOut()
	run("rollout", "restart", "deployment/web")
	rolledOut()
	rss, _, err := client.Must[*appsv1.ReplicaSet](conn).List(ctx, "roll", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rss) != 2 {
		t.Errorf("got %d replicasets after rollout restart, want 2", len(rss))
	}
	run("scale", "deployment/web", "--replicas=4")
	rolledOut()
	d, err := client.Must[*appsv1.Deployment](conn).Get(ctx, "roll", "web")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.GetStatus().GetAvailableReplicas(); got != 4 {
		t.Errorf("got %d available replicas after kubectl scale, want 4", got)
	}
	if rev := d.GetMetadata().GetAnnotations()["deployment.kubernetes.io/revision"]; rev != "2" {
		t.Errorf("got revision %q, want 2", rev)
	}
}

// kubelet marks every pod Running and Ready through pods/status, standing
// in for node agents, until ctx ends.
func kubelet(ctx context.Context, conn grpc.ClientConnInterface) {
	pods := client.Must[*corev1.Pod](conn)
	inf := client.NewInformer(client.ListWatch(pods, "", "", "", 500), client.InformerOptions[*corev1.Pod]{})
	q := client.NewQueue("kubelet", 0, 0)
	inf.AddEventHandler(client.EnqueueHandler[*corev1.Pod](q))
	go func() { _ = inf.Run(ctx) }()
	go client.RunWorkers(ctx, q, 4, func(ctx context.Context, key string) (client.Result, error) {
		p, ok := inf.Store().Get(key)
		if !ok || p.GetMetadata().GetDeletionTimestamp() != nil || p.GetStatus().GetPhase() == "Running" {
			return client.Result{}, nil
		}
		u := proto.Clone(p).(*corev1.Pod)
		now := timestamppb.Now()
		u.Status = &corev1.PodStatus{Phase: "Running", PodIp: "10.0.0.1", StartTime: now,
			Conditions: []*corev1.PodCondition{{Type: "Ready", Status: "True", LastTransitionTime: now}}}
		_, err := pods.UpdateStatus(ctx, u)
		if apierrors.IsNotFound(err) {
			return client.Result{}, nil
		}
		return client.Result{}, err
	}, nil)
}
