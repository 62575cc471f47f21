// This file holds the tests of the basic verbs on a real store: create, get,
// update and delete, generateName, the authentication and authorization
// stages, validation errors, dry run, namespace lifecycle, conflicts and
// timeouts.

package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func TestCreateGetUpdateDelete(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	created := mustCreatePod(t, e, testPod("default", "web"))
	m := created.GetMetadata()
	if m.GetUid() == "" || m.GetCreationTimestamp() == nil || m.GetResourceVersion() == "" || m.GetGeneration() != 1 {
		t.Fatalf("create did not fill metadata: %v", m)
	}
	if got, want := created.GetStatus().GetPhase(), "Pending"; got != want {
		t.Errorf("phase: got %q, want %q", got, want)
	}
	if got, want := created.GetStatus().GetQosClass(), "BestEffort"; got != want {
		t.Errorf("qosClass: got %q, want %q", got, want)
	}
	got, err := e.pods.GetPod(ctx, &corev1.GetPodRequest{Namespace: "default", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.GetPod(), created) {
		t.Errorf("get: got %v, want %v", got.GetPod(), created)
	}
	_, err = e.pods.CreatePod(ctx, &corev1.CreatePodRequest{Namespace: "default", Pod: testPod("default", "web")})
	se := wantReason(t, err, apierrors.ReasonAlreadyExists)
	if want := `pods "web" already exists`; se.Message != want {
		t.Errorf("message: got %q, want %q", se.Message, want)
	}

	// Update the image: allowed; generation bumps; a stale RV conflicts.
	upd := proto.Clone(created).(*corev1.Pod)
	upd.Spec.Containers[0].Image = "nginx:1.28"
	ur, err := e.pods.UpdatePod(ctx, &corev1.UpdatePodRequest{Namespace: "default", Name: "web", Pod: upd})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ur.GetPod().GetMetadata().GetGeneration(), int64(2); got != want {
		t.Errorf("generation: got %d, want %d", got, want)
	}
	_, err = e.pods.UpdatePod(ctx, &corev1.UpdatePodRequest{Namespace: "default", Name: "web", Pod: upd})
	se = wantReason(t, err, apierrors.ReasonConflict)
	if !strings.Contains(se.Message, apierrors.ConflictModified) {
		t.Errorf("conflict message: got %q", se.Message)
	}
	// Pods need a resourceVersion on update.
	noRV := proto.Clone(ur.GetPod()).(*corev1.Pod)
	noRV.Metadata.ResourceVersion = ""
	_, err = e.pods.UpdatePod(ctx, &corev1.UpdatePodRequest{Namespace: "default", Name: "web", Pod: noRV})
	wantReason(t, err, apierrors.ReasonInvalid)

	// Unscheduled pods are deleted at once.
	_, err = e.pods.DeletePod(ctx, &corev1.DeletePodRequest{Namespace: "default", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.pods.GetPod(ctx, &corev1.GetPodRequest{Namespace: "default", Name: "web"})
	wantReason(t, err, apierrors.ReasonNotFound)
	_, err = e.pods.DeletePod(ctx, &corev1.DeletePodRequest{Namespace: "default", Name: "web"})
	wantReason(t, err, apierrors.ReasonNotFound)
}

func TestGenerateName(t *testing.T) {
	e := newEnv(t, nil)
	seen := map[string]bool{}
	for range 5 {
		p := testPod("default", "")
		p.Metadata.GenerateName = "web-"
		got := mustCreatePod(t, e, p)
		n := got.GetMetadata().GetName()
		if !strings.HasPrefix(n, "web-") || len(n) != len("web-")+5 || seen[n] {
			t.Errorf("generated name %q: want web- plus 5 new characters", n)
		}
		seen[n] = true
	}
}

func TestAuthenticationAndAuthorizationStages(t *testing.T) {
	e := newEnv(t, nil)
	var trailer metadata.MD
	_, err := e.pods.CreatePod(as(t, ""), &corev1.CreatePodRequest{Namespace: "default", Pod: testPod("default", "a")}, grpc.Trailer(&trailer))
	wantReason(t, err, apierrors.ReasonUnauthorized)
	if got := trailer.Get(deniedByTrailer); len(got) != 1 || got[0] != stageAuthn {
		t.Errorf("denied-by: got %v, want [%s]", got, stageAuthn)
	}
	_, err = e.pods.CreatePod(as(t, "nobody"), &corev1.CreatePodRequest{Namespace: "default", Pod: testPod("default", "a")}, grpc.Trailer(&trailer))
	se := wantReason(t, err, apierrors.ReasonForbidden)
	if want := `pods is forbidden: User "nobody" cannot create resource "pods" in API group "" in the namespace "default"`; se.Message != want {
		t.Errorf("message: got %q, want %q", se.Message, want)
	}
	if got := trailer.Get(deniedByTrailer); len(got) != 1 || got[0] != stageAuthz {
		t.Errorf("denied-by: got %v, want [%s]", got, stageAuthz)
	}
}

func TestValidationErrorsThroughGRPC(t *testing.T) {
	e := newEnv(t, nil)
	p := &corev1.Pod{Metadata: om("default", "Bad_Name"), Spec: &corev1.PodSpec{Containers: []*corev1.Container{
		{Name: "c", Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "lots"}}},
	}}}
	var trailer metadata.MD
	_, err := e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default", Pod: p}, grpc.Trailer(&trailer))
	se := wantReason(t, err, apierrors.ReasonInvalid)
	fields := map[string]bool{}
	for _, c := range se.Causes {
		fields[c.Field] = true
	}
	for _, f := range []string{"metadata.name", "spec.containers[0].image", "spec.containers[0].resources.requests[cpu]"} {
		if !fields[f] {
			t.Errorf("no cause for %s in %v", f, se.Causes)
		}
	}
	if !strings.HasPrefix(se.Message, `Pod "Bad_Name" is invalid: [`) {
		t.Errorf("message: got %q", se.Message)
	}
	if got := trailer.Get(deniedByTrailer); len(got) != 1 || got[0] != stageValidate {
		t.Errorf("denied-by: got %v, want [%s]", got, stageValidate)
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	r, err := e.pods.CreatePod(ctx, &corev1.CreatePodRequest{Namespace: "default", Pod: testPod("default", "dry"), DryRun: []string{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetPod().GetSpec().GetRestartPolicy() != "Always" || r.GetPod().GetMetadata().GetUid() == "" {
		t.Errorf("dry-run create did not answer as if written: %v", r.GetPod())
	}
	_, err = e.pods.GetPod(ctx, &corev1.GetPodRequest{Namespace: "default", Name: "dry"})
	wantReason(t, err, apierrors.ReasonNotFound)
	// Dry-run still validates.
	_, err = e.pods.CreatePod(ctx, &corev1.CreatePodRequest{Namespace: "default", Pod: &corev1.Pod{Metadata: om("default", "x")}, DryRun: []string{"All"}})
	wantReason(t, err, apierrors.ReasonInvalid)
	// Dry-run update and delete leave the object alone.
	p := mustCreatePod(t, e, testPod("default", "real"))
	u := proto.Clone(p).(*corev1.Pod)
	u.Spec.Containers[0].Image = "other:1"
	if _, err := e.pods.UpdatePod(ctx, &corev1.UpdatePodRequest{Namespace: "default", Name: "real", Pod: u, DryRun: []string{"All"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pods.DeletePod(ctx, &corev1.DeletePodRequest{Namespace: "default", Name: "real", DryRun: []string{"All"}}); err != nil {
		t.Fatal(err)
	}
	g, err := e.pods.GetPod(ctx, &corev1.GetPodRequest{Namespace: "default", Name: "real"})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(g.GetPod(), p) {
		t.Errorf("dry-run changed the object: got %v, want %v", g.GetPod(), p)
	}
	_, err = e.pods.CreatePod(ctx, &corev1.CreatePodRequest{Namespace: "default", Pod: testPod("default", "y"), DryRun: []string{"Some"}})
	wantReason(t, err, apierrors.ReasonBadRequest)
}

func TestNamespaceLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	tests := []struct {
		name string
		ns   string
		want apierrors.Reason
	}{
		{name: "missing namespace", ns: "nope", want: apierrors.ReasonNotFound},
		{name: "terminating namespace", ns: "going", want: apierrors.ReasonForbidden},
		{name: "active namespace", ns: "here", want: ""},
	}
	for _, n := range []string{"going", "here"} {
		nsObj := &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: n}}
		if _, err := e.ns.CreateNamespace(ctx, &corev1.CreateNamespaceRequest{Namespace: nsObj}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := e.ns.DeleteNamespace(ctx, &corev1.DeleteNamespaceRequest{Name: "going"})
	if err != nil {
		t.Fatal(err)
	}
	if d.GetNamespace().GetStatus().GetPhase() != "Terminating" || d.GetNamespace().GetMetadata().GetDeletionTimestamp() == nil {
		t.Fatalf("deleted namespace not Terminating: %v", d.GetNamespace())
	}
	// NamespaceLifecycle reads the namespace cache (as Kubernetes' plugin
	// reads its informer): let it see the deletion.
	if err := e.srv.cachers["namespaces"].waitFor(ctx, rvInt(t, d.GetNamespace().GetMetadata().GetResourceVersion())); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: tt.ns, ConfigMap: &corev1.ConfigMap{Metadata: om(tt.ns, "cm")}})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
				return
			}
			wantReason(t, err, tt.want)
		})
	}
	for _, n := range protectedNamespaces {
		t.Run("delete "+n, func(t *testing.T) {
			_, err := e.ns.DeleteNamespace(ctx, &corev1.DeleteNamespaceRequest{Name: n})
			se := wantReason(t, err, apierrors.ReasonForbidden)
			if want := fmt.Sprintf("namespaces %q is forbidden: this namespace may not be deleted", n); se.Message != want {
				t.Errorf("got %q, want %q", se.Message, want)
			}
		})
	}
	t.Run("forbidden message", func(t *testing.T) {
		_, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "going", ConfigMap: &corev1.ConfigMap{Metadata: om("going", "cm")}})
		se := wantReason(t, err, apierrors.ReasonForbidden)
		if want := `configmaps "cm" is forbidden: unable to create new content in namespace going because it is being terminated`; se.Message != want {
			t.Errorf("got %q, want %q", se.Message, want)
		}
	})
	// Finalizing the terminating namespace deletes it.
	if _, err := e.ns.FinalizeNamespace(ctx, &corev1.FinalizeNamespaceRequest{Name: "going", Namespace: &corev1.Namespace{Spec: &corev1.NamespaceSpec{}}}); err != nil {
		t.Fatal(err)
	}
	_, err = e.ns.GetNamespace(ctx, &corev1.GetNamespaceRequest{Name: "going"})
	wantReason(t, err, apierrors.ReasonNotFound)
}

// TestNamespaceFinalize walks namespaces through Kubernetes' deletion:
// spec.finalizers ["kubernetes"] from creation, DELETE marks Terminating and
// keeps the object, namespaces/finalize empties spec.finalizers, and the
// namespace goes once no spec or metadata finalizer is left.
func TestNamespaceFinalize(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	get := func(name string) (*corev1.Namespace, error) {
		r, err := e.ns.GetNamespace(ctx, &corev1.GetNamespaceRequest{Name: name})
		return r.GetNamespace(), err
	}
	finalize := func(name string, fins ...string) (*corev1.Namespace, error) {
		r, err := e.ns.FinalizeNamespace(ctx, &corev1.FinalizeNamespaceRequest{Name: name, Namespace: &corev1.Namespace{Spec: &corev1.NamespaceSpec{Finalizers: fins}}})
		return r.GetNamespace(), err
	}
	del := func(name string) (*corev1.Namespace, error) {
		r, err := e.ns.DeleteNamespace(ctx, &corev1.DeleteNamespaceRequest{Name: name})
		return r.GetNamespace(), err
	}
	for _, tc := range []struct {
		name      string
		metaFins  []string
		finalize  []string // spec.finalizers written after the delete
		wantGone  bool     // after the finalize
		finalizeF apierrors.Reason
	}{
		{name: "finalize empties: gone", finalize: []string{}, wantGone: true},
		{name: "finalize keeps another: stays", finalize: []string{"example.com/other"}},
		{name: "metadata finalizer left: stays", metaFins: []string{"example.com/hold"}, finalize: []string{}},
		{name: "invalid finalizer", finalize: []string{"not a name"}, finalizeF: apierrors.ReasonInvalid},
		{name: "unqualified non-standard finalizer", finalize: []string{"other"}, finalizeF: apierrors.ReasonInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.NewReplacer(" ", "-", ":", "").Replace(tc.name)
			c, err := e.ns.CreateNamespace(ctx, &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{
				Metadata: &metav1.ObjectMeta{Name: name, Finalizers: tc.metaFins},
				// A client's spec.finalizers at creation are kept, and
				// "kubernetes" is added.
				Spec: &corev1.NamespaceSpec{Finalizers: []string{"example.com/mine"}}}})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.GetNamespace().GetSpec().GetFinalizers(); !slices.Equal(got, []string{"example.com/mine", "kubernetes"}) {
				t.Fatalf("spec.finalizers at creation: got %v, want [example.com/mine kubernetes]", got)
			}
			// An update may not change spec.finalizers.
			n := c.GetNamespace()
			n.Spec.Finalizers = nil
			u, err := e.ns.UpdateNamespace(ctx, &corev1.UpdateNamespaceRequest{Name: name, Namespace: n})
			if err != nil {
				t.Fatal(err)
			}
			if got := u.GetNamespace().GetSpec().GetFinalizers(); len(got) != 2 {
				t.Fatalf("update changed spec.finalizers to %v", got)
			}
			d, err := del(name)
			if err != nil {
				t.Fatal(err)
			}
			if d.GetStatus().GetPhase() != "Terminating" || d.GetMetadata().GetDeletionTimestamp() == nil {
				t.Fatalf("deleted namespace: got phase %q, deletionTimestamp %v", d.GetStatus().GetPhase(), d.GetMetadata().GetDeletionTimestamp())
			}
			if _, err := get(name); err != nil {
				t.Fatalf("deleted namespace is gone already: %v", err)
			}
			_, err = del(name)
			se := wantReason(t, err, apierrors.ReasonConflict)
			if !strings.Contains(se.Message, "The system is ensuring all content is removed from this namespace.") {
				t.Errorf("second delete: got %q", se.Message)
			}
			f, err := finalize(name, tc.finalize...)
			if tc.finalizeF != "" {
				se := wantReason(t, err, tc.finalizeF)
				if len(se.Causes) == 0 || se.Causes[0].Field != "spec.finalizers[0]" {
					t.Errorf("got causes %v, want spec.finalizers[0]", se.Causes)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f.GetSpec().GetFinalizers(), tc.finalize) && len(tc.finalize)+len(f.GetSpec().GetFinalizers()) > 0 {
				t.Errorf("finalize: got spec.finalizers %v, want %v", f.GetSpec().GetFinalizers(), tc.finalize)
			}
			_, err = get(name)
			if tc.wantGone {
				wantReason(t, err, apierrors.ReasonNotFound)
				return
			}
			if err != nil {
				t.Fatalf("namespace held by a finalizer is gone: %v", err)
			}
		})
	}
	t.Run("live namespace finalized, then deleted: gone at once", func(t *testing.T) {
		if _, err := e.ns.CreateNamespace(ctx, &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "quick"}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := finalize("quick"); err != nil {
			t.Fatal(err)
		}
		if _, err := get("quick"); err != nil {
			t.Fatalf("live namespace went on finalize: %v", err)
		}
		if _, err := del("quick"); err != nil {
			t.Fatal(err)
		}
		_, err := get("quick")
		wantReason(t, err, apierrors.ReasonNotFound)
	})
}

// TestConcurrentUpdates: 50 clients update one object at once, each with
// the resourceVersion it read. Every accepted update must have carried the
// then-current resourceVersion, the others get Conflict, and the final
// object is the last accepted one.
func TestConcurrentUpdates(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	cm, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: &corev1.ConfigMap{Metadata: om("default", "shared"), Data: map[string]string{"writer": "none"}}})
	if err != nil {
		t.Fatal(err)
	}
	start := cm.GetConfigMap()
	type accepted struct {
		fromRV, toRV string
		writer       string
	}
	var (
		mu       sync.Mutex
		oks      []accepted
		conflict int
		wg       sync.WaitGroup
	)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; attempt < 3; attempt++ {
				g, err := e.cms.GetConfigMap(ctx, &corev1.GetConfigMapRequest{Namespace: "default", Name: "shared"})
				if err != nil {
					t.Error(err)
					return
				}
				obj := g.GetConfigMap()
				from := obj.GetMetadata().GetResourceVersion()
				writer := fmt.Sprintf("%d/%d", i, attempt) // unique: no no-op updates
				obj.Data = map[string]string{"writer": writer}
				u, err := e.cms.UpdateConfigMap(ctx, &corev1.UpdateConfigMapRequest{Namespace: "default", Name: "shared", ConfigMap: obj})
				mu.Lock()
				switch {
				case err == nil:
					oks = append(oks, accepted{fromRV: from, toRV: u.GetConfigMap().GetMetadata().GetResourceVersion(), writer: writer})
				case apierrors.IsConflict(err):
					conflict++
				default:
					t.Errorf("update: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(oks) == 0 || conflict == 0 {
		t.Fatalf("got %d accepted and %d conflicts; want both", len(oks), conflict)
	}
	// The accepted updates form one chain: each started from the RV the
	// previous one produced.
	next := map[string]accepted{}
	for _, a := range oks {
		if _, dup := next[a.fromRV]; dup {
			t.Fatalf("two updates accepted from resourceVersion %s", a.fromRV)
		}
		next[a.fromRV] = a
	}
	rv, last := start.GetMetadata().GetResourceVersion(), accepted{}
	for range oks {
		a, ok := next[rv]
		if !ok {
			t.Fatalf("no accepted update from resourceVersion %s: the chain is broken", rv)
		}
		last, rv = a, a.toRV
	}
	final, err := e.cms.GetConfigMap(ctx, &corev1.GetConfigMapRequest{Namespace: "default", Name: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	if got := final.GetConfigMap(); got.GetMetadata().GetResourceVersion() != last.toRV || got.GetData()["writer"] != last.writer {
		t.Errorf("final object: got rv %s writer %s, want rv %s writer %s", got.GetMetadata().GetResourceVersion(), got.GetData()["writer"], last.toRV, last.writer)
	}
	t.Logf("%d accepted, %d conflicts", len(oks), conflict)
}

// TestServerReflection: grpcurl and friends can discover the services.
func TestServerReflection(t *testing.T) {
	e := newEnv(t, nil)
	st, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(admin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		got[s.GetName()] = true
	}
	for _, want := range []string{"kplane.core.v1.PodService", "kplane.apps.v1.DeploymentService", "kplane.rbac.v1.ClusterRoleBindingService", "kplane.admissionregistration.v1.ValidatingWebhookConfigurationService"} {
		if !got[want] {
			t.Errorf("reflection does not list %s (got %v)", want, got)
		}
	}

	// Without credentials, reflection is refused, as discovery is.
	anon, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(as(t, ""))
	if err == nil {
		_ = anon.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
		_, err = anon.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("reflection without credentials: got %v, want Unauthenticated", err)
	}
}

// TestRequestTimeoutBoundsUnaryCalls: every unary call runs under a
// deadline of at most Config.RequestTimeout; a nearer client deadline wins.
func TestRequestTimeoutBoundsUnaryCalls(t *testing.T) {
	s := &Server{cfg: Config{RequestTimeout: time.Minute}}
	check := func(ctx context.Context, want time.Duration) {
		t.Helper()
		start := time.Now()
		_, _ = s.boundUnary(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
			d, ok := ctx.Deadline()
			if !ok || d.Sub(start) > want+time.Second || d.Sub(start) < want-time.Second {
				t.Errorf("deadline %v after the start (set: %v), want about %v", d.Sub(start), ok, want)
			}
			return nil, nil
		})
	}
	check(context.Background(), time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	check(ctx, 5*time.Second)
}

// TestUpdateFromStaleCacheLosesNothing: an update's first attempt starts
// from the watch cache's copy; when that copy is stale (the cache not yet
// caught up), the write must still apply to the store's current object: no
// change made in between is lost, and a resourceVersion the client read
// from the store is not refused because the cache is behind.
func TestUpdateFromStaleCacheLosesNothing(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as(t, "admin")
	r := e.srv.resources["pods"]
	cr, err := e.pods.CreatePod(ctx, &corev1.CreatePodRequest{Namespace: "default", Pod: testPod("default", "web")})
	if err != nil {
		t.Fatal(err)
	}
	created := cr.GetPod()
	stale := proto.Clone(created).(*corev1.Pod)
	upd := proto.Clone(created).(*corev1.Pod)
	upd.Metadata.Labels = map[string]string{"v": "2"}
	resp, err := e.pods.UpdatePod(ctx, &corev1.UpdatePodRequest{Namespace: "default", Name: "web", Pod: upd})
	if err != nil {
		t.Fatal(err)
	}
	cur := resp.GetPod()
	// Wait for the cache to hold the update, then put the old copy back.
	ch := e.srv.cachers["pods"]
	key := e.srv.store.key(r, "default", "web")
	for {
		ch.mu.Lock()
		obj := ch.state[key]
		if obj != nil && meta(obj).GetResourceVersion() == cur.GetMetadata().GetResourceVersion() {
			ch.state[key] = stale
			ch.mu.Unlock()
			break
		}
		ch.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}

	// A status update carries the metadata of the object it updates: from
	// the stale copy it would put the labels back.
	st := proto.Clone(cur).(*corev1.Pod)
	st.Status = &corev1.PodStatus{Phase: "Running"}
	st.Metadata.ResourceVersion = "" // unconditional
	if _, err := e.pods.UpdatePodStatus(ctx, &corev1.UpdatePodStatusRequest{Namespace: "default", Name: "web", Pod: st}); err != nil {
		t.Fatal(err)
	}
	got, err := e.pods.GetPod(ctx, &corev1.GetPodRequest{Namespace: "default", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetPod().GetMetadata().GetLabels()["v"] != "2" || got.GetPod().GetStatus().GetPhase() != "Running" {
		t.Fatalf("after a status update from a stale cache: labels %v, phase %q; want v=2, Running",
			got.GetPod().GetMetadata().GetLabels(), got.GetPod().GetStatus().GetPhase())
	}

	// The cache stale again; an update conditional on the store's current
	// resourceVersion succeeds.
	ch.mu.Lock()
	ch.state[key] = stale
	ch.mu.Unlock()
	cond := proto.Clone(got.GetPod()).(*corev1.Pod)
	cond.Metadata.Labels["v"] = "3"
	if _, err := e.pods.UpdatePod(ctx, &corev1.UpdatePodRequest{Namespace: "default", Name: "web", Pod: cond}); err != nil {
		t.Fatalf("update conditional on the current resourceVersion with a stale cache: %v", err)
	}
}
