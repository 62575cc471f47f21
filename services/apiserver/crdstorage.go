// This file holds how CustomResourceDefinitions are stored: as JSON, as
// kube-apiserver's apiextensions server stores them (its protobuf spells a
// schema field by field, where kplane's message keeps the schema as JSON),
// so that kube-apiserver and kplane read each other's.

package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// isCRDs reports whether r's objects are CustomResourceDefinitions.
func isCRDs(r *resourceInfo) bool {
	r = r.storedAs()
	return r.custom == nil && r.Resource == "customresourcedefinitions" && r.Group == "apiextensions.k8s.io"
}

// crdToStored writes a CustomResourceDefinition as its Kubernetes JSON
// (apiextensions.k8s.io/v1), which kube-apiserver's storage decoder reads
// as it reads its own JSON.
func crdToStored(obj proto.Message) ([]byte, error) {
	return kubejson.Marshal(obj)
}

// crdFromStored reads a stored CustomResourceDefinition: JSON written by
// this build (apiextensions.k8s.io/v1) or by kube-apiserver, which stores
// them as apiextensions.k8s.io/v1beta1 (its storage version for them) and
// whose JSON is converted to v1 as its apiextensions server converts it.
func crdFromStored(value []byte) (proto.Message, error) {
	if len(value) == 0 || value[0] != '{' {
		return nil, fmt.Errorf("%w: a CustomResourceDefinition is stored as JSON; this one is not", ErrStorageFormat)
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(value, &tm); err != nil {
		return nil, fmt.Errorf("decoding customresourcedefinition: %w", err)
	}
	if tm.APIVersion != kubeapiextv1.SchemeGroupVersion.String() {
		v1, err := crdJSONToV1(value)
		if err != nil {
			return nil, err
		}
		value = v1
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := kubejson.Unmarshal(value, crd, kubejson.Options{DiscardUnknown: true}); err != nil {
		return nil, fmt.Errorf("decoding customresourcedefinition: %w", err)
	}
	return crd, nil
}

// crdJSONToV1 converts a CustomResourceDefinition's JSON in another
// version of apiextensions.k8s.io (v1beta1) to v1's, with apiextensions'
// own scheme: conversion through its internal type and v1's defaults.
func crdJSONToV1(value []byte) ([]byte, error) {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	internal, _, err := serializer.NewCodecFactory(scheme).UniversalDecoder().Decode(value, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decoding customresourcedefinition: %w", err)
	}
	crd := &kubeapiextv1.CustomResourceDefinition{}
	if err := scheme.Convert(internal, crd, nil); err != nil {
		return nil, fmt.Errorf("converting customresourcedefinition to v1: %w", err)
	}
	scheme.Default(crd)
	crd.APIVersion, crd.Kind = kubeapiextv1.SchemeGroupVersion.String(), "CustomResourceDefinition"
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(crd); err != nil {
		return nil, fmt.Errorf("encoding customresourcedefinition: %w", err)
	}
	return buf.Bytes(), nil
}
