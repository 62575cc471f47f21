// This file holds the workloads other than the Deployment (-workload): a
// Parallel StatefulSet until all Ready, a DaemonSet's rolling update until
// every pod is updated and available, and many one-pod Jobs until all are
// Complete. Each has a part before the clock starts, the timed action, and a
// wait for its done condition.

package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// The workloads -workload accepts.
const (
	workloadDeployment  = "deployment"
	workloadStatefulSet = "statefulset"
	workloadDaemonSet   = "daemonset"
	workloadJobs        = "jobs"
)

// pollEvery is how often the StatefulSet's and DaemonSet's status is read
// while waiting: the done time is known to this resolution.
const pollEvery = 100 * time.Millisecond

// workload is one measured scenario: prepare runs before the clock starts,
// act is the timed action, and done waits for the scenario's end.
type workload struct {
	prepare func(ctx context.Context) error
	act     func(ctx context.Context) error
	done    func(ctx context.Context) error
}

// newWorkload builds the scenario cfg.workload names; n is its size
// (replicas of the StatefulSet, Jobs), the DaemonSet covers cfg.nodes nodes.
func newWorkload(logger *slog.Logger, cs kubernetes.Interface, cfg config, tr *tracker) (*workload, error) {
	ns, n := cfg.namespace, cfg.replicas
	switch cfg.workload {
	case workloadDeployment:
		return &workload{
			prepare: func(context.Context) error { return nil },
			act: func(ctx context.Context) error {
				if _, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(int32(n)), metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("create deployment: %w", err)
				}
				return nil
			},
			done: func(ctx context.Context) error { return tr.waitRunning(ctx, logger, n) },
		}, nil
	case workloadStatefulSet:
		return &workload{
			prepare: func(context.Context) error { return nil },
			act: func(ctx context.Context) error {
				if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, statefulSet(int32(n)), metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("create statefulset: %w", err)
				}
				return nil
			},
			done: func(ctx context.Context) error { return waitStatefulSetReady(ctx, logger, cs, ns, int32(n)) },
		}, nil
	case workloadDaemonSet:
		maxUnavailable := intstr.Parse(cfg.maxUnavailable)
		return &workload{
			prepare: func(ctx context.Context) error {
				if _, err := cs.AppsV1().DaemonSets(ns).Create(ctx, daemonSet(maxUnavailable), metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("create daemonset: %w", err)
				}
				logger.Info("daemonset created; waiting for its first rollout (not timed)", "nodes", cfg.nodes)
				return waitDaemonSetRolledOut(ctx, logger, cs, ns, int32(cfg.nodes))
			},
			act: func(ctx context.Context) error { return rollDaemonSet(ctx, cs, ns) },
			done: func(ctx context.Context) error {
				return waitDaemonSetRolledOut(ctx, logger, cs, ns, int32(cfg.nodes))
			},
		}, nil
	case workloadJobs:
		jt := newJobTracker(cs, ns)
		return &workload{
			prepare: func(ctx context.Context) error { return jt.start(ctx) },
			act:     func(ctx context.Context) error { return createJobs(ctx, cs, ns, n) },
			done:    func(ctx context.Context) error { return jt.waitComplete(ctx, logger, n) },
		}, nil
	}
	return nil, fmt.Errorf("%w: unknown -workload %q (deployment, statefulset, daemonset, jobs)", errUsage, cfg.workload)
}

// podTemplate is the pod all workloads run: a pause container tolerating
// KWOK's taint (kplane's nodes carry none).
func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "density"}},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
			Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
}

func statefulSet(replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": "density"}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "density", Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			ServiceName:         "density",
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template:            podTemplate(),
		},
	}
}

func daemonSet(maxUnavailable intstr.IntOrString) *appsv1.DaemonSet {
	labels := map[string]string{"app": "density"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "density", Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: podTemplate(),
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable},
			},
		},
	}
}

// rollDaemonSet changes the DaemonSet's pod template (an annotation), which
// starts a rolling update of every pod.
func rollDaemonSet(ctx context.Context, cs kubernetes.Interface, ns string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "density", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Spec.Template.Annotations == nil {
			ds.Spec.Template.Annotations = map[string]string{}
		}
		ds.Spec.Template.Annotations["densitybench/rolled-at"] = time.Now().UTC().Format(time.RFC3339Nano)
		_, err = cs.AppsV1().DaemonSets(ns).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("update daemonset template: %w", err)
	}
	return nil
}

// waitDaemonSetRolledOut waits until the controller has seen the latest
// spec and at least nodes pods are scheduled, all of them updated and
// available.
func waitDaemonSetRolledOut(ctx context.Context, logger *slog.Logger, cs kubernetes.Interface, ns string, nodes int32) error {
	var last appsv1.DaemonSetStatus
	return pollStatus(ctx, logger, func(ctx context.Context) (bool, []any, error) {
		ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "density", metav1.GetOptions{})
		if err != nil {
			return false, nil, err
		}
		last = ds.Status
		s := ds.Status
		ok := s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled >= nodes &&
			s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled &&
			s.NumberUnavailable == 0
		return ok, []any{"desired", last.DesiredNumberScheduled, "updated", last.UpdatedNumberScheduled,
			"available", last.NumberAvailable, "unavailable", last.NumberUnavailable}, nil
	})
}

// waitStatefulSetReady waits until the StatefulSet reports all replicas
// Ready for its latest spec.
func waitStatefulSetReady(ctx context.Context, logger *slog.Logger, cs kubernetes.Interface, ns string, replicas int32) error {
	return pollStatus(ctx, logger, func(ctx context.Context) (bool, []any, error) {
		ss, err := cs.AppsV1().StatefulSets(ns).Get(ctx, "density", metav1.GetOptions{})
		if err != nil {
			return false, nil, err
		}
		s := ss.Status
		ok := s.ObservedGeneration >= ss.Generation && s.ReadyReplicas >= replicas
		return ok, []any{"replicas", s.Replicas, "ready", s.ReadyReplicas, "want", replicas}, nil
	})
}

// pollStatus calls check every pollEvery until it reports done, logging its
// progress every 10 s; a failing read is logged and tried again.
func pollStatus(ctx context.Context, logger *slog.Logger, check func(context.Context) (bool, []any, error)) error {
	lastLog := time.Now()
	var progress []any
	err := wait.PollUntilContextCancel(ctx, pollEvery, true, func(ctx context.Context) (bool, error) {
		ok, p, err := check(ctx)
		if err != nil {
			logger.Warn("read status", "err", err)
			return false, nil
		}
		progress = p
		if time.Since(lastLog) >= 10*time.Second {
			logger.Info("progress", progress...)
			lastLog = time.Now()
		}
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("not done (%v): %w", progress, err)
	}
	return nil
}

// createJobs creates n one-pod Jobs density-1..n from a few workers, so that
// the measuring client is not what paces them.
func createJobs(ctx context.Context, cs kubernetes.Interface, ns string, n int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := 1; i <= n; i++ {
		g.Go(func() error {
			if _, err := cs.BatchV1().Jobs(ns).Create(ctx, job(i), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create job %d: %w", i, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// job is one Job of one pod whose container exits 0 at once: on kplane's
// built-in runtime `sh -c "exit 0"` is run by its shell interpreter; on
// KWOK the pod-complete stage marks a Job's Running pod Succeeded.
func job(i int) *batchv1.Job {
	tmpl := podTemplate()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	tmpl.Spec.Containers[0].Command = []string{"sh", "-c", "exit 0"}
	one := int32(1)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("density-%d", i), Labels: map[string]string{"app": "density"}},
		Spec:       batchv1.JobSpec{Parallelism: &one, Completions: &one, Template: tmpl},
	}
}

// jobTracker counts, through an informer, the Jobs with condition Complete.
type jobTracker struct {
	cs      kubernetes.Interface
	ns      string
	inf     cache.SharedIndexInformer
	factory informers.SharedInformerFactory
}

func newJobTracker(cs kubernetes.Interface, ns string) *jobTracker {
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=density" }))
	return &jobTracker{cs: cs, ns: ns, factory: factory, inf: factory.Batch().V1().Jobs().Informer()}
}

// start runs the informer until ctx ends and waits for it to sync.
func (j *jobTracker) start(ctx context.Context) error {
	j.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), j.inf.HasSynced) {
		return fmt.Errorf("job informer did not sync: %w", ctx.Err())
	}
	return nil
}

func (j *jobTracker) complete() int {
	n := 0
	for _, obj := range j.inf.GetStore().List() {
		jb, ok := obj.(*batchv1.Job)
		if !ok {
			continue
		}
		for _, c := range jb.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				n++
				break
			}
		}
	}
	return n
}

// waitComplete waits until n Jobs are Complete, reading the informer's cache
// every pollEvery.
func (j *jobTracker) waitComplete(ctx context.Context, logger *slog.Logger, n int) error {
	return pollStatus(ctx, logger, func(context.Context) (bool, []any, error) {
		c := j.complete()
		return c >= n, []any{"complete", c, "want", n}, nil
	})
}
