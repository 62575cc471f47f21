// This file holds the overload benchmark (-overload): one user floods the
// API with full lists of a few megabytes from many clients at once, far
// past what the machine serves, while an administrator, a second user of
// the same priority level and the nodes' heartbeats go on; it reports what
// each of them got before and during the flood, as API Priority and
// Fairness should keep the others' latency down.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// floodNamespace holds the flooded objects and the two users' accounts.
const floodNamespace = "flood"

// OverloadResult is one overload run's figures. Durations are in seconds.
type OverloadResult struct {
	// Kind tells the result files apart from the scale steps'.
	Kind  string    `json:"kind"`
	Label string    `json:"label"`
	Date  time.Time `json:"date"`
	Nodes int       `json:"nodes"`
	Load  string    `json:"load"`
	Error string    `json:"error,omitempty"`
	// Objects ConfigMaps of ObjectBytes each; ListBytes is one list's size
	// and ListAlone one list's time with nothing else going on.
	Objects     int     `json:"objects"`
	ObjectBytes int     `json:"objectBytes"`
	ListBytes   int64   `json:"listBytes"`
	ListAlone   float64 `json:"listAlone"`
	// FloodClients lists at once, in a closed loop, for FloodSeconds.
	FloodClients int     `json:"floodClients"`
	FloodSeconds float64 `json:"floodSeconds"`
	// FloodLists completed; Flood429 answers were 429 (each retried by
	// client-go after Retry-After); FloodErrors failed otherwise.
	FloodLists  int `json:"floodLists"`
	Flood429    int `json:"flood429"`
	FloodErrors int `json:"floodErrors"`
	// Baseline and Flood are the probes' latencies before and during the
	// flood, by probe.
	Baseline map[string]Summary `json:"baseline"`
	Flood    map[string]Summary `json:"flood"`
	// ProbeErrors counts the probes' failed calls during the flood.
	ProbeErrors map[string]int `json:"probeErrors"`
	// MaxNotReady is the most nodes seen not Ready at once during the
	// flood; MaxLeaseAge the oldest node Lease renewal seen (seconds).
	MaxNotReady int         `json:"maxNotReady"`
	MaxLeaseAge float64     `json:"maxLeaseAge"`
	Procs       []ProcUsage `json:"procs"`
}

// The probes.
const (
	probeAdminGet  = "admin get namespace"
	probeAdminList = "admin list namespaces"
	probeUserGet   = "other user get configmap"
)

// statusCounter counts the 429 answers a client gets.
type statusCounter struct {
	rt      http.RoundTripper
	tooMany *atomic.Int64
}

func (s statusCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		s.tooMany.Add(1)
	}
	return resp, err
}

func runOverload(ctx context.Context, logger *slog.Logger, cfg config) (*OverloadResult, error) {
	if cfg.kubeconfig == "" {
		return nil, fmt.Errorf("%w: -kubeconfig is required", errUsage)
	}
	procs, err := parseProcs(cfg.procs)
	if err != nil {
		return nil, err
	}
	if cfg.kplaneStat != "" {
		kp, err := procsFromKplaneStatus(cfg.kplaneStat)
		if err != nil {
			return nil, err
		}
		procs = append(procs, kp...)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst, rc.UserAgent = 1000, 2000, "scalebench"
	admin, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if cfg.kwokNodes > 0 {
		if err := createKWOKNodes(ctx, admin, cfg.kwokNodes); err != nil {
			return nil, err
		}
	}
	if err := waitNodes(ctx, logger, admin, cfg.nodes); err != nil {
		return nil, err
	}
	res := &OverloadResult{Kind: "overload", Label: cfg.label, Date: time.Now().UTC(), Nodes: cfg.nodes,
		Objects: cfg.floodObjects, ObjectBytes: cfg.floodObjectBytes, FloodClients: cfg.floodClients,
		ProbeErrors: map[string]int{}}
	fail := func(err error) (*OverloadResult, error) {
		res.Error = err.Error()
		res.Load = loadavg()
		return res, err
	}

	floodToken, userToken, err := setupFlood(ctx, logger, admin, cfg.floodObjects, cfg.floodObjectBytes)
	if err != nil {
		return fail(err)
	}
	var tooMany atomic.Int64
	asUser := func(token string) *rest.Config {
		u := rest.AnonymousClientConfig(rc)
		u.BearerToken = token
		u.QPS, u.Burst, u.UserAgent = 1000, 2000, "scalebench-overload"
		u.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return statusCounter{rt: rt, tooMany: &tooMany} }
		return u
	}
	flooder, err := kubernetes.NewForConfig(asUser(floodToken))
	if err != nil {
		return fail(fmt.Errorf("flood client: %w", err))
	}
	user, err := kubernetes.NewForConfig(asUser(userToken))
	if err != nil {
		return fail(fmt.Errorf("user client: %w", err))
	}

	// One list alone, its size and time.
	start := time.Now()
	n, err := listRaw(ctx, flooder)
	if err != nil {
		return fail(fmt.Errorf("list alone: %w", err))
	}
	res.ListBytes, res.ListAlone = n, time.Since(start).Seconds()
	logger.Info("one list alone", "bytes", n, "took", time.Since(start).Round(time.Millisecond))

	probes := map[string]func(context.Context) error{
		probeAdminGet: func(ctx context.Context) error {
			_, err := admin.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return err
		},
		probeAdminList: func(ctx context.Context) error {
			_, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			return err
		},
		probeUserGet: func(ctx context.Context) error {
			_, err := user.CoreV1().ConfigMaps(floodNamespace).Get(ctx, "flood-0", metav1.GetOptions{})
			return err
		},
	}
	baseline := cfg.baseline
	logger.Info("baseline", "for", baseline)
	res.Baseline, _ = runProbes(ctx, probes, baseline)

	before := sampleProcs(logger, procs)
	peaks := make([]uint64, len(procs))
	floodCtx, stop := context.WithTimeout(ctx, cfg.overload)
	defer stop()
	var wg sync.WaitGroup
	var lists, errs atomic.Int64
	tooMany.Store(0)
	floodStart := time.Now()
	for range cfg.floodClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for floodCtx.Err() == nil {
				if _, err := listRaw(floodCtx, flooder); err == nil {
					lists.Add(1)
				} else if floodCtx.Err() == nil {
					errs.Add(1)
				}
			}
		}()
	}
	// The nodes, as an administrator sees them, every 2 s.
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchNodes(floodCtx, admin, res)
	}()
	logger.Info("flood", "clients", cfg.floodClients, "for", cfg.overload)
	// Let the flood build up before probing.
	select {
	case <-floodCtx.Done():
	case <-time.After(min(5*time.Second, cfg.overload/4)):
	}
	res.Flood, res.ProbeErrors = runProbes(floodCtx, probes, time.Until(floodStart.Add(cfg.overload)))
	for i, s := range sampleProcs(logger, procs) {
		peaks[i] = s.hwm
	}
	stop()
	wg.Wait()
	res.FloodSeconds = time.Since(floodStart).Seconds()
	res.FloodLists, res.FloodErrors, res.Flood429 = int(lists.Load()), int(errs.Load()), int(tooMany.Load())
	res.Procs = usage(procs, before, sampleProcs(logger, procs), peaks)
	res.Load = loadavg()
	return res, nil
}

// setupFlood creates the flood namespace, objects ConfigMaps of size bytes
// each, and two ServiceAccounts that may read them — the flooder and
// another user, both in the same priority level — and returns their tokens.
func setupFlood(ctx context.Context, logger *slog.Logger, cs kubernetes.Interface, objects, size int) (flood, other string, err error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floodNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", "", fmt.Errorf("create namespace: %w", err)
	}
	payload := strings.Repeat("x", size)
	start := time.Now()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	for i := range objects {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("flood-%d", i)}, Data: map[string]string{"payload": payload}}
			if _, err := cs.CoreV1().ConfigMaps(floodNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				mu.Lock()
				firstErr = errors.Join(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return "", "", fmt.Errorf("create configmaps: %w", firstErr)
	}
	logger.Info("flood objects created", "configmaps", objects, "took", time.Since(start).Round(time.Millisecond))
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "scalebench-flood-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", "", fmt.Errorf("create role: %w", err)
	}
	var tokens []string
	for _, name := range []string{"flooder", "other"} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := cs.CoreV1().ServiceAccounts(floodNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", "", fmt.Errorf("create service account: %w", err)
		}
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scalebench-flood-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: floodNamespace}}}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", "", fmt.Errorf("create binding: %w", err)
		}
		exp := int64(3600)
		tr, err := cs.CoreV1().ServiceAccounts(floodNamespace).CreateToken(ctx, name,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		if err != nil {
			return "", "", fmt.Errorf("token for %s: %w", name, err)
		}
		tokens = append(tokens, tr.Status.Token)
	}
	return tokens[0], tokens[1], nil
}

// listRaw lists the flood's ConfigMaps in one unpaged call and reads the
// answer without decoding it (the flooder spends no CPU of the machine
// under test on decoding); it returns the answer's size.
func listRaw(ctx context.Context, cs kubernetes.Interface) (int64, error) {
	rc, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/" + floodNamespace + "/configmaps").Stream(ctx)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	if err != nil {
		return n, fmt.Errorf("read list: %w", err)
	}
	return n, nil
}

// runProbes calls each probe every 100 ms for d (each call bounded at
// 10 s) and returns their latencies and failures.
func runProbes(ctx context.Context, probes map[string]func(context.Context) error, d time.Duration) (map[string]Summary, map[string]int) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	took := map[string][]time.Duration{}
	failed := map[string]int{}
	var wg sync.WaitGroup
	for name, probe := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				err := probe(cctx)
				el := time.Since(start)
				ccancel()
				mu.Lock()
				if err != nil {
					failed[name]++
				} else {
					took[name] = append(took[name], el)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	out := map[string]Summary{}
	for name := range probes {
		out[name] = summarize(took[name])
	}
	return out, failed
}

// watchNodes records, every 2 s until ctx ends, how many nodes are not
// Ready and how old the oldest node Lease renewal is.
func watchNodes(ctx context.Context, cs kubernetes.Interface, res *OverloadResult) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		qctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		nodes, err := cs.CoreV1().Nodes().List(qctx, metav1.ListOptions{})
		if err == nil {
			notReady := 0
			for _, n := range nodes.Items {
				ready := false
				for _, c := range n.Status.Conditions {
					ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
				}
				if !ready {
					notReady++
				}
			}
			res.MaxNotReady = max(res.MaxNotReady, notReady)
		}
		leases, err := cs.CoordinationV1().Leases("kube-node-lease").List(qctx, metav1.ListOptions{})
		if err == nil {
			for _, l := range leases.Items {
				if l.Spec.RenewTime != nil {
					res.MaxLeaseAge = max(res.MaxLeaseAge, time.Since(l.Spec.RenewTime.Time).Seconds())
				}
			}
		}
		cancel()
	}
}

// printOverload prints one overload run.
func printOverload(w io.Writer, r *OverloadResult) {
	fmt.Fprintf(w, "== %s: %d nodes; %d ConfigMaps of %d B (one list %.1f MB, %.3f s alone); %d clients flooding for %.0f s; load %s\n",
		r.Label, r.Nodes, r.Objects, r.ObjectBytes, float64(r.ListBytes)/1e6, r.ListAlone, r.FloodClients, r.FloodSeconds, r.Load)
	if r.Error != "" {
		fmt.Fprintf(w, "   BROKE: %s\n", r.Error)
		return
	}
	fmt.Fprintf(w, "   flood: %d lists served (%.1f/s), %d answered 429, %d failed\n", r.FloodLists,
		float64(r.FloodLists)/max(r.FloodSeconds, 1), r.Flood429, r.FloodErrors)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "   probe\tbaseline p50 s\tbaseline p99 s\tflood p50 s\tflood p99 s\tflood max s\tfailed\t")
	for _, p := range []string{probeAdminGet, probeAdminList, probeUserGet} {
		b, f := r.Baseline[p], r.Flood[p]
		fmt.Fprintf(tw, "   %s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t\n", p, b.P50, b.P99, f.P50, f.P99, f.Max, r.ProbeErrors[p])
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "   nodes: at most %d not Ready; oldest Lease renewal %.1f s\n", r.MaxNotReady, r.MaxLeaseAge)
}

// compareOverload prints one row per overload result.
func compareOverload(w io.Writer, rs []*OverloadResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tnodes\tlists/s\t429s\tadmin get p99 s\tadmin list p99 s\tother user p99 s\tnodes not Ready\toldest Lease s\tCPU s\t")
	for _, r := range rs {
		cpu := 0.0
		for _, p := range r.Procs {
			cpu += p.CPUSeconds
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%d\t%.3f\t%.3f\t%.3f\t%d\t%.1f\t%.0f\t\n", r.Label, r.Nodes, float64(r.FloodLists)/max(r.FloodSeconds, 1),
			r.Flood429, r.Flood[probeAdminGet].P99, r.Flood[probeAdminList].P99, r.Flood[probeUserGet].P99, r.MaxNotReady, r.MaxLeaseAge, cpu)
	}
	return tw.Flush()
}
