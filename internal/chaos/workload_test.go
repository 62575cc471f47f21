// This file holds the chaos test's workload: workers that create, scale and
// delete Deployments, retrying through kills, and remember what the API
// service acknowledged.

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// workload creates, scales and deletes Deployments in one namespace and
// remembers what the API service acknowledged: every Deployment whose
// create was acknowledged and whose delete was not, with the replicas of
// its last acknowledged write. An operation whose outcome is unknown (an
// error while the store fails over) is retried until it is acknowledged,
// so the record is exact.
type workload struct {
	deploys *client.Client[*appsv1.Deployment]
	ns      string

	mu      sync.Mutex
	live    map[string]int32
	deleted map[string]bool
	ops     map[string]int // acknowledged operations by kind
	retries int            // attempts that failed and were retried
}

func newWorkload(deploys *client.Client[*appsv1.Deployment], ns string) *workload {
	return &workload{deploys: deploys, ns: ns, live: map[string]int32{}, deleted: map[string]bool{}, ops: map[string]int{}}
}

func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		Metadata: &metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: &appsv1.DeploymentSpec{
			Replicas: proto.Int32(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: &corev1.PodTemplateSpec{
				Metadata: &metav1.ObjectMeta{Labels: labels},
				Spec:     &corev1.PodSpec{Containers: []*corev1.Container{{Name: "web", Image: "nginx:1.27"}}},
			},
		},
	}
}

// retry runs op until it succeeds, each attempt bounded by 3 s, for at
// most a minute; ctx only ends it early when the whole test is cancelled.
func (w *workload) retry(ctx context.Context, what string, op func(context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := op(actx)
		cancel()
		if err == nil {
			return nil
		}
		w.mu.Lock()
		w.retries++
		w.mu.Unlock()
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("%s: %w", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *workload) create(ctx context.Context, name string, replicas int32) error {
	err := w.retry(ctx, "create "+name, func(ctx context.Context) error {
		_, err := w.deploys.Create(ctx, deployment(w.ns, name, replicas))
		if apierrors.IsAlreadyExists(err) {
			return nil // an earlier attempt went through
		}
		return err
	})
	if err == nil {
		w.mu.Lock()
		w.live[name] = replicas
		w.ops["create"]++
		w.mu.Unlock()
	}
	return err
}

func (w *workload) scale(ctx context.Context, name string, replicas int32) error {
	err := w.retry(ctx, "scale "+name, func(ctx context.Context) error {
		d, err := w.deploys.Get(ctx, w.ns, name)
		if err != nil {
			return err
		}
		d.Spec.Replicas = proto.Int32(replicas)
		_, err = w.deploys.Update(ctx, d)
		return err
	})
	if err == nil {
		w.mu.Lock()
		w.live[name] = replicas
		w.ops["scale"]++
		w.mu.Unlock()
	}
	return err
}

func (w *workload) remove(ctx context.Context, name string) error {
	err := w.retry(ctx, "delete "+name, func(ctx context.Context) error {
		err := w.deploys.Delete(ctx, w.ns, name, client.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil // an earlier attempt went through
		}
		return err
	})
	if err == nil {
		w.mu.Lock()
		delete(w.live, name)
		w.deleted[name] = true
		w.ops["delete"]++
		w.mu.Unlock()
	}
	return err
}

// run is one worker: until stop is closed it creates a Deployment, scales
// one of its own, or deletes one (keeping at most max of them), pausing
// between operations. It finishes the operation in flight before it
// returns.
func (w *workload) run(ctx context.Context, worker, max int, stop <-chan struct{}) error {
	rng := rand.New(rand.NewPCG(uint64(worker), uint64(time.Now().UnixNano())))
	var mine []string
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(100+rng.IntN(200)) * time.Millisecond):
		}
		var err error
		switch p := rng.IntN(10); {
		case len(mine) < 2 || (p < 4 && len(mine) < max):
			name := fmt.Sprintf("w%d-%d", worker, i)
			if err = w.create(ctx, name, int32(1+rng.IntN(3))); err == nil {
				mine = append(mine, name)
			}
		case p < 8:
			err = w.scale(ctx, mine[rng.IntN(len(mine))], int32(rng.IntN(4)))
		default:
			k := rng.IntN(len(mine))
			if err = w.remove(ctx, mine[k]); err == nil {
				mine = append(mine[:k], mine[k+1:]...)
			}
		}
		if err != nil {
			return err
		}
	}
}

// snapshot returns the acknowledged state.
func (w *workload) snapshot() (live map[string]int32, deleted map[string]bool, ops map[string]int, retries int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	live = make(map[string]int32, len(w.live))
	for k, v := range w.live {
		live[k] = v
	}
	deleted = make(map[string]bool, len(w.deleted))
	for k := range w.deleted {
		deleted[k] = true
	}
	ops = make(map[string]int, len(w.ops))
	for k, v := range w.ops {
		ops[k] = v
	}
	return live, deleted, ops, w.retries
}
