// This file holds the tests of the watch-based ConfigMap and Secret source
// against a real API service: one watch per object shared by the pods
// that use it, stopped with the last of them; immutable objects; reads
// that wait for the watch's first list; idle watches; and the API calls a
// node with many pods makes, which do not grow with its syncs.

package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// countingConn counts the calls made through it by method name, and the
// watch streams open; a list may be held at a gate until the test lets it
// through.
type countingConn struct {
	grpc.ClientConnInterface

	mu    sync.Mutex
	calls map[string]int // by the method's short name, e.g. "GetConfigMap"
	open  map[string]int // watch streams not ended, by method
	// refused counts the calls that were Forbidden: a node's
	// first list of an object may come before the Node authorizer has
	// seen the pod naming it bound to the node, and is retried.
	refused map[string]int
	gate    chan struct{} // non-nil: lists wait for it to be closed
	held    chan struct{} // receives when a list reaches the gate
}

func newCountingConn(conn grpc.ClientConnInterface) *countingConn {
	return &countingConn{ClientConnInterface: conn, calls: map[string]int{}, open: map[string]int{}, refused: map[string]int{}}
}

func shortMethod(m string) string { return m[strings.LastIndexByte(m, '/')+1:] }

func (c *countingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.calls[shortMethod(method)]++
	gate, held := c.gate, c.held
	c.mu.Unlock()
	if gate != nil && strings.HasPrefix(shortMethod(method), "List") {
		held <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	if apierrors.IsForbidden(apierrors.FromError(err)) {
		c.mu.Lock()
		c.refused[shortMethod(method)]++
		c.mu.Unlock()
	}
	return err
}

func (c *countingConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := c.ClientConnInterface.NewStream(ctx, desc, method, opts...)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[shortMethod(method)]++
	if err != nil {
		return nil, err
	}
	c.open[shortMethod(method)]++
	return &countedStream{ClientStream: s, c: c, method: shortMethod(method)}, nil
}

// allowed is the number of calls of the methods named that were not
// Forbidden.
func (c *countingConn) allowed(methods ...string) int {
	n := c.count(methods...)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range methods {
		n -= c.refused[m]
	}
	return n
}

// count is the number of calls of the methods named.
func (c *countingConn) count(methods ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range methods {
		n += c.calls[m]
	}
	return n
}

// openWatches is the number of ConfigMap and Secret watch streams open.
func (c *countingConn) openWatches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open["WatchConfigMaps"] + c.open["WatchSecrets"]
}

// countedStream notes the end of its watch stream once.
type countedStream struct {
	grpc.ClientStream
	c      *countingConn
	method string
	once   sync.Once
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.once.Do(func() {
			s.c.mu.Lock()
			s.c.open[s.method]--
			s.c.mu.Unlock()
		})
	}
	return err
}

// watchFixture is a watchedObjects over a counting admin connection to a
// real API service, running until the test ends.
type watchFixture struct {
	c    *cluster
	conn *countingConn
	w    *watchedObjects
	cms  *client.Client[*corev1.ConfigMap]
}

func startWatchFixture(t *testing.T, gated bool) *watchFixture {
	t.Helper()
	c := startCluster(t)
	conn := newCountingConn(c.admin)
	if gated {
		conn.gate, conn.held = make(chan struct{}), make(chan struct{}, 16)
	}
	w := newWatchedObjects(client.Must[*corev1.ConfigMap](conn), client.Must[*corev1.Secret](conn), time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done // run returns once every watch's goroutine has
	})
	return &watchFixture{c: c, conn: conn, w: w, cms: client.Must[*corev1.ConfigMap](c.admin)}
}

func (f *watchFixture) createCM(t *testing.T, name string, immutable bool) {
	t.Helper()
	cm := &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string]string{"k": name}}
	if immutable {
		cm.Immutable = &immutable
	}
	if _, err := f.cms.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

// podUsing is a pod (uid given) whose volumes use the configmaps named
// and whose container's env uses the secrets named.
func podUsing(uid string, configMaps []string, secrets []string) *corev1.Pod {
	p := simPod("p-"+uid, nil, func(s *corev1.PodSpec) {
		for _, cm := range configMaps {
			s.Volumes = append(s.Volumes, &corev1.Volume{Name: cm, VolumeSource: &corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: &corev1.LocalObjectReference{Name: cm}}}})
		}
		for _, sec := range secrets {
			s.Containers[0].EnvFrom = append(s.Containers[0].EnvFrom, &corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{
				LocalObjectReference: &corev1.LocalObjectReference{Name: sec}}})
		}
	})
	p.Metadata.Uid = uid
	return p
}

// TestWatchedObjectsRefCounting: the pods that use an object share one
// watch of it (one list, one watch stream), started by the first pod
// registered and stopped with the last one unregistered; reads come from
// the watch and follow changes; registering a pod again costs nothing.
func TestWatchedObjectsRefCounting(t *testing.T) {
	f := startWatchFixture(t, false)
	ctx := context.Background()
	f.createCM(t, "shared", false)
	f.createCM(t, "own", false)
	a := podUsing("a", []string{"shared", "own"}, nil)
	b := podUsing("b", []string{"shared"}, []string{"missing-secret"})
	f.w.register(a)
	f.w.register(b)
	f.w.register(a) // every sync registers: idempotent
	for range 3 {
		for _, name := range []string{"shared", "own"} {
			cm, err := f.w.ConfigMap(ctx, "default", name)
			if err != nil || cm.GetData()["k"] != name {
				t.Fatalf("read %s: got %v, %v", name, cm, err)
			}
		}
	}
	if _, err := f.w.Secret(ctx, "default", "missing-secret"); !apierrors.IsNotFound(err) || err.Error() != `secret "missing-secret" not found` {
		t.Errorf("a missing secret: got %v, want NotFound with the kubelet's wording", err)
	}
	if _, err := f.w.ConfigMap(ctx, "default", "nobody-uses-it"); err == nil || apierrors.IsNotFound(err) {
		t.Errorf("an unregistered object: got %v, want a not-registered error", err)
	}
	if got := f.conn.count("ListConfigMaps", "ListSecrets"); got != 3 {
		t.Errorf("lists: got %d, want 3 (one per object, whatever the pods and reads)", got)
	}
	if got := f.conn.count("GetConfigMap", "GetSecret"); got != 0 {
		t.Errorf("gets: got %d, want 0", got)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "three watch streams open", func() bool { return f.conn.openWatches() == 3 })

	// A change reaches the reads through the watch.
	cm, err := f.cms.Get(ctx, "default", "shared")
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = "changed"
	if _, err := f.cms.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the change read", func() bool {
		cm, err := f.w.ConfigMap(ctx, "default", "shared")
		return err == nil && cm.GetData()["k"] == "changed"
	})

	// a leaves: "own" is no longer watched, "shared" still is (b).
	f.w.unregister("a")
	if got := f.w.watching(); got != 2 {
		t.Errorf("watches after a left: got %d, want 2", got)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "own's watch stream ends", func() bool { return f.conn.openWatches() == 2 })
	if _, err := f.w.ConfigMap(ctx, "default", "own"); err == nil {
		t.Error("own is still readable after the last pod using it left")
	}
	if _, err := f.w.ConfigMap(ctx, "default", "shared"); err != nil {
		t.Errorf("shared, still used by b: %v", err)
	}
	f.w.unregister("b")
	f.w.unregister("b") // idempotent
	if got := f.w.watching(); got != 0 {
		t.Errorf("watches after every pod left: got %d, want 0", got)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "every watch stream ends", func() bool { return f.conn.openWatches() == 0 })
	if got := f.conn.count("ListConfigMaps", "ListSecrets"); got != 3 {
		t.Errorf("lists at the end: got %d, want still 3", got)
	}
}

// TestWatchedObjectsImmutable: once an object is read and seen immutable,
// its watch stops and the object is still served, with no API call.
func TestWatchedObjectsImmutable(t *testing.T) {
	f := startWatchFixture(t, false)
	ctx := context.Background()
	f.createCM(t, "frozen", true)
	f.w.register(podUsing("a", []string{"frozen"}, nil))
	if cm, err := f.w.ConfigMap(ctx, "default", "frozen"); err != nil || cm.GetData()["k"] != "frozen" {
		t.Fatalf("first read: got %v, %v", cm, err)
	}
	if got := f.w.watching(); got != 0 {
		t.Errorf("watches after reading an immutable object: got %d, want 0", got)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the watch stream ends", func() bool { return f.conn.openWatches() == 0 })
	before := f.conn.count("ListConfigMaps", "WatchConfigMaps", "GetConfigMap")
	f.w.register(podUsing("b", []string{"frozen"}, nil))
	f.w.stopIdle(time.Now().Add(time.Hour)) // an immutable object is not restarted as idle
	for range 3 {
		if cm, err := f.w.ConfigMap(ctx, "default", "frozen"); err != nil || cm.GetData()["k"] != "frozen" {
			t.Fatalf("later read: got %v, %v", cm, err)
		}
	}
	if after := f.conn.count("ListConfigMaps", "WatchConfigMaps", "GetConfigMap"); after != before {
		t.Errorf("API calls for the immutable object after it was seen: got %d more, want none", after-before)
	}
}

// TestWatchedObjectsReadWaitsForSync: a read right after the pod is
// registered waits for the watch's first list rather than answering
// NotFound; a list that does not come in syncTimeout is the kubelet's
// error.
func TestWatchedObjectsReadWaitsForSync(t *testing.T) {
	f := startWatchFixture(t, true)
	ctx := context.Background()
	f.createCM(t, "slow", false)
	f.w.register(podUsing("a", []string{"slow"}, nil))
	<-f.conn.held // the watch's list is at the gate
	f.w.syncTimeout = time.Hour
	type result struct {
		cm  *corev1.ConfigMap
		err error
	}
	got := make(chan result, 1)
	go func() {
		cm, err := f.w.ConfigMap(ctx, "default", "slow")
		got <- result{cm, err}
	}()
	close(f.conn.gate)
	if r := <-got; r.err != nil || r.cm.GetData()["k"] != "slow" {
		t.Errorf("read before the first list: got %v, %v; want the object", r.cm, r.err)
	}

	// A list that never comes: the read gives up after syncTimeout.
	f.conn.mu.Lock()
	f.conn.gate = make(chan struct{})
	f.conn.mu.Unlock()
	defer close(f.conn.gate)
	f.w.syncTimeout = 50 * time.Millisecond
	f.createCM(t, "stuck", false)
	f.w.register(podUsing("b", []string{"stuck"}, nil))
	<-f.conn.held
	_, err := f.w.ConfigMap(ctx, "default", "stuck")
	if want := "failed to sync configmap cache: timed out waiting for the condition"; err == nil || err.Error() != want {
		t.Errorf("read of a watch that never lists: got %v, want %q", err, want)
	}
}

// TestWatchedObjectsIdle: a watch nothing read for maxIdle is stopped; the
// next read starts it again (a new list) and gets the current object.
func TestWatchedObjectsIdle(t *testing.T) {
	f := startWatchFixture(t, false)
	ctx := context.Background()
	f.createCM(t, "env-only", false)
	f.w.register(podUsing("a", []string{"env-only"}, nil))
	if _, err := f.w.ConfigMap(ctx, "default", "env-only"); err != nil {
		t.Fatal(err)
	}
	f.w.stopIdle(time.Now()) // just read: kept
	if got := f.w.watching(); got != 1 {
		t.Fatalf("watches after a check right after a read: got %d, want 1", got)
	}
	f.w.stopIdle(time.Now().Add(f.w.maxIdle + time.Second))
	if got := f.w.watching(); got != 0 {
		t.Fatalf("watches after maxIdle without reads: got %d, want 0", got)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the idle watch stream ends", func() bool { return f.conn.openWatches() == 0 })
	cm, err := f.cms.Get(ctx, "default", "env-only")
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = "while idle"
	if _, err := f.cms.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if cm, err := f.w.ConfigMap(ctx, "default", "env-only"); err != nil || cm.GetData()["k"] != "while idle" {
		t.Errorf("read after the idle stop: got %v, %v; want the current object", cm, err)
	}
	if got := f.w.watching(); got != 1 {
		t.Errorf("watches after the read: got %d, want 1", got)
	}
	if got := f.conn.count("ListConfigMaps"); got != 2 {
		t.Errorf("lists: got %d, want 2 (the first, and the restart)", got)
	}
}

func TestPodObjectRefs(t *testing.T) {
	p := simPod("p", nil, func(s *corev1.PodSpec) {
		s.Volumes = []*corev1.Volume{
			{Name: "a", VolumeSource: &corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "vol-cm"}}}},
			{Name: "b", VolumeSource: &corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "vol-secret"}}},
			{Name: "c", VolumeSource: &corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: &corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: &corev1.LocalObjectReference{Name: "proj-secret"}}},
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
			}}}},
			{Name: "d", VolumeSource: &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}
		s.InitContainers = []*corev1.Container{{Name: "init", EnvFrom: []*corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "init-cm"}}}}}}
		s.Containers[0].Env = []*corev1.EnvVar{
			{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: &corev1.LocalObjectReference{Name: "env-secret"}, Key: "k"}}},
			{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: &corev1.LocalObjectReference{Name: "vol-cm"}, Key: "k"}}},
			{Name: "C", Value: "plain"},
		}
	})
	got := map[string]bool{}
	for k := range podObjectRefs(p) {
		got[fmt.Sprintf("%s %s/%s", k.resource, k.namespace, k.name)] = true
	}
	want := map[string]bool{
		"configmaps default/vol-cm": true, "configmaps default/kube-root-ca.crt": true, "configmaps default/init-cm": true,
		"secrets default/vol-secret": true, "secrets default/proj-secret": true, "secrets default/env-secret": true,
	}
	if !boolMapsEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestWatchStrategyAPICalls: a node running pods that share a ConfigMap
// and each have their own ConfigMap (a volume and an environment), Secret
// (a volume) and ServiceAccount token (a projected volume) makes one list
// and one watch per object and no get, and one TokenRequest per pod;
// changes to a ConfigMap reach every pod's files at the next refresh, and
// those refreshes add no API call: no get, no TokenRequest, no status
// write.
func TestWatchStrategyAPICalls(t *testing.T) {
	const pods = 6
	c := startCluster(t)
	ctx := context.Background()
	root := filepath.Join(shortDir(t), "root")
	var conn *countingConn
	node := startSimNode(t, c, "n1", func(cfg *Config) {
		cfg.RootDir = root
		conn = newCountingConn(cfg.Conn)
		cfg.Conn = conn
	})
	cms := client.Must[*corev1.ConfigMap](c.admin)
	secrets := client.Must[*corev1.Secret](c.admin)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: "shared", Namespace: "default"},
		Data: map[string]string{"v": "0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Must[*corev1.ServiceAccount](c.admin).Create(ctx, &corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Name: "default", Namespace: "default"}}); err != nil {
		t.Fatal(err)
	}
	exp := int64(3607)
	var uids []string
	for i := range pods {
		name := fmt.Sprintf("app-%d", i)
		if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"},
			Data: map[string]string{"v": name}}); err != nil {
			t.Fatal(err)
		}
		if _, err := secrets.Create(ctx, &corev1.Secret{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"},
			Data: map[string][]byte{"s": []byte(name)}}); err != nil {
			t.Fatal(err)
		}
		p := simPod(name, nil, func(s *corev1.PodSpec) {
			s.Volumes = []*corev1.Volume{
				{Name: "shared", VolumeSource: &corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "shared"}}}},
				{Name: "own", VolumeSource: &corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: &corev1.LocalObjectReference{Name: name}}}},
				{Name: "secret", VolumeSource: &corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}},
				// As the ServiceAccount admission's kube-api-access volume.
				{Name: "api-access", VolumeSource: &corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: &corev1.LocalObjectReference{Name: "shared"}}},
				}}}},
			}
			s.ServiceAccountName = "default"
			s.Containers[0].EnvFrom = []*corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: &corev1.LocalObjectReference{Name: name}}}}
		})
		uids = append(uids, c.runPod(t, p, "n1").GetMetadata().GetUid())
	}
	for i := range pods {
		c.waitPod(t, "default", fmt.Sprintf("app-%d", i), "Running", phaseIs(PhaseRunning))
	}
	objects := 1 + 2*pods // shared, and each pod's ConfigMap and Secret
	calls := func() (gets, lists, watches int) {
		return conn.count("GetConfigMap", "GetSecret"), conn.allowed("ListConfigMaps", "ListSecrets"), conn.count("WatchConfigMaps", "WatchSecrets")
	}
	g0, l0, w0 := calls()
	if g0 != 0 || l0 != objects || w0 != objects {
		t.Errorf("calls once the pods run: got %d gets, %d lists, %d watches; want 0, %d, %d", g0, l0, w0, objects, objects)
	}
	// Two changes, each seen in every pod's files: each is at least one
	// refresh of every pod's volumes. After the first, the status writes
	// and TokenRequests are counted: the second adds none of them either.
	var statusWrites, tokens int
	for _, v := range []string{"1", "2"} {
		if v == "2" {
			statusWrites, tokens = conn.count("UpdatePodStatus"), conn.count("CreateServiceAccountToken")
		}
		cm, err := cms.Get(ctx, "default", "shared")
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["v"] = v
		if _, err := cms.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		for _, uid := range uids {
			file := filepath.Join(root, "pods", uid, "volumes", pluginConfigMap, "shared", "v")
			for i := 0; ; i++ {
				b, err := os.ReadFile(file)
				if err == nil && string(b) == v {
					break
				}
				if i == 600 {
					t.Fatalf("%s: got %q, %v; want %q within 30s", file, b, err, v)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	if g, l, w := calls(); g != g0 || l != l0 || w != w0 {
		t.Errorf("calls after the refreshes: got %d gets, %d lists, %d watches; want %d, %d, %d (no growth with syncs)", g, l, w, g0, l0, w0)
	}
	if got := conn.count("CreateServiceAccountToken"); got != pods || got != tokens {
		t.Errorf("TokenRequests: got %d, want %d (one per pod, reused until 80 %% of its lifetime)", got, pods)
	}
	if got := conn.count("UpdatePodStatus"); got != statusWrites {
		t.Errorf("pod status writes during refreshes of running pods: got %d more, want none", got-statusWrites)
	}
	// Deleting a pod stops the watches of what only it used.
	zero := int64(0)
	if err := c.pods.Delete(ctx, "default", "app-0", client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the deleted pod's own ConfigMap and Secret no longer watched", func() bool {
		return node.agent.watches.watching() == objects-2 && conn.openWatches() == objects-2
	})
}
