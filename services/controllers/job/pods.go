// This file holds how the Job controller changes a Job's pods: how many
// should run (parallelism, remaining completions, the free indexes of an
// Indexed Job), which to delete, and the pods it creates from the template
// (names, labels, annotations, environment, finalizer and owner, as
// Kubernetes' controller makes them).
package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
	"github.com/kplane/kplane/services/controllers/replicaset"
)

// maxGeneratedNameLength is the longest generateName prefix the API
// service keeps whole (63 less the 5 random characters).
const maxGeneratedNameLength = 58

// manage creates or deletes pods toward what the Job wants running, and
// returns how many are active afterwards. A suspended Job runs none.
func (c *Controller) manage(ctx context.Context, key string, s *jobSync, bo backoffRecord, now time.Time) (int32, error) {
	job := s.job
	active := int32(len(s.active))
	spec := job.GetSpec()
	indexed := spec.GetCompletionMode() == "Indexed"
	if spec.GetSuspend() {
		deleted, deletedReady, err := c.deletePods(ctx, key, job, s.active)
		s.terminated += deleted
		s.ready -= deletedReady
		return active - deleted, err
	}
	parallelism := spec.GetParallelism()
	var want int32
	if spec.Completions == nil {
		want = parallelism
		if s.succeeded > 0 {
			want = active // let the running ones finish
		}
	} else {
		want = min(max(spec.GetCompletions()-s.succeeded, 0), parallelism)
	}
	var remove []*corev1.Pod
	if indexed {
		remove = surplusIndexed(s.active, s.succeededIndexes, int(spec.GetCompletions()))
		// The pods of failed indexes go too.
		for _, p := range s.active {
			if ix, ok := podIndex(p); ok && s.failedIndexes[ix] && !slices.Contains(remove, p) {
				remove = append(remove, p)
			}
		}
	}
	if extra := int(active) - len(remove) - int(want); extra > 0 {
		rest := slices.DeleteFunc(slices.Clone(s.active), func(p *corev1.Pod) bool { return slices.Contains(remove, p) })
		remove = append(remove, replicaset.PodsToDelete(rest, extra)...)
	}
	if len(remove) > 0 {
		deleted, deletedReady, err := c.deletePods(ctx, key, job, remove[:min(len(remove), maxPodChangesPerSync)])
		s.terminated += deleted
		s.ready -= deletedReady
		return active - deleted, err
	}
	// Replacing only failed pods, those still terminating hold their place.
	held := active
	if onlyReplaceFailed(job) {
		held += s.terminated
	}
	if held >= want {
		return active, nil
	}
	perIndex := s.failedIndexes != nil
	if left := c.remaining(bo, now); left > 0 && !perIndex {
		s.requeue = s.requeue.Sooner(left)
		return active, nil
	}
	n := min(int(want-held), maxPodChangesPerSync)
	var indexes []int
	failures := map[int]int{} // per index, with backoffLimitPerIndex
	if indexed {
		taken := map[int]bool{}
		for ix := range s.failedIndexes {
			taken[ix] = true
		}
		if perIndex {
			// An index waits out its own back-off after a failure.
			for ix, last := range lastFailedPerIndex(job, s.pods) {
				failures[ix] = indexFailureCount(last)
				if _, counts, _ := matchPodFailurePolicy(spec.GetPodFailurePolicy(), last); counts {
					failures[ix]++
				}
				left := c.remaining(backoffRecord{failures: failures[ix], lastFailure: finishedAt(last)}, now)
				if left > 0 && !taken[ix] {
					taken[ix] = true
					s.requeue = s.requeue.Sooner(left)
				}
			}
		}
		for ix := range s.succeededIndexes {
			taken[ix] = true
		}
		indexes = freeIndexes(s.active, taken, int(spec.GetCompletions()), n)
		n = len(indexes)
	}
	if n == 0 {
		return active, nil
	}
	c.exp.ExpectCreations(key, n)
	var (
		mu      sync.Mutex
		created int32
		errs    []error
	)
	// Slow start: batches of 1, 2, 4, ... so a broken template costs one
	// failed create, not hundreds.
	next := 0
	for batch := 1; next < n; batch *= 2 {
		size := min(batch, n-next)
		var wg sync.WaitGroup
		failedBefore := len(errs)
		for i := range size {
			idx := -1
			if indexed {
				idx = indexes[next+i]
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				pod := newPod(job, idx)
				if perIndex {
					pod.Metadata.Annotations[IndexFailureCountKey] = strconv.Itoa(failures[idx])
				}
				got, err := c.cfg.Pods.Create(ctx, pod)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					c.exp.CreationObserved(key)
					errs = append(errs, err)
					ctrl.Eventf(c.cfg.Recorder, job, client.EventWarning, "FailedCreate", "Error creating: %v", err)
					return
				}
				created++
				ctrl.Eventf(c.cfg.Recorder, job, client.EventNormal, "SuccessfulCreate", "Created pod: %s", got.GetMetadata().GetName())
			}()
		}
		wg.Wait()
		next += size
		if len(errs) > failedBefore {
			break
		}
	}
	// Creations never attempted will never be observed.
	for range n - next {
		c.exp.CreationObserved(key)
	}
	if err := errors.Join(errs...); err != nil {
		return active + created, fmt.Errorf("job %s: create pods: %w", key, err)
	}
	return active + created, nil
}

// deletePods deletes pods (their finalizer stays until they are counted)
// and returns how many it deleted, and how many of those were ready.
func (c *Controller) deletePods(ctx context.Context, key string, job *batchv1.Job, pods []*corev1.Pod) (int32, int32, error) {
	if len(pods) == 0 {
		return 0, 0, nil
	}
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = client.Key(p)
	}
	c.exp.ExpectDeletions(key, keys)
	var (
		mu                    sync.Mutex
		deleted, deletedReady int32
		errs                  []error
		wg                    sync.WaitGroup
	)
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := p.GetMetadata()
			err := c.cfg.Pods.Delete(ctx, m.GetNamespace(), m.GetName(), client.DeleteOptions{UID: m.GetUid()})
			mu.Lock()
			defer mu.Unlock()
			if err != nil && !apierrors.IsNotFound(err) {
				c.exp.DeletionObserved(key, client.Key(p))
				errs = append(errs, err)
				ctrl.Eventf(c.cfg.Recorder, job, client.EventWarning, "FailedDelete", "Error deleting: %v", err)
				return
			}
			if err != nil {
				c.exp.DeletionObserved(key, client.Key(p))
			}
			deleted++
			if ready, _ := ctrl.PodReady(p); ready {
				deletedReady++
			}
			if err == nil {
				ctrl.Eventf(c.cfg.Recorder, job, client.EventNormal, "SuccessfulDelete", "Deleted pod: %s", m.GetName())
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return deleted, deletedReady, fmt.Errorf("job %s: delete pods: %w", key, err)
	}
	return deleted, deletedReady, nil
}

// newPod is a pod of job from its template: named <job>-<random> (Indexed:
// <job>-<index>-<random>, hostname <job>-<index>, the completion index as
// annotation, label and JOB_COMPLETION_INDEX), with the tracking finalizer
// and job as controller owner. idx is -1 for a NonIndexed Job.
func newPod(job *batchv1.Job, idx int) *corev1.Pod {
	t := job.GetSpec().GetTemplate()
	jm := job.GetMetadata()
	m := &metav1.ObjectMeta{
		GenerateName:    jm.GetName() + "-",
		Namespace:       jm.GetNamespace(),
		Labels:          map[string]string{},
		Annotations:     map[string]string{},
		Finalizers:      []string{TrackingFinalizer},
		OwnerReferences: []*metav1.OwnerReference{ctrl.NewControllerRef(job, "batch/v1", "Job")},
	}
	for k, v := range t.GetMetadata().GetLabels() {
		m.Labels[k] = v
	}
	for k, v := range t.GetMetadata().GetAnnotations() {
		m.Annotations[k] = v
	}
	m.Finalizers = append(m.Finalizers, slices.DeleteFunc(slices.Clone(t.GetMetadata().GetFinalizers()), func(f string) bool { return f == TrackingFinalizer })...)
	spec, _ := proto.Clone(t.GetSpec()).(*corev1.PodSpec)
	if spec == nil {
		spec = &corev1.PodSpec{}
	}
	if idx >= 0 {
		ix := strconv.Itoa(idx)
		m.Annotations[CompletionIndexKey] = ix
		m.Labels[CompletionIndexKey] = ix
		m.GenerateName = indexedGenerateName(jm.GetName(), idx)
		spec.Hostname = fmt.Sprintf("%s-%d", jm.GetName(), idx)
		for _, ct := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			if !slices.ContainsFunc(ct.Env, func(e *corev1.EnvVar) bool { return e.GetName() == completionIndexEnvName }) {
				ct.Env = append(ct.Env, &corev1.EnvVar{Name: completionIndexEnvName, ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + CompletionIndexKey + "']"}}})
			}
		}
	}
	return &corev1.Pod{ApiVersion: "v1", Kind: "Pod", Metadata: m, Spec: spec}
}

// indexedGenerateName is Kubernetes' <job>-<index>- prefix, the Job's name
// cut so that the prefix stays whole.
func indexedGenerateName(job string, idx int) string {
	suffix := "-" + strconv.Itoa(idx) + "-"
	if len(job)+len(suffix) > maxGeneratedNameLength {
		job = job[:maxGeneratedNameLength-len(suffix)]
	}
	return job + suffix
}

// podIndex is p's completion index (its annotation), if valid.
func podIndex(p *corev1.Pod) (int, bool) {
	v, ok := p.GetMetadata().GetAnnotations()[CompletionIndexKey]
	if !ok {
		return -1, false
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return -1, false
	}
	return i, true
}

// succeededIndexes are an Indexed Job's completed indexes: those in
// status.completedIndexes and those of succeeded pods not yet counted
// (still holding the finalizer).
func succeededIndexes(job *batchv1.Job, pods []*corev1.Pod) map[int]bool {
	completions := int(job.GetSpec().GetCompletions())
	out := parseIndexes(job.GetStatus().GetCompletedIndexes(), completions)
	for _, p := range pods {
		if ix, ok := podIndex(p); ok && ix < completions && p.GetStatus().GetPhase() == "Succeeded" && ctrl.HasFinalizer(p.GetMetadata(), TrackingFinalizer) {
			out[ix] = true
		}
	}
	return out
}

// surplusIndexed are the active pods of an Indexed Job to delete: those
// without a valid index, with an index already succeeded, and all but one
// of those sharing an index.
func surplusIndexed(active []*corev1.Pod, succeeded map[int]bool, completions int) []*corev1.Pod {
	var out []*corev1.Pod
	byIndex := map[int][]*corev1.Pod{}
	for _, p := range active {
		ix, ok := podIndex(p)
		if !ok || ix >= completions || succeeded[ix] {
			out = append(out, p)
			continue
		}
		byIndex[ix] = append(byIndex[ix], p)
	}
	for _, ps := range byIndex {
		if len(ps) > 1 {
			// Keep the one that has gone furthest (ready, running, older).
			out = append(out, replicaset.PodsToDelete(ps, len(ps)-1)...)
		}
	}
	return out
}

// freeIndexes are up to n indexes below completions neither succeeded nor
// held by an active pod, lowest first.
func freeIndexes(active []*corev1.Pod, succeeded map[int]bool, completions, n int) []int {
	held := map[int]bool{}
	for _, p := range active {
		if ix, ok := podIndex(p); ok {
			held[ix] = true
		}
	}
	var out []int
	for i := 0; i < completions && len(out) < n; i++ {
		if !succeeded[i] && !held[i] {
			out = append(out, i)
		}
	}
	return out
}

// parseIndexes reads a completedIndexes string ("1,3-5,7") into a set,
// keeping the indexes below completions.
func parseIndexes(s string, completions int) map[int]bool {
	out := map[int]bool{}
	if s == "" {
		return out
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		for i := a; i <= b && i < completions; i++ {
			out[i] = true
		}
	}
	return out
}

// formatIndexes writes a set of indexes as Kubernetes does: sorted, every
// run of consecutive indexes as "first-last", a lone one as its number
// ("0-2,5").
func formatIndexes(set map[int]bool) string {
	ix := make([]int, 0, len(set))
	for i := range set {
		ix = append(ix, i)
	}
	sort.Ints(ix)
	var b strings.Builder
	for i := 0; i < len(ix); {
		j := i
		for j+1 < len(ix) && ix[j+1] == ix[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ix[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(ix[j]))
		}
		i = j + 1
	}
	return b.String()
}

// IndexFailureCountKey is the annotation with which a pod of an Indexed
// Job with backoffLimitPerIndex carries how many pods of its index failed
// before it.
const IndexFailureCountKey = "batch.kubernetes.io/job-index-failure-count"

// indexFailureCount is p's IndexFailureCountKey annotation (0 if absent).
func indexFailureCount(p *corev1.Pod) int {
	n, err := strconv.Atoi(p.GetMetadata().GetAnnotations()[IndexFailureCountKey])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// lastFailedPerIndex is, per index, the failed pod whose failures are
// latest (highest failure count, then latest finish): the pod its
// replacement's count and back-off follow from.
func lastFailedPerIndex(job *batchv1.Job, pods []*corev1.Pod) map[int]*corev1.Pod {
	out := map[int]*corev1.Pod{}
	for _, p := range pods {
		ix, ok := podIndex(p)
		if !ok || !podFailed(job, p) {
			continue
		}
		if cur, ok := out[ix]; !ok || indexFailureCount(p) > indexFailureCount(cur) ||
			indexFailureCount(p) == indexFailureCount(cur) && finishedAt(p).After(finishedAt(cur)) {
			out[ix] = p
		}
	}
	return out
}

// failedIndexes are the indexes an Indexed Job with backoffLimitPerIndex
// has given up: those in status.failedIndexes, and those of pods not yet
// counted whose failure is the index's last allowed one (or matched a
// FailIndex rule).
func failedIndexes(job *batchv1.Job, pods []*corev1.Pod) map[int]bool {
	completions := int(job.GetSpec().GetCompletions())
	out := parseIndexes(job.GetStatus().GetFailedIndexes(), completions)
	limit := int(job.GetSpec().GetBackoffLimitPerIndex())
	for _, p := range pods {
		ix, ok := podIndex(p)
		if !ok || ix >= completions || !ctrl.HasFinalizer(p.GetMetadata(), TrackingFinalizer) || !podFailed(job, p) {
			continue
		}
		_, counts, action := matchPodFailurePolicy(job.GetSpec().GetPodFailurePolicy(), p)
		if action == "FailIndex" || counts && indexFailureCount(p) >= limit {
			out[ix] = true
		}
	}
	return out
}
