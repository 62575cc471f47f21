// This file tests API Priority and Fairness against a real API service:
// calls classified into Kubernetes' bootstrap FlowSchemas (a node's into
// system-nodes, an admin's into exempt, a plain user's into
// global-default, an impersonated call as the user it acts as) with the
// schema and level named in the response headers, and a flood by one user
// refused with 429 and Retry-After while another flow's calls still run.
package apiserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/identity"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	flowcontrolv1 "github.com/kplane/kplane/proto/kplane/flowcontrol/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// apfAuthn: "Bearer admin" is in system:masters, "Bearer node-a" is the
// node a, any other name a plain authenticated user.
type apfAuthn struct{}

func (apfAuthn) Authenticate(ctx context.Context) (request.User, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		name, ok := strings.CutPrefix(v, "Bearer ")
		if !ok {
			continue
		}
		switch {
		case name == "admin":
			return request.User{Name: "admin", Groups: []string{request.MastersGroup, request.AuthenticatedGroup}}, nil
		case strings.HasPrefix(name, "node-"):
			return request.User{Name: "system:node:" + strings.TrimPrefix(name, "node-"),
				Groups: []string{"system:nodes", request.AuthenticatedGroup}}, nil
		}
		return request.User{Name: name, Groups: []string{request.AuthenticatedGroup}}, nil
	}
	return request.User{}, apierrors.NewUnauthorized("")
}

// gate holds the creates of ConfigMaps named held-* in admission until
// released: calls that occupy their level's seats for as long as the test
// wants, with no timing involved.
type gate struct {
	entered chan string
	release chan struct{}
}

func (g *gate) Admit(ctx context.Context, a *request.Admission) error {
	if a.Resource == "configmaps" && strings.HasPrefix(a.Name, "held-") {
		g.entered <- a.Name
		select {
		case <-g.release:
		case <-ctx.Done():
		}
	}
	return nil
}

func newAPFEnv(t *testing.T, g *gate) *env {
	return newEnv(t, func(c *Config) {
		c.Authenticator = apfAuthn{}
		c.EnablePriorityAndFairness = true
		c.MaxRequestsInflight, c.MaxMutatingRequestsInflight = 1, 1
		if g != nil {
			c.Mutating = append(c.Mutating, g)
		}
	})
}

// classifiedAs makes a call as user and returns the FlowSchema and level
// uids the service named in its response headers.
func classifiedAs(t *testing.T, e *env, user string) (fs, pl string) {
	t.Helper()
	var md metadata.MD
	if _, err := e.ns.GetNamespace(as(t, user), &corev1.GetNamespaceRequest{Name: "default"}, grpc.Header(&md)); err != nil {
		t.Fatalf("get as %s: %v", user, err)
	}
	return strings.Join(md.Get(apierrors.FlowSchemaUIDHeader), ","), strings.Join(md.Get(apierrors.PriorityLevelUIDHeader), ",")
}

func TestPriorityAndFairnessClassification(t *testing.T) {
	e := newAPFEnv(t, nil)
	ctx := admin(t)
	fsc := flowcontrolv1.NewFlowSchemaServiceClient(e.conn)
	plc := flowcontrolv1.NewPriorityLevelConfigurationServiceClient(e.conn)
	uid := func(fs string) (string, string) {
		r, err := fsc.GetFlowSchema(ctx, &flowcontrolv1.GetFlowSchemaRequest{Name: fs})
		if err != nil {
			return "", ""
		}
		p, err := plc.GetPriorityLevelConfiguration(ctx, &flowcontrolv1.GetPriorityLevelConfigurationRequest{
			Name: r.GetFlowSchema().GetSpec().GetPriorityLevelConfiguration().GetName()})
		if err != nil {
			return "", ""
		}
		return r.GetFlowSchema().GetMetadata().GetUid(), p.GetPriorityLevelConfiguration().GetMetadata().GetUid()
	}
	for _, c := range []struct{ user, schema string }{
		{"node-a", "system-nodes"}, {"admin", "exempt"}, {"alice", "global-default"},
	} {
		testutil.EventuallyWithin(t, 10*time.Second, c.user+" classified into "+c.schema, func() bool {
			wantFS, wantPL := uid(c.schema)
			fs, pl := classifiedAs(t, e, c.user)
			return wantFS != "" && fs == wantFS && pl == wantPL
		})
	}
	// An admin acting as alice is classified as alice, as in Kubernetes.
	wantFS, _ := uid("global-default")
	var md metadata.MD
	actAs := metadata.AppendToOutgoingContext(admin(t), identity.ActAsUserKey, "alice", identity.ActAsGroupKey, request.AuthenticatedGroup)
	if _, err := e.ns.GetNamespace(actAs, &corev1.GetNamespaceRequest{Name: "default"}, grpc.Header(&md)); err != nil {
		t.Fatal(err)
	}
	if got := md.Get(apierrors.FlowSchemaUIDHeader); len(got) != 1 || got[0] != wantFS {
		t.Errorf("admin acting as alice: flowschema %v, want global-default's %s", got, wantFS)
	}
}

func TestPriorityAndFairnessFlood(t *testing.T) {
	g := &gate{entered: make(chan string, 8), release: make(chan struct{})}
	e := newAPFEnv(t, g)
	ctx := admin(t)
	fsc := flowcontrolv1.NewFlowSchemaServiceClient(e.conn)
	plc := flowcontrolv1.NewPriorityLevelConfigurationServiceClient(e.conn)
	// One seat (the server's 2 shared by shares, rounded up), no queue.
	if _, err := plc.CreatePriorityLevelConfiguration(ctx, &flowcontrolv1.CreatePriorityLevelConfigurationRequest{
		PriorityLevelConfiguration: &flowcontrolv1.PriorityLevelConfiguration{Metadata: &metav1.ObjectMeta{Name: "tiny"},
			Spec: &flowcontrolv1.PriorityLevelConfigurationSpec{Type: "Limited", Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: proto.Int32(1), LimitResponse: &flowcontrolv1.LimitResponse{Type: "Reject"}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := fsc.CreateFlowSchema(ctx, &flowcontrolv1.CreateFlowSchemaRequest{FlowSchema: &flowcontrolv1.FlowSchema{
		Metadata: &metav1.ObjectMeta{Name: "flooders"}, Spec: &flowcontrolv1.FlowSchemaSpec{
			MatchingPrecedence:         500,
			PriorityLevelConfiguration: &flowcontrolv1.PriorityLevelConfigurationReference{Name: "tiny"},
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: "ByUser"},
			Rules: []*flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []*flowcontrolv1.Subject{{Kind: "User", User: &flowcontrolv1.UserSubject{Name: "flooder"}}},
				ResourceRules: []*flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, ApiGroups: []string{"*"},
					Resources: []string{"*"}, Namespaces: []string{"*"}, ClusterScope: true}},
			}}}}}); err != nil {
		t.Fatal(err)
	}
	var fsUID string
	testutil.EventuallyWithin(t, 10*time.Second, "flooder classified into flooders", func() bool {
		r, err := fsc.GetFlowSchema(ctx, &flowcontrolv1.GetFlowSchemaRequest{Name: "flooders"})
		if err != nil {
			return false
		}
		fsUID = r.GetFlowSchema().GetMetadata().GetUid()
		got, _ := classifiedAs(t, e, "flooder")
		return got == fsUID
	})

	// The flooder's first create takes the level's one seat and is held.
	flooder := as(t, "flooder")
	var wg sync.WaitGroup
	wg.Add(1)
	var heldErr error
	go func() {
		defer wg.Done()
		_, heldErr = e.cms.CreateConfigMap(flooder, &corev1.CreateConfigMapRequest{Namespace: "default",
			ConfigMap: &corev1.ConfigMap{Metadata: om("default", "held-1")}})
	}()
	<-g.entered
	// Every other call of the flood is refused at once...
	for i := range 5 {
		var md metadata.MD
		_, err := e.cms.CreateConfigMap(flooder, &corev1.CreateConfigMapRequest{Namespace: "default",
			ConfigMap: &corev1.ConfigMap{Metadata: om("default", "flood-"+string(rune('a'+i)))}}, grpc.Header(&md))
		se := wantReason(t, err, apierrors.ReasonTooManyRequests)
		if se.Code != 429 || se.RetryAfterSeconds != 1 {
			t.Errorf("refusal %d: code %d, retry after %d; want 429 and 1", i, se.Code, se.RetryAfterSeconds)
		}
		if got := md.Get(apierrors.FlowSchemaUIDHeader); len(got) != 1 || got[0] != fsUID {
			t.Errorf("refusal %d: flowschema header %v, want %s", i, got, fsUID)
		}
	}
	// ...while another user's calls, in another flow and level, still run.
	for i := range 3 {
		if _, err := e.cms.CreateConfigMap(as(t, "alice"), &corev1.CreateConfigMapRequest{Namespace: "default",
			ConfigMap: &corev1.ConfigMap{Metadata: om("default", "alice-"+string(rune('a'+i)))}}); err != nil {
			t.Fatalf("alice's create %d: %v", i, err)
		}
	}
	close(g.release)
	wg.Wait()
	if heldErr != nil {
		t.Fatalf("the held create: %v", heldErr)
	}
	// The seat is free again.
	if _, err := e.cms.CreateConfigMap(flooder, &corev1.CreateConfigMapRequest{Namespace: "default",
		ConfigMap: &corev1.ConfigMap{Metadata: om("default", "after")}}); err != nil {
		t.Fatalf("create after the flood: %v", err)
	}
}

// TestPriorityAndFairnessMethods: the generated methods map to Kubernetes'
// verbs and resources, subresources included.
func TestPriorityAndFairnessMethods(t *testing.T) {
	e := newAPFEnv(t, nil)
	m := e.srv.apfEngine.methods
	for method, want := range map[string]apfMethod{
		"/kplane.core.v1.PodService/CreatePod":                      {verb: "create", resource: "pods", namespaced: true},
		"/kplane.core.v1.PodService/ListPods":                       {verb: "list", resource: "pods", namespaced: true},
		"/kplane.core.v1.PodService/UpdatePodStatus":                {verb: "update", resource: "pods/status", namespaced: true},
		"/kplane.core.v1.NodeService/GetNode":                       {verb: "get", resource: "nodes"},
		"/kplane.apps.v1.DeploymentService/UpdateDeploymentScale":   {verb: "update", group: "apps", resource: "deployments/scale", namespaced: true},
		"/kplane.flowcontrol.v1.FlowSchemaService/DeleteFlowSchema": {verb: "delete", group: "flowcontrol.apiserver.k8s.io", resource: "flowschemas"},
	} {
		if got := m[method]; got != want {
			t.Errorf("%s: %+v, want %+v", method, got, want)
		}
	}
}

// BenchmarkPriorityAndFairnessClassify: classifying a plain user's create
// walks every bootstrap schema before global-default, on precomputed
// rules only, without allocating.
func BenchmarkPriorityAndFairnessClassify(b *testing.B) {
	st := newAPFState()
	for _, pl := range append(convertPriorityLevels(bootstrap.SuggestedPriorityLevelConfigurations), mandatoryPriorityLevels()...) {
		st.apply(pl, false)
	}
	for _, fs := range append(convertFlowSchemas(bootstrap.SuggestedFlowSchemas), mandatoryFlowSchemas()...) {
		st.apply(fs, false)
	}
	eng := newAPFEngine(600, 0, nil)
	eng.rebuild(st)
	cfg := eng.cfg.Load()
	r := &apfRequest{user: request.User{Name: "alice", Groups: []string{request.AuthenticatedGroup}},
		verb: "create", resource: "configmaps", ns: "default"}
	if sc := cfg.classify(r); sc == nil || sc.name != "global-default" {
		b.Fatalf("classified into %v, want global-default", sc)
	}
	b.ReportAllocs()
	for b.Loop() {
		cfg.classify(r)
	}
}

// BenchmarkPriorityAndFairnessCreate: ConfigMap creates over gRPC with
// priority and fairness off (the in-flight limits) and on, as an admin
// (exempt) and as a plain user (global-default's queues); run with -count
// to interleave them.
func BenchmarkPriorityAndFairnessCreate(b *testing.B) {
	for _, c := range []struct {
		name string
		apf  bool
		user string
	}{{"off/admin", false, "admin"}, {"on/admin", true, "admin"}, {"off/user", false, "alice"}, {"on/user", true, "alice"}} {
		b.Run(c.name, func(b *testing.B) {
			e := newEnv(b, func(cfg *Config) {
				cfg.Authenticator = apfAuthn{}
				cfg.EnablePriorityAndFairness = c.apf
				cfg.MaxRequestsInflight, cfg.MaxMutatingRequestsInflight = DefaultMaxRequestsInflight, DefaultMaxMutatingRequestsInflight
			})
			if c.apf {
				for range 400 {
					if e.srv.apfEngine.cfg.Load() != nil {
						break
					}
					time.Sleep(25 * time.Millisecond)
				}
			}
			ctx := as(b, c.user)
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(10)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					name := "cm-" + strconv.FormatInt(n.Add(1), 10)
					if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default",
						ConfigMap: &corev1.ConfigMap{Metadata: om("default", name)}}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestListSeats: a list takes a seat per 100 objects it goes through, as
// kube-apiserver's list work estimator counts them, at most 10 and at most
// its level's concurrency.
func TestListSeats(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	for i := range 250 {
		if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default",
			ConfigMap: &corev1.ConfigMap{Metadata: om("default", fmt.Sprintf("cm-%03d", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	c := e.srv.cachers["configmaps"]
	for i := 0; ; i++ {
		c.mu.Lock()
		n := len(c.state)
		c.mu.Unlock()
		if n >= 250 {
			break
		}
		if i == 400 {
			t.Fatalf("the cache holds %d config maps, want 250", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	wide, narrow := &apfLevel{cl: 100}, &apfLevel{cl: 3}
	for _, tc := range []struct {
		name  string
		req   *corev1.ListConfigMapsRequest
		level *apfLevel
		want  uint64
	}{
		{"from the store: twice the objects", &corev1.ListConfigMapsRequest{}, wide, 5},
		{"from the watch cache", &corev1.ListConfigMapsRequest{ResourceVersion: "0"}, wide, 3},
		{"a page from the store", &corev1.ListConfigMapsRequest{Limit: 50}, wide, 1},
		{"a selector: the objects and the page", &corev1.ListConfigMapsRequest{LabelSelector: "a=b", Limit: 100}, wide, 4},
		{"at most the level's concurrency", &corev1.ListConfigMapsRequest{}, narrow, 3},
	} {
		if got := e.srv.listSeats("configmaps", tc.req, tc.level); got != tc.want {
			t.Errorf("%s: got %d seats, want %d", tc.name, got, tc.want)
		}
	}
}
