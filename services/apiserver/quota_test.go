// This file holds the API service's tests of ResourceQuota and LimitRange:
// their validation, the LimitRanger plugin's defaults and refusals, and
// quota admission: Kubernetes' refusals, usage charged with the write,
// scopes, and concurrent creates on two API-service replicas never
// overspending one quota.
package apiserver

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// createQuota creates a quota with spec hard and sets its status as the
// resource quota controller would (hard, and used from the given counts),
// then waits for the watch cache to hold it.
func createQuota(t *testing.T, e *env, ns, name string, hard, used map[string]string, scopes ...string) *corev1.ResourceQuota {
	t.Helper()
	rqs := corev1.NewResourceQuotaServiceClient(e.conn)
	cr, err := rqs.CreateResourceQuota(admin(t), &corev1.CreateResourceQuotaRequest{Namespace: ns,
		ResourceQuota: &corev1.ResourceQuota{Metadata: om(ns, name), Spec: &corev1.ResourceQuotaSpec{Hard: hard, Scopes: scopes}}})
	if err != nil {
		t.Fatal(err)
	}
	q := cr.GetResourceQuota()
	q.Status = &corev1.ResourceQuotaStatus{Hard: hard, Used: used}
	ur, err := rqs.UpdateResourceQuotaStatus(admin(t), &corev1.UpdateResourceQuotaStatusRequest{Namespace: ns, Name: name, ResourceQuota: q})
	if err != nil {
		t.Fatal(err)
	}
	waitCached(t, e, "resourcequotas", ns, name)
	return ur.GetResourceQuota()
}

func getQuota(t *testing.T, e *env, ns, name string) *corev1.ResourceQuota {
	t.Helper()
	gr, err := corev1.NewResourceQuotaServiceClient(e.conn).GetResourceQuota(admin(t), &corev1.GetResourceQuotaRequest{Namespace: ns, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return gr.GetResourceQuota()
}

func podWith(name string, req, lim map[string]string) *corev1.Pod {
	p := testPod("default", name)
	p.Spec.Containers[0].Resources = &corev1.ResourceRequirements{Requests: req, Limits: lim}
	return p
}

func TestResourceQuotaValidation(t *testing.T) {
	e := newEnv(t, nil)
	rqs := corev1.NewResourceQuotaServiceClient(e.conn)
	for _, tc := range []struct {
		name string
		spec *corev1.ResourceQuotaSpec
		want string
	}{
		{name: "unknown resource", spec: &corev1.ResourceQuotaSpec{Hard: map[string]string{"gpus": "1"}},
			want: `ResourceQuota "x" is invalid: [spec.hard[gpus]: Invalid value: gpus: must be a standard resource type or fully qualified, spec.hard[gpus]: Invalid value: gpus: must be a standard resource for quota]`},
		{name: "negative", spec: &corev1.ResourceQuotaSpec{Hard: map[string]string{"cpu": "-1"}},
			want: `ResourceQuota "x" is invalid: spec.hard[cpu]: Invalid value: "-1": must be greater than or equal to 0`},
		{name: "conflicting scopes", spec: &corev1.ResourceQuotaSpec{Hard: map[string]string{"pods": "1"}, Scopes: []string{"BestEffort", "NotBestEffort"}},
			want: `ResourceQuota "x" is invalid: spec.scopes: Invalid value: []core.ResourceQuotaScope{"BestEffort", "NotBestEffort"}: conflicting scopes`},
		{name: "scope and resource", spec: &corev1.ResourceQuotaSpec{Hard: map[string]string{"cpu": "1"}, Scopes: []string{"BestEffort"}},
			want: `ResourceQuota "x" is invalid: spec.scopes: Invalid value: []core.ResourceQuotaScope{"BestEffort"}: unsupported scope applied to resource`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rqs.CreateResourceQuota(admin(t), &corev1.CreateResourceQuotaRequest{Namespace: "default",
				ResourceQuota: &corev1.ResourceQuota{Metadata: om("default", "x"), Spec: tc.spec}})
			if se := wantReason(t, err, apierrors.ReasonInvalid); se.Message != tc.want {
				t.Errorf("got %q,\nwant %q", se.Message, tc.want)
			}
		})
	}
	// A status sent on create is dropped: the controller writes it.
	cr, err := rqs.CreateResourceQuota(admin(t), &corev1.CreateResourceQuotaRequest{Namespace: "default",
		ResourceQuota: &corev1.ResourceQuota{Metadata: om("default", "q"), Spec: &corev1.ResourceQuotaSpec{Hard: map[string]string{"pods": "2"}},
			Status: &corev1.ResourceQuotaStatus{Used: map[string]string{"pods": "0"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := cr.GetResourceQuota().GetStatus(); len(st.GetUsed()) != 0 || len(st.GetHard()) != 0 {
		t.Errorf("created with status %v, want none", st)
	}
	// Scopes are immutable.
	q := cr.GetResourceQuota()
	q.Spec.Scopes = []string{"BestEffort"}
	_, err = rqs.UpdateResourceQuota(admin(t), &corev1.UpdateResourceQuotaRequest{Namespace: "default", Name: "q", ResourceQuota: q})
	if se := wantReason(t, err, apierrors.ReasonInvalid); se.Message != `ResourceQuota "q" is invalid: spec.scopes: Invalid value: []core.ResourceQuotaScope{"BestEffort"}: field is immutable` {
		t.Errorf("scopes changed: got %q", se.Message)
	}
}

func TestLimitRangeValidation(t *testing.T) {
	e := newEnv(t, nil)
	lrs := corev1.NewLimitRangeServiceClient(e.conn)
	for _, tc := range []struct {
		name string
		item *corev1.LimitRangeItem
		want string
	}{
		{name: "min over max", item: &corev1.LimitRangeItem{Type: "Container", Min: map[string]string{"cpu": "2"}, Max: map[string]string{"cpu": "1"}},
			// The defaults taken from max and min (default 1, defaultRequest
			// 1) are checked too, as on Kubernetes.
			want: `LimitRange "x" is invalid: [spec.limits[0].min[cpu]: Invalid value: resource.Quantity{i:resource.int64Amount{value:2, scale:0}, d:resource.infDecAmount{Dec:(*inf.Dec)(nil)}, s:"2", Format:"DecimalSI"}: min value 2 is greater than max value 1, ` +
				`spec.limits[0].defaultRequest[cpu]: Invalid value: resource.Quantity{i:resource.int64Amount{value:1, scale:0}, d:resource.infDecAmount{Dec:(*inf.Dec)(nil)}, s:"1", Format:"DecimalSI"}: min value 2 is greater than default request value 1, ` +
				`spec.limits[0].default[cpu]: Invalid value: resource.Quantity{i:resource.int64Amount{value:2, scale:0}, d:resource.infDecAmount{Dec:(*inf.Dec)(nil)}, s:"2", Format:"DecimalSI"}: min value 2 is greater than default value 1]`},
		{name: "pod default", item: &corev1.LimitRangeItem{Type: "Pod", Default: map[string]string{"cpu": "1"}},
			want: `LimitRange "x" is invalid: spec.limits[0].default: Forbidden: may not be specified when ` + "`type`" + ` is 'Pod'`},
		{name: "bad type", item: &corev1.LimitRangeItem{Type: "Node"},
			want: `LimitRange "x" is invalid: spec.limits[0].type: Invalid value: "Node": must be a standard limit type or fully qualified`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lrs.CreateLimitRange(admin(t), &corev1.CreateLimitRangeRequest{Namespace: "default",
				LimitRange: &corev1.LimitRange{Metadata: om("default", "x"), Spec: &corev1.LimitRangeSpec{Limits: []*corev1.LimitRangeItem{tc.item}}}})
			if se := wantReason(t, err, apierrors.ReasonInvalid); se.Message != tc.want {
				t.Errorf("got %q,\nwant %q", se.Message, tc.want)
			}
		})
	}
}

func TestLimitRanger(t *testing.T) {
	e := newEnv(t, nil)
	lrs := corev1.NewLimitRangeServiceClient(e.conn)
	if _, err := lrs.CreateLimitRange(admin(t), &corev1.CreateLimitRangeRequest{Namespace: "default", LimitRange: &corev1.LimitRange{
		Metadata: om("default", "limits"), Spec: &corev1.LimitRangeSpec{Limits: []*corev1.LimitRangeItem{{
			Type: "Container", Default: map[string]string{"cpu": "500m"}, DefaultRequest: map[string]string{"cpu": "100m"},
			Max: map[string]string{"cpu": "1"}, Min: map[string]string{"cpu": "50m"}, MaxLimitRequestRatio: map[string]string{"cpu": "10"},
		}}}}}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, e, "limitranges", "default", "limits")
	// Defaults fill what a container leaves unset, noted in the annotation.
	p := mustCreatePod(t, e, podWith("defaults", nil, map[string]string{"memory": "128Mi"}))
	res := p.GetSpec().GetContainers()[0].GetResources()
	if res.GetRequests()["cpu"] != "100m" || res.GetLimits()["cpu"] != "500m" || res.GetLimits()["memory"] != "128Mi" {
		t.Errorf("got requests %v limits %v, want cpu 100m/500m and the pod's own memory limit", res.GetRequests(), res.GetLimits())
	}
	if got, want := p.GetMetadata().GetAnnotations()["kubernetes.io/limit-ranger"], "LimitRanger plugin set: cpu request for container c; cpu limit for container c"; got != want {
		t.Errorf("annotation: got %q, want %q", got, want)
	}
	if p.GetStatus().GetQosClass() != "Burstable" {
		t.Errorf("QoS class: got %q, want Burstable (from the defaults)", p.GetStatus().GetQosClass())
	}
	for _, tc := range []struct {
		name     string
		req, lim map[string]string
		want     string
	}{
		{name: "over max", lim: map[string]string{"cpu": "2"}, req: map[string]string{"cpu": "1"},
			want: `pods "over-max" is forbidden: maximum cpu usage per Container is 1, but limit is 2`},
		{name: "under min", req: map[string]string{"cpu": "10m"}, lim: map[string]string{"cpu": "20m"},
			want: `pods "under-min" is forbidden: minimum cpu usage per Container is 50m, but request is 10m`},
		{name: "ratio", req: map[string]string{"cpu": "50m"}, lim: map[string]string{"cpu": "1"},
			want: `pods "ratio" is forbidden: cpu max limit to request ratio per Container is 10, but provided ratio is 20.000000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := map[string]string{"over max": "over-max", "under min": "under-min", "ratio": "ratio"}[tc.name]
			_, err := e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default", Pod: podWith(name, tc.req, tc.lim)})
			if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != tc.want {
				t.Errorf("got %q,\nwant %q", se.Message, tc.want)
			}
		})
	}
}

func TestQuotaAdmission(t *testing.T) {
	e := newEnv(t, nil)
	createQuota(t, e, "default", "compute", map[string]string{"pods": "2", "requests.cpu": "1", "limits.memory": "1Gi"},
		map[string]string{"pods": "0", "requests.cpu": "0", "limits.memory": "0"})
	// A pod that leaves a tracked resource unset is refused.
	_, err := e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default", Pod: testPod("default", "bare")})
	if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != `pods "bare" is forbidden: failed quota: compute: must specify limits.memory for: c; requests.cpu for: c` {
		t.Errorf("unset resources: got %q", se.Message)
	}
	// Usage is charged with the pod.
	mustCreatePod(t, e, podWith("a", map[string]string{"cpu": "600m"}, map[string]string{"memory": "512Mi"}))
	q := getQuota(t, e, "default", "compute")
	if u := q.GetStatus().GetUsed(); u["pods"] != "1" || u["requests.cpu"] != "600m" || u["limits.memory"] != "512Mi" {
		t.Errorf("used after one pod: got %v", u)
	}
	// Over the quota: Kubernetes' message.
	_, err = e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default",
		Pod: podWith("b", map[string]string{"cpu": "500m"}, map[string]string{"memory": "512Mi"})})
	if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != `pods "b" is forbidden: exceeded quota: compute, requested: requests.cpu=500m, used: requests.cpu=600m, limited: requests.cpu=1` {
		t.Errorf("over quota: got %q", se.Message)
	}
	if se := apierrors.FromError(err); se.Code != 403 {
		t.Errorf("over quota: code %d, want 403", se.Code)
	}
	// A dry run is checked and charges nothing.
	_, err = e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default", DryRun: []string{"All"},
		Pod: podWith("dry", map[string]string{"cpu": "100m"}, map[string]string{"memory": "1Mi"})})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if u := getQuota(t, e, "default", "compute").GetStatus().GetUsed(); u["pods"] != "1" {
		t.Errorf("used after a dry run: got %v, want pods 1", u)
	}
	// Another namespace is not charged.
	if _, err := e.ns.CreateNamespace(admin(t), &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{Metadata: om("", "other")}}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, e, "namespaces", "", "other")
	mustCreatePod(t, e, testPod("other", "free"))
}

func TestQuotaObjectCountsAndScopes(t *testing.T) {
	e := newEnv(t, nil)
	createQuota(t, e, "default", "counts", map[string]string{"configmaps": "1", "count/secrets": "1", "services.nodeports": "1"},
		map[string]string{"configmaps": "0", "count/secrets": "0", "services.nodeports": "0"})
	createQuota(t, e, "default", "besteffort", map[string]string{"pods": "1"}, map[string]string{"pods": "0"}, "BestEffort")
	if _, err := e.cms.CreateConfigMap(admin(t), &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: &corev1.ConfigMap{Metadata: om("default", "one")}}); err != nil {
		t.Fatal(err)
	}
	_, err := e.cms.CreateConfigMap(admin(t), &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: &corev1.ConfigMap{Metadata: om("default", "two")}})
	if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != `configmaps "two" is forbidden: exceeded quota: counts, requested: configmaps=1, used: configmaps=1, limited: configmaps=1` {
		t.Errorf("configmaps: got %q", se.Message)
	}
	svcs := corev1.NewServiceServiceClient(e.conn)
	np := func(name string, ports int) *corev1.Service {
		s := &corev1.Service{Metadata: om("default", name), Spec: &corev1.ServiceSpec{Type: "NodePort"}}
		for i := range ports {
			s.Spec.Ports = append(s.Spec.Ports, &corev1.ServicePort{Name: fmt.Sprint("p", i), Port: int32(80 + i)})
		}
		return s
	}
	_, err = svcs.CreateService(admin(t), &corev1.CreateServiceRequest{Namespace: "default", Service: np("two-ports", 2)})
	if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != `services "two-ports" is forbidden: exceeded quota: counts, requested: services.nodeports=2, used: services.nodeports=0, limited: services.nodeports=1` {
		t.Errorf("node ports: got %q", se.Message)
	}
	if _, err := svcs.CreateService(admin(t), &corev1.CreateServiceRequest{Namespace: "default", Service: np("one-port", 1)}); err != nil {
		t.Fatal(err)
	}
	if u := getQuota(t, e, "default", "counts").GetStatus().GetUsed(); u["services.nodeports"] != "1" || u["configmaps"] != "1" {
		t.Errorf("used: got %v", u)
	}
	// The BestEffort quota counts pods without requests only.
	mustCreatePod(t, e, testPod("default", "be-1"))
	mustCreatePod(t, e, podWith("burstable", map[string]string{"cpu": "1"}, nil))
	_, err = e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default", Pod: testPod("default", "be-2")})
	if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != `pods "be-2" is forbidden: exceeded quota: besteffort, requested: pods=1, used: pods=1, limited: pods=1` {
		t.Errorf("BestEffort scope: got %q", se.Message)
	}
}

// TestQuotaConcurrentReplicas creates pods at once through two API-service
// replicas on one store against one quota: exactly the quota's worth are
// admitted, and status.used counts them.
func TestQuotaConcurrentReplicas(t *testing.T) {
	a := newEnv(t, nil)
	b := newEnvOn(t, a.eps, nil)
	const hard, tries = 5, 40
	createQuota(t, a, "default", "pods", map[string]string{"pods": fmt.Sprint(hard)}, map[string]string{"pods": "0"})
	waitCached(t, b, "resourcequotas", "default", "pods")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int
		other    []error
	)
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := a
			if i%2 == 1 {
				e = b
			}
			_, err := e.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default", Pod: testPod("default", fmt.Sprint("p-", i))})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				admitted++
			case !apierrors.IsForbidden(err):
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("errors other than the quota's refusal: %v", other)
	}
	if admitted != hard {
		t.Errorf("admitted %d pods, want %d", admitted, hard)
	}
	list, err := a.pods.ListPods(admin(t), &corev1.ListPodsRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetList().GetItems()); n != hard {
		t.Errorf("stored %d pods, want %d", n, hard)
	}
	if u := getQuota(t, a, "default", "pods").GetStatus().GetUsed()["pods"]; u != fmt.Sprint(hard) {
		t.Errorf("used pods %q, want %d", u, hard)
	}
}

// TestQuotaFromLaggingCache writes through a replica whose watch cache has
// not seen the namespace's quota (its cache is set back to before the
// quota was created): the write is checked against the quota all the same,
// as kube-apiserver's live lookup does, and nothing is written.
func TestQuotaFromLaggingCache(t *testing.T) {
	a := newEnv(t, nil)
	b := newEnvOn(t, a.eps, nil)
	rq := createQuota(t, a, "default", "pods", map[string]string{"pods": "1"}, map[string]string{"pods": "1"})
	waitCached(t, b, "resourcequotas", "default", "pods")
	rev, err := parseRV(rq.GetMetadata().GetResourceVersion())
	if err != nil {
		t.Fatal(err)
	}
	ch := b.srv.cachers["resourcequotas"]
	ch.mu.Lock()
	delete(ch.state, b.srv.store.key(b.srv.resources["resourcequotas"], "default", "pods"))
	ch.rev = rev - 1
	ch.mu.Unlock()

	_, err = b.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "default", Pod: testPod("default", "over")})
	if se := wantReason(t, err, apierrors.ReasonForbidden); se.Message != `pods "over" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1` {
		t.Errorf("got %q", se.Message)
	}
	if _, err := a.pods.GetPod(admin(t), &corev1.GetPodRequest{Namespace: "default", Name: "over"}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused pod: got %v, want NotFound", err)
	}
	// A namespace without quotas is not slowed by the check: a pod there
	// is admitted through the same replica.
	if _, err := b.ns.CreateNamespace(admin(t), &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "free"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pods.CreatePod(admin(t), &corev1.CreatePodRequest{Namespace: "free", Pod: testPod("free", "p")}); err != nil {
		t.Fatal(err)
	}
}

// TestLimitRangesLiveLookup: with nothing in the watch cache for a
// namespace, the LimitRanger's lookup reads the store, as Kubernetes'
// falls back to a live list, and uses that read for its TTL.
func TestLimitRangesLiveLookup(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	lrs := corev1.NewLimitRangeServiceClient(e.conn)
	// The service's own reads run on a context without a caller's
	// credentials (a server-side one).
	own := context.Background()
	got, err := e.srv.liveLimitRanges(own, "default")
	if err != nil || len(got) != 0 {
		t.Fatalf("live lookup of an empty namespace: %v, %v", got, err)
	}
	if _, err := lrs.CreateLimitRange(ctx, &corev1.CreateLimitRangeRequest{Namespace: "kube-system", LimitRange: &corev1.LimitRange{
		Metadata: om("kube-system", "limits"), Spec: &corev1.LimitRangeSpec{Limits: []*corev1.LimitRangeItem{{
			Type: "Container", Default: map[string]string{"cpu": "500m"}}}}}}); err != nil {
		t.Fatal(err)
	}
	// Read from the store whether or not the cache has it yet.
	if got, err := e.srv.liveLimitRanges(own, "kube-system"); err != nil || len(got) != 1 || got[0].GetMetadata().GetName() != "limits" {
		t.Errorf("live lookup after the create: %v, %v", got, err)
	}
	// The empty read of default is used for its TTL.
	if _, err := lrs.CreateLimitRange(ctx, &corev1.CreateLimitRangeRequest{Namespace: "default", LimitRange: &corev1.LimitRange{
		Metadata: om("default", "limits"), Spec: &corev1.LimitRangeSpec{Limits: []*corev1.LimitRangeItem{{
			Type: "Container", Default: map[string]string{"cpu": "500m"}}}}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.srv.liveLimitRanges(own, "default"); err != nil || len(got) != 0 {
		t.Errorf("a second live lookup within the TTL: %v, %v; want the first read's answer", got, err)
	}
}
