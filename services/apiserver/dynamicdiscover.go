// This file holds the resource service's Discover: every custom resource
// served, at each of its versions, with what the gateway's discovery and
// OpenAPI documents need of it.

package apiserver

import (
	"context"
	"encoding/json"
	"slices"

	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/version"

	"github.com/kplane/kplane/proto/apierrors"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

// Discover lists the custom resources served, one entry per served
// version (by Kubernetes' version priority, the preferred first), with
// their CRDs' accepted names, for the gateway's discovery documents; with
// with_crds, each CRD too, for its OpenAPI documents. Only authentication
// is required, as for Kubernetes' discovery and OpenAPI.
func (x *dynamicService) Discover(ctx context.Context, req *dynamicv1.DiscoverRequest) (*dynamicv1.DiscoverResponse, error) {
	if _, err := x.s.cfg.Authenticator.Authenticate(ctx); err != nil {
		return nil, toGRPC(apierrors.NewUnauthorized(err.Error()))
	}
	resp := &dynamicv1.DiscoverResponse{}
	for _, r := range x.s.crs.all() {
		sch := r.custom.schema.Load()
		if sch == nil {
			continue
		}
		crd := sch.crd
		names := crd.Status.AcceptedNames
		if names.Plural == "" {
			names = crd.Spec.Names
		}
		var crdJSON []byte
		if req.GetWithCrds() {
			b, err := json.Marshal(crd)
			if err != nil {
				return nil, toGRPC(apierrors.NewInternalError(err))
			}
			crdJSON = b
		}
		established := false
		for _, c := range crd.Status.Conditions {
			established = established || (c.Type == kubeapiextv1.Established && c.Status == kubeapiextv1.ConditionTrue)
		}
		versions := slices.Clone(crd.Spec.Versions)
		slices.SortStableFunc(versions, func(a, b kubeapiextv1.CustomResourceDefinitionVersion) int {
			return -version.CompareKubeAwareVersionStrings(a.Name, b.Name)
		})
		for _, v := range versions {
			if sch.served[v.Name] == nil {
				continue
			}
			sr := &dynamicv1.ServedResource{
				Group: r.Group, Version: v.Name, Resource: r.Resource, Singular: names.Singular,
				Kind: r.Kind, ListKind: r.custom.listKind, Namespaced: r.Namespaced,
				ShortNames: names.ShortNames, Categories: names.Categories, Status: sch.served[v.Name].status, Scale: sch.served[v.Name].scale != nil,
				CrdName: crd.Name, CrdResourceVersion: crd.ResourceVersion, Crd: crdJSON, Established: established,
				Storage: v.Name == r.Version,
			}
			if len(v.AdditionalPrinterColumns) > 0 {
				b, err := json.Marshal(v.AdditionalPrinterColumns)
				if err != nil {
					return nil, toGRPC(apierrors.NewInternalError(err))
				}
				sr.PrinterColumns = b
			}
			resp.Resources = append(resp.Resources, sr)
		}
	}
	return resp, nil
}
