// This file publishes the custom resources' OpenAPI: every Established
// CRD's served versions in /openapi/v2 (JSON and protobuf) and in
// /openapi/v3/apis/<group>/<version>, built by apiextensions-apiserver's
// OpenAPI builder as kube-apiserver builds them, kept until a CRD changes.

package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"
	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	sigsyaml "sigs.k8s.io/yaml"

	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

// crdOpenAPI holds the OpenAPI documents with the custom resources in,
// built from the CRDs whose names and revisions make up key. The API
// service's Discover says which CRDs are served at which revision; a
// request finding them changed rebuilds the documents once, from the CRDs
// Discover returns (the gateway has no identity of its own to watch CRDs
// with in forwarding mode, and Discover is answered from the service's
// memory).
type crdOpenAPI struct {
	mu  sync.Mutex
	key string
	// docs is nil until the first build; a build replaces it whole.
	docs *crdDocs
}

// crdDocs is one build of the documents, never modified after.
type crdDocs struct {
	// v2JSON and v2Proto are /openapi/v2: the built-in paths and the
	// custom resources' paths and definitions.
	v2JSON, v2Proto []byte
	// v2ETag and v2ProtoETag are the two forms' entity tags.
	v2ETag, v2ProtoETag string
	// v3 maps "apis/<group>/<version>" to a custom resource group
	// version's document; v3Root is /openapi/v3 with them in.
	v3     map[string][]byte
	v3Root []byte
}

// crdKey identifies the CRDs crs come from and their revisions.
func crdKey(crs []*dynamicv1.ServedResource) string {
	var ids []string
	for _, cr := range crs {
		id := cr.GetCrdName() + "@" + cr.GetCrdResourceVersion()
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

// crdDocuments returns the OpenAPI documents as of the CRDs served now,
// rebuilt if they changed since the last build. When the API service
// cannot say which are served (logged), the built-in kinds' documents are
// served alone, as discovery goes on without the custom resources.
func (g *Gateway) crdDocuments(r *http.Request) (*crdDocs, error) {
	var crs []*dynamicv1.ServedResource
	resp, err := g.dyn.Discover(customCallContext(r, nil), &dynamicv1.DiscoverRequest{})
	if err != nil {
		g.log.Warn("listing the custom resources for OpenAPI failed", "err", err)
	} else {
		crs = resp.GetResources()
	}
	key := crdKey(crs)
	c := g.crdOpenAPI
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.docs != nil && c.key == key {
		return c.docs, nil
	}
	if len(crs) > 0 {
		resp, err = g.dyn.Discover(customCallContext(r, nil), &dynamicv1.DiscoverRequest{WithCrds: true})
		if err != nil {
			return nil, err
		}
		crs, key = resp.GetResources(), crdKey(resp.GetResources())
	}
	docs, err := g.buildCRDOpenAPI(r.Context(), crs)
	if err != nil {
		return nil, err
	}
	c.key, c.docs = key, docs
	return docs, nil
}

// buildCRDOpenAPI builds the documents from the CRDs of crs: each
// Established CRD's versions the API service serves, as kube-apiserver publishes them (a
// version whose schema does not build is left out and logged).
func (g *Gateway) buildCRDOpenAPI(ctx context.Context, crs []*dynamicv1.ServedResource) (*crdDocs, error) {
	c := &crdDocs{}
	var v2 []*spec.Swagger
	v3 := map[string][]*spec3.OpenAPI{}
	seen := map[string]bool{}
	for _, cr := range crs {
		if seen[cr.GetCrdName()] || !cr.GetEstablished() || len(cr.GetCrd()) == 0 {
			continue
		}
		seen[cr.GetCrdName()] = true
		crd := &kubeapiextv1.CustomResourceDefinition{}
		if err := json.Unmarshal(cr.GetCrd(), crd); err != nil {
			return nil, fmt.Errorf("gateway: openapi: CRD %s: %w", cr.GetCrdName(), err)
		}
		for _, v := range crd.Spec.Versions {
			if lookupCustom(crs, crd.Spec.Group, v.Name, cr.GetResource()) == nil {
				continue // not served
			}
			s2, err := builder.BuildOpenAPIV2(crd, v.Name, builder.Options{V2: true, IncludeSelectableFields: true})
			if err != nil {
				g.log.WarnContext(ctx, "a custom resource version is left out of OpenAPI v2", "crd", crd.Name, "version", v.Name, "err", err)
				continue
			}
			v2 = append(v2, s2)
			s3, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{IncludeSelectableFields: true})
			if err != nil {
				g.log.WarnContext(ctx, "a custom resource version is left out of OpenAPI v3", "crd", crd.Name, "version", v.Name, "err", err)
				continue
			}
			key := "apis/" + crd.Spec.Group + "/" + v.Name
			v3[key] = append(v3[key], s3)
		}
	}
	static, err := g.staticV2()
	if err != nil {
		return nil, err
	}
	merged, err := builder.MergeSpecs(static, v2...)
	if err != nil {
		return nil, fmt.Errorf("gateway: openapi v2: %w", err)
	}
	if c.v2JSON, err = json.Marshal(merged); err != nil {
		return nil, fmt.Errorf("gateway: openapi v2: %w", err)
	}
	sum := sha256.Sum256(c.v2JSON)
	c.v2ETag = strings.ToUpper(hex.EncodeToString(sum[:]))
	doc, err := openapiv2.ParseDocument(c.v2JSON)
	if err != nil {
		return nil, fmt.Errorf("gateway: openapi v2: %w", err)
	}
	if c.v2Proto, err = proto.Marshal(doc); err != nil {
		return nil, fmt.Errorf("gateway: openapi v2: %w", err)
	}
	sum = sha256.Sum256(c.v2Proto)
	c.v2ProtoETag = strings.ToUpper(hex.EncodeToString(sum[:]))
	c.v3 = map[string][]byte{}
	paths := map[string]any{}
	for key, b := range g.openapi.docs {
		paths[key] = map[string]any{"serverRelativeURL": "/openapi/v3/" + key + "?hash=" + docHash(b)}
	}
	for key, specs := range v3 {
		if _, builtin := g.openapi.docs[key]; builtin {
			continue // a built-in group version is the built-in document
		}
		m, err := builder.MergeSpecsV3(specs...)
		if err != nil {
			return nil, fmt.Errorf("gateway: openapi v3 %s: %w", key, err)
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("gateway: openapi v3 %s: %w", key, err)
		}
		c.v3[key] = b
		paths[key] = map[string]any{"serverRelativeURL": "/openapi/v3/" + key + "?hash=" + docHash(b)}
	}
	c.v3Root = mustJSON(map[string]any{"paths": paths})
	return c, nil
}

// docHash is a document's hash as its /openapi/v3 URL carries it.
func docHash(b []byte) string {
	sum := sha256.Sum256(b)
	return strings.ToUpper(hex.EncodeToString(sum[:16]))
}

// staticV2 is the built-in part of /openapi/v2 (the protobuf document's
// paths) as a Swagger document the custom resources' are merged into.
func (g *Gateway) staticV2() (*spec.Swagger, error) {
	doc := &openapiv2.Document{}
	if err := proto.Unmarshal(g.openapiV2, doc); err != nil {
		return nil, fmt.Errorf("gateway: openapi v2: %w", err)
	}
	y, err := yaml.Marshal(doc.ToRawInfo())
	if err != nil {
		return nil, fmt.Errorf("gateway: openapi v2: %w", err)
	}
	j, err := sigsyaml.YAMLToJSON(y)
	if err != nil {
		return nil, fmt.Errorf("gateway: openapi v2: %w", err)
	}
	s := &spec.Swagger{}
	if err := json.Unmarshal(j, s); err != nil {
		return nil, fmt.Errorf("gateway: openapi v2: %w", err)
	}
	return s, nil
}

// serveOpenAPIV2 serves /openapi/v2, as JSON or (when Accepted) protobuf,
// with an entity tag; If-None-Match with it is 304.
func (g *Gateway) serveOpenAPIV2(w http.ResponseWriter, r *http.Request) {
	c, err := g.crdDocuments(r)
	if err != nil {
		writeError(w, err)
		return
	}
	body, etag, ct := c.v2JSON, `"`+c.v2ETag+`"`, "application/json"
	if acceptsOpenAPIV2Proto(r.Header.Get("Accept")) {
		body, etag, ct = c.v2Proto, `"`+c.v2ProtoETag+`"`, "application/octet-stream"
	}
	w.Header().Set("Etag", etag)
	w.Header().Set("Vary", "Accept")
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", ct)
	_, _ = w.Write(body)
}
