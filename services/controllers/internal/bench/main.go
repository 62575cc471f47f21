// Command bench measures the controllers end to end, for
// scripts/bench-controllers.sh: with -setup it creates the namespaces; then
// it waits for -nodes Ready nodes, creates a Deployment with 0 replicas,
// scales it to -replicas through the scale subresource and reports, from
// the scale-up, how long until all pods exist, are bound, and are Running
// (as pods/s for each stage), watching pods through an informer.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

type token string

func (t token) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}
func (token) RequireTransportSecurity() bool { return false }

func main() {
	addr := flag.String("addr", "127.0.0.1:6443", "API service address")
	tok := flag.String("token", "", "admin bearer token")
	setup := flag.Bool("setup", false, "only create the namespaces")
	nodes := flag.Int("nodes", 100, "Ready nodes to wait for")
	replicas := flag.Int("replicas", 3000, "replicas to scale to")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after")
	flag.Parse()
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(token(*tok)))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *setup {
		nss := client.Must[*corev1.Namespace](conn)
		for _, n := range []string{"bench", "kube-system", "kube-node-lease", "default"} {
			if _, err := nss.Create(ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: n}}); err != nil && !apierrors.IsAlreadyExists(err) {
				log.Fatalf("create namespace %s: %v", n, err)
			}
		}
		return
	}
	nodeC := client.Must[*corev1.Node](conn)
	waitStart := time.Now()
	for {
		l, _, err := nodeC.List(ctx, "", client.ListOptions{})
		if err != nil {
			log.Fatal(err)
		}
		ready := 0
		for _, n := range l {
			for _, c := range n.GetStatus().GetConditions() {
				if c.GetType() == "Ready" && c.GetStatus() == "True" {
					ready++
				}
			}
		}
		if ready >= *nodes {
			fmt.Printf("%d nodes Ready after %.1fs\n", ready, time.Since(waitStart).Seconds())
			break
		}
		select {
		case <-ctx.Done():
			log.Fatalf("only %d of %d nodes Ready", ready, *nodes)
		case <-time.After(500 * time.Millisecond):
		}
	}

	pods := client.Must[*corev1.Pod](conn)
	var mu sync.Mutex
	created, bound, running := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var tCreated, tBound, tRunning time.Time
	var start time.Time
	done := make(chan struct{})
	want := *replicas
	observe := func(p *corev1.Pod) {
		mu.Lock()
		defer mu.Unlock()
		k := client.Key(p)
		now := time.Now()
		if !created[k] {
			created[k] = true
			if len(created) == want {
				tCreated = now
			}
		}
		if p.GetSpec().GetNodeName() != "" && !bound[k] {
			bound[k] = true
			if len(bound) == want {
				tBound = now
			}
		}
		if p.GetStatus().GetPhase() == "Running" && !running[k] {
			running[k] = true
			if len(running) == want {
				tRunning = now
				close(done)
			}
		}
	}
	inf := client.NewInformer(client.ListWatch(pods, "bench", "", "", 500), client.InformerOptions[*corev1.Pod]{})
	inf.AddEventHandler(client.Handler[*corev1.Pod]{OnAdd: observe, OnUpdate: func(_, p *corev1.Pod) { observe(p) }})
	go func() { _ = inf.Run(ctx) }()
	client.WaitForCacheSync(ctx, inf)

	ds := client.Must[*appsv1.Deployment](conn)
	lbl := map[string]string{"app": "bench"}
	d := &appsv1.Deployment{Metadata: &metav1.ObjectMeta{Namespace: "bench", Name: "bench"}, Spec: &appsv1.DeploymentSpec{
		Replicas: proto.Int32(0), Selector: &metav1.LabelSelector{MatchLabels: lbl},
		Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: lbl}, Spec: &corev1.PodSpec{
			Containers: []*corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
	if _, err := ds.Create(ctx, d); err != nil {
		log.Fatal(err)
	}
	time.Sleep(time.Second)
	s, err := ds.GetScale(ctx, "bench", "bench")
	if err != nil {
		log.Fatal(err)
	}
	s.Spec = &autoscalingv1.ScaleSpec{Replicas: int32(want)}
	start = time.Now()
	if _, err := ds.UpdateScale(ctx, "bench", "bench", s); err != nil {
		log.Fatal(err)
	}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			mu.Lock()
			fmt.Printf("  %5.1fs: %d created, %d bound, %d Running\n", time.Since(start).Seconds(), len(created), len(bound), len(running))
			mu.Unlock()
		case <-ctx.Done():
			mu.Lock()
			log.Fatalf("timed out: %d created, %d bound, %d running of %d", len(created), len(bound), len(running), want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, st := range []struct {
		name string
		t    time.Time
	}{{"exist", tCreated}, {"bound", tBound}, {"Running", tRunning}} {
		el := st.t.Sub(start)
		fmt.Printf("all %d pods %-8s after %6.2fs  (%.0f pods/s)\n", want, st.name, el.Seconds(), float64(want)/el.Seconds())
	}
}
