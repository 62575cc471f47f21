// This file holds what the Namespace controller does about custom
// resources: it counts those left in a namespace being deleted, resource by
// resource, so that the namespace is finalized only once they are gone.
// The API service deletes them itself, as it deletes a deleted CRD's: the
// controller manager's role may not delete arbitrary resources.
package namespace

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/proto/apierrors"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

// CustomResources lists the custom resources served and their objects
// (dynamicv1.ResourceServiceClient).
type CustomResources interface {
	Discover(ctx context.Context, in *dynamicv1.DiscoverRequest, opts ...grpc.CallOption) (*dynamicv1.DiscoverResponse, error)
	List(ctx context.Context, in *dynamicv1.ListRequest, opts ...grpc.CallOption) (*dynamicv1.ListResponse, error)
}

// customDeleters is a Deleter per namespaced custom resource served now.
func customDeleters(ctx context.Context, c CustomResources) ([]Deleter, error) {
	resp, err := c.Discover(ctx, &dynamicv1.DiscoverRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing the custom resources: %w", err)
	}
	var out []Deleter
	seen := map[string]bool{}
	for _, sr := range resp.GetResources() {
		// A resource served at several versions is listed once per
		// version: its objects are counted once.
		key := sr.GetResource() + "." + sr.GetGroup()
		if sr.GetNamespaced() && !seen[key] {
			seen[key] = true
			out = append(out, customDeleter{c: c, sr: sr})
		}
	}
	return out, nil
}

// customDeleter counts one custom resource's objects in a namespace; the
// API service deletes them.
type customDeleter struct {
	c  CustomResources
	sr *dynamicv1.ServedResource
}

var _ Deleter = customDeleter{}

// Resource is <plural>.<group>, as Kubernetes names it in the namespace's
// conditions.
func (d customDeleter) Resource() string { return d.sr.GetResource() + "." + d.sr.GetGroup() }

// DeleteAll counts the objects left in namespace (being deleted by the
// API service); a resource no longer served has none.
func (d customDeleter) DeleteAll(ctx context.Context, namespace string) (int, error) {
	resp, err := d.c.List(ctx, &dynamicv1.ListRequest{Target: &dynamicv1.Target{
		Group: d.sr.GetGroup(), Version: d.sr.GetVersion(), Resource: d.sr.GetResource(), Namespace: namespace}})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", d.Resource(), err)
	}
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(resp.GetList(), &l); err != nil {
		return 0, fmt.Errorf("%s: %w", d.Resource(), err)
	}
	return len(l.Items), nil
}
