// This file holds the TTL-after-finished controller's test on a real
// in-process API service with an injectable clock.

package ttlafterfinished_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/ttlafterfinished"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// TestDeletesAfterTTL: a finished Job with a TTL stays until the TTL has
// run from its Complete condition, then is deleted with foreground
// propagation; a Job without a TTL or not finished stays.
func TestDeletesAfterTTL(t *testing.T) {
	apienv := apiservertest.Start(t, apiservertest.Options{})
	conn := apienv.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	jobs := client.Must[*batchv1.Job](conn)
	clk := &clock{t: time.Now()}
	inf := client.NewInformer(client.ListWatch(jobs, "", "", "", 500), client.InformerOptions[*batchv1.Job]{})
	c := ttlafterfinished.New(ttlafterfinished.Config{Jobs: jobs, JobInformer: inf, Now: clk.Now})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = inf.Run(ctx) }()
	go func() { defer wg.Done(); c.Run(ctx, 2) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	create := func(name string, ttl *int32, finishedAt time.Time) {
		t.Helper()
		j, err := jobs.Create(ctx, &batchv1.Job{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: &batchv1.JobSpec{TtlSecondsAfterFinished: ttl, Template: &corev1.PodTemplateSpec{Spec: &corev1.PodSpec{RestartPolicy: "Never",
				Containers: []*corev1.Container{{Name: "c", Image: "busybox"}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if finishedAt.IsZero() {
			return
		}
		ts := timestamppb.New(finishedAt)
		j.Status = &batchv1.JobStatus{StartTime: timestamppb.New(finishedAt.Add(-time.Minute)), CompletionTime: ts, Succeeded: 1,
			Conditions: []*batchv1.JobCondition{{Type: "SuccessCriteriaMet", Status: "True", LastTransitionTime: ts}, {Type: "Complete", Status: "True", LastTransitionTime: ts}}}
		if _, err := jobs.UpdateStatus(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	done := clk.Now().Truncate(time.Second)
	create("ttl", proto.Int32(60), done)
	create("no-ttl", nil, done)
	create("running", proto.Int32(0), time.Time{})
	nudge := func() {
		t.Helper()
		for _, n := range []string{"ttl", "no-ttl", "running"} {
			j, err := jobs.Get(ctx, "default", n)
			if err != nil {
				t.Fatal(err)
			}
			if j.Metadata.Labels == nil {
				j.Metadata.Labels = map[string]string{}
			}
			j.Metadata.Labels["nudge"] = fmt.Sprint(clk.Now().Unix())
			if _, err := jobs.Update(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
	}
	deleting := func(name string) bool {
		j, err := jobs.Get(ctx, "default", name)
		return apierrors.IsNotFound(err) || j.GetMetadata().GetDeletionTimestamp() != nil
	}
	clk.set(done.Add(30 * time.Second))
	nudge()
	// Half-way: once the cache has the nudge, a reconcile keeps the Job.
	want := fmt.Sprint(clk.Now().Unix())
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if j, ok := inf.Store().Get("default/ttl"); ok && j.GetMetadata().GetLabels()["nudge"] == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the informer did not see the nudge")
		}
	}
	res, err := c.Reconcile(ctx, "default/ttl")
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != 30*time.Second {
		t.Errorf("half-way reconcile asked to run again after %v, want the 30 s left", res.RequeueAfter)
	}
	if deleting("ttl") {
		t.Fatal("deleted 30 s into a 60 s TTL")
	}
	clk.set(done.Add(61 * time.Second))
	nudge()
	deadline := time.Now().Add(30 * time.Second)
	for !deleting("ttl") {
		if time.Now().After(deadline) {
			t.Fatal("the Job whose TTL expired was not deleted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if j, err := jobs.Get(ctx, "default", "ttl"); err == nil {
		if fs := j.GetMetadata().GetFinalizers(); len(fs) != 1 || fs[0] != "foregroundDeletion" {
			t.Errorf("finalizers %v, want foregroundDeletion", fs)
		}
	}
	for _, n := range []string{"no-ttl", "running"} {
		if deleting(n) {
			t.Errorf("%s deleted", n)
		}
	}
}
