// This file holds what `kplane trace` reads: an object's annotations
// through the gateway (where its trace annotation is), and the trace from
// Jaeger once Jaeger has it.

package jaeger

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// ObjectAnnotations reads kind/name's annotations through the gateway
// the kubeconfig names (empty: $KUBECONFIG, then ~/.kube/config), in
// namespace (empty: the context's), resolving the kind (pod, pods, po,
// deployment, deploy, ...) with discovery as kubectl does.
func ObjectAnnotations(ctx context.Context, kubeconfig, namespace, kind, name string) (map[string]string, error) {
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

// WaitTrace gets trace id from Jaeger's query API at jaegerURL, retrying
// for up to wait while Jaeger does not have it yet (components export in
// batches).
func WaitTrace(ctx context.Context, jaegerURL, id string, wait time.Duration) (*Trace, error) {
	deadline := time.Now().Add(wait)
	hc := &http.Client{Timeout: 30 * time.Second}
	for {
		t, err := GetTrace(ctx, hc, jaegerURL, id)
		if err == nil || !errors.Is(err, ErrNotFound) || time.Now().After(deadline) {
			if errors.Is(err, ErrNotFound) {
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
