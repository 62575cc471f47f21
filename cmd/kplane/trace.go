// This file holds `kplane trace <kind>/<name>`: an object's trace, fetched
// from Jaeger and printed as a waterfall.

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kplane/kplane/internal/jaeger"
	"github.com/kplane/kplane/internal/telemetry"
)

func newTraceCommand() *cobra.Command {
	var (
		kubeconfig, namespace, jaegerURL string
		wait                             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "trace <kind>/<name>",
		Short: "Print an object's trace from Jaeger as a waterfall: each hop, its service, start and duration",
		Long: `Print the trace of the request that created or last changed an object
(its trace.kplane.io/traceparent annotation), fetched from Jaeger's query
API, as a waterfall: every hop with its service, start offset and duration,
indented under the hop that caused it, the slowest one (most time spent in
the hop itself) marked.

  kplane trace pod/web-7d4c
  kplane trace deployment/web -n shop --jaeger-url http://127.0.0.1:16686`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok || kind == "" || name == "" {
				return fmt.Errorf("want <kind>/<name>, e.g. pod/web, got %q", args[0])
			}
			ctx := cmd.Context()
			ann, err := objectAnnotations(ctx, kubeconfig, namespace, kind, name)
			if err != nil {
				return err
			}
			sc := telemetry.ObjectSpanContext(ann)
			if !sc.IsValid() {
				return fmt.Errorf("%s has no %s annotation: it was created and last changed without tracing (start the components with OTEL_EXPORTER_OTLP_ENDPOINT set)", args[0], telemetry.Annotation)
			}
			t, err := fetchTrace(ctx, jaegerURL, sc.TraceID().String(), wait)
			if err != nil {
				return err
			}
			return jaeger.PrintWaterfall(cmd.OutOrStdout(), t)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig to reach the gateway (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVarP(&namespace, "namespace", "n", "", "the object's namespace (default: the kubeconfig context's)")
	f.StringVar(&jaegerURL, "jaeger-url", "http://127.0.0.1:16686", "Jaeger's query API")
	f.DurationVar(&wait, "wait", 10*time.Second, "how long to wait for Jaeger to receive the trace (components export in batches)")
	return cmd
}

// objectAnnotations reads kind/name through the gateway, resolving the kind
// (pod, pods, po, deployment, deploy, ...) with discovery as kubectl does.
func objectAnnotations(ctx context.Context, kubeconfig, namespace, kind, name string) (map[string]string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	if namespace == "" {
		if namespace, _, err = cc.Namespace(); err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, err
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	mapper := restmapper.NewShortcutExpander(restmapper.NewDiscoveryRESTMapper(groups), dc, nil)
	gvr, err := mapper.ResourceFor(schema.GroupVersionResource{Resource: strings.ToLower(kind)})
	if err != nil {
		return nil, fmt.Errorf("the server doesn't have a resource type %q: %w", kind, err)
	}
	gvk, err := mapper.KindFor(gvr)
	if err != nil {
		return nil, err
	}
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	ri := dyn.Resource(gvr)
	var get dynamic.ResourceInterface = ri
	if m.Scope.Name() == "namespace" {
		get = ri.Namespace(namespace)
	}
	obj, err := get.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return obj.GetAnnotations(), nil
}

// fetchTrace gets the trace from Jaeger, retrying for up to wait while
// Jaeger does not have it yet.
func fetchTrace(ctx context.Context, jaegerURL, id string, wait time.Duration) (*jaeger.Trace, error) {
	deadline := time.Now().Add(wait)
	hc := &http.Client{Timeout: 30 * time.Second}
	for {
		t, err := jaeger.GetTrace(ctx, hc, jaegerURL, id)
		if err == nil || !errors.Is(err, jaeger.ErrNotFound) || time.Now().After(deadline) {
			if errors.Is(err, jaeger.ErrNotFound) {
				return nil, fmt.Errorf("Jaeger at %s has no trace %s: %w", jaegerURL, id, err)
			}
			return t, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
