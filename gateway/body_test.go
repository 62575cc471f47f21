// This file holds the tests of request bodies in Kubernetes' protobuf
// encoding: a built-in kind through client-go's scheme and a
// CustomResourceDefinition through apiextensions.k8s.io's, as the
// apiextensions clientset sends it.

package gateway

import (
	"encoding/json"
	"testing"

	k8scorev1 "k8s.io/api/core/v1"
	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

func TestProtobufBodiesToJSON(t *testing.T) {
	crdScheme := runtime.NewScheme()
	if err := kubeapiextv1.AddToScheme(crdScheme); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		obj       runtime.Object
		scheme    *runtime.Scheme
		kind, got string
	}{
		{name: "a built-in kind", scheme: scheme.Scheme, kind: "ConfigMap",
			obj: &k8scorev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
				ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "v"}}},
		{name: "a CustomResourceDefinition", scheme: crdScheme, kind: "CustomResourceDefinition",
			obj: &kubeapiextv1.CustomResourceDefinition{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
				ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
				Spec: kubeapiextv1.CustomResourceDefinitionSpec{Group: "example.com", Scope: "Namespaced",
					Names: kubeapiextv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := runtime.Encode(protobuf.NewSerializer(tt.scheme, tt.scheme), tt.obj)
			if err != nil {
				t.Fatal(err)
			}
			j, err := toJSON(protobufType, b)
			if err != nil {
				t.Fatalf("toJSON: %v", err)
			}
			var doc struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(j, &doc); err != nil || doc.Kind != tt.kind || doc.Metadata.Name != tt.obj.(metav1.Object).GetName() {
				t.Fatalf("got %s (%v)", j, err)
			}
		})
	}
}
