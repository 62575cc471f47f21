// This file tests that objects are stored as kube-apiserver stores them:
// what kplane writes decodes with k8s.io/apimachinery's protobuf
// serializer and client-go's scheme to the same object, under
// kube-apiserver's key, and what that serializer writes kplane reads.

package apiserver

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kubeapiextv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	kubeprotobuf "k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kplane/kplane/proto/kubejson"
)

// kubeStorageCases are objects of several kinds, as Kubernetes JSON, with
// the resource they are stored as and the key kube-apiserver v1.33 keeps
// them under.
func kubeStorageCases() []kubeStorageCase {
	return []kubeStorageCase{
		{"pods", "/registry/pods/ns1/p1", "", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1","namespace":"ns1","uid":"0b2c6b8e-1111-4c5e-9d3a-000000000001","generation":1,"creationTimestamp":"2026-01-02T03:04:05Z","labels":{"app":"web","tier":"front"},"annotations":{"a":"b"},
		"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs1","uid":"0b2c6b8e-1111-4c5e-9d3a-000000000002","controller":true,"blockOwnerDeletion":true}],
		"managedFields":[{"manager":"kubectl","operation":"Apply","apiVersion":"v1","time":"2026-01-02T03:04:05Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{"f:app":{}}}}}]},
		"spec":{"containers":[{"name":"c","image":"nginx:1.27","ports":[{"containerPort":80,"protocol":"TCP"}],"resources":{"limits":{"cpu":"500m","memory":"128Mi"},"requests":{"cpu":"100m"}},
		"livenessProbe":{"httpGet":{"path":"/","port":"http","scheme":"HTTP"},"periodSeconds":10,"timeoutSeconds":1,"successThreshold":1,"failureThreshold":3},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],
		"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","nodeName":"n1","schedulerName":"default-scheduler","enableServiceLinks":true,"priority":0,
		"tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]},
		"status":{"phase":"Running","podIP":"10.0.0.5","podIPs":[{"ip":"10.0.0.5"}],"startTime":"2026-01-02T03:04:06Z","qosClass":"Burstable",
		"conditions":[{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-01-02T03:04:07Z"}]}}`},
		{"deployments", "/registry/deployments/ns1/d1", "", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d1","namespace":"ns1","uid":"0b2c6b8e-1111-4c5e-9d3a-000000000003","generation":3,"creationTimestamp":"2026-01-02T03:04:05Z","labels":{"app":"web"}},
		"spec":{"replicas":0,"selector":{"matchLabels":{"app":"web"},"matchExpressions":[{"key":"tier","operator":"In","values":["front","back"]}]},
		"template":{"metadata":{"creationTimestamp":null,"labels":{"app":"web","tier":"front"}},"spec":{"containers":[{"name":"c","image":"nginx"}]}},
		"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%","maxSurge":1}},"revisionHistoryLimit":10,"progressDeadlineSeconds":600},
		"status":{"observedGeneration":3,"replicas":2,"readyReplicas":2,"conditions":[{"type":"Available","status":"True","lastUpdateTime":"2026-01-02T03:04:05Z","lastTransitionTime":"2026-01-02T03:04:05Z","reason":"MinimumReplicasAvailable","message":"ok"}]}}`},
		{"nodes", "/registry/minions/n1", "", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","uid":"0b2c6b8e-1111-4c5e-9d3a-000000000004","creationTimestamp":"2026-01-02T03:04:05Z","labels":{"kubernetes.io/hostname":"n1"}},
		"spec":{"podCIDR":"10.244.0.0/24","podCIDRs":["10.244.0.0/24"],"taints":[{"key":"k","value":"v","effect":"NoSchedule"}]},
		"status":{"capacity":{"cpu":"4","memory":"8Gi","pods":"110"},"allocatable":{"cpu":"3800m","memory":"7Gi","pods":"110"},
		"conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":"2026-01-02T03:04:05Z","lastTransitionTime":"2026-01-02T03:04:05Z","reason":"KubeletReady","message":"ready"}],
		"addresses":[{"type":"InternalIP","address":"192.168.0.10"}],"nodeInfo":{"machineID":"m","systemUUID":"s","bootID":"b","kernelVersion":"6","osImage":"x","containerRuntimeVersion":"c","kubeletVersion":"v1.33.13","kubeProxyVersion":"","operatingSystem":"linux","architecture":"amd64"}}}`},
		{"services", "/registry/services/specs/ns1/s1", "", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"s1","namespace":"ns1","uid":"0b2c6b8e-1111-4c5e-9d3a-000000000005","creationTimestamp":"2026-01-02T03:04:05Z"},
		"spec":{"ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":8080,"nodePort":30080},{"name":"named","protocol":"UDP","port":53,"targetPort":"dns"}],"selector":{"app":"web"},"clusterIP":"10.96.0.10","clusterIPs":["10.96.0.10"],
		"type":"NodePort","sessionAffinity":"None","externalTrafficPolicy":"Cluster","ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack","internalTrafficPolicy":"Cluster"},"status":{"loadBalancer":{}}}`},
		{"endpoints", "/registry/services/endpoints/ns1/s1", "", `{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"s1","namespace":"ns1","uid":"0b2c6b8e-1111-4c5e-9d3a-000000000006","creationTimestamp":"2026-01-02T03:04:05Z"},
		"subsets":[{"addresses":[{"ip":"10.0.0.5","nodeName":"n1","targetRef":{"kind":"Pod","namespace":"ns1","name":"p1","uid":"0b2c6b8e-1111-4c5e-9d3a-000000000001"}}],"notReadyAddresses":[{"ip":"10.0.0.6"}],"ports":[{"name":"http","port":8080,"protocol":"TCP"}]}]}`},
		{"horizontalpodautoscalers", "/registry/horizontalpodautoscalers/ns1/h1", "autoscaling/horizontalpodautoscalers", `{"apiVersion":"autoscaling/v2","kind":"HorizontalPodAutoscaler","metadata":{"name":"h1","namespace":"ns1","uid":"0b2c6b8e-1111-4c5e-9d3a-000000000007","creationTimestamp":"2026-01-02T03:04:05Z"},
		"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"d1"},"minReplicas":1,"maxReplicas":10,
		"metrics":[{"type":"Resource","resource":{"name":"cpu","target":{"type":"Utilization","averageUtilization":80}}}],
		"behavior":{"scaleDown":{"stabilizationWindowSeconds":300,"selectPolicy":"Max","policies":[{"type":"Percent","value":100,"periodSeconds":15}]}}},
		"status":{"currentReplicas":2,"desiredReplicas":2,"currentMetrics":[{"type":"Resource","resource":{"name":"cpu","current":{"averageValue":"150m","averageUtilization":75}}}]}}`},
		{"events", "/registry/events/ns1/e1", "events.k8s.io/events", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"e1","namespace":"ns1","uid":"0b2c6b8e-1111-4c5e-9d3a-000000000008","creationTimestamp":"2026-01-02T03:04:05Z"},
		"involvedObject":{"kind":"Pod","namespace":"ns1","name":"p1","uid":"0b2c6b8e-1111-4c5e-9d3a-000000000001","apiVersion":"v1"},"reason":"Scheduled","message":"assigned","source":{"component":"default-scheduler"},
		"firstTimestamp":"2026-01-02T03:04:05Z","lastTimestamp":"2026-01-02T03:04:05Z","count":1,"type":"Normal","eventTime":"2026-01-02T03:04:05.123456Z","reportingComponent":"default-scheduler","reportingInstance":"i"}`},
	}
}

type kubeStorageCase struct {
	resource, key string
	view          string // a view the object is also written through ("" none)
	manifest      string
}

// kubeStorageSerializer is kube-apiserver's storage serializer over
// client-go's scheme.
func kubeStorageSerializer() *kubeprotobuf.Serializer {
	return kubeprotobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
}

// kubeTyped decodes a manifest into client-go's Go type for it.
func kubeTyped(t *testing.T, manifest string) runtime.Object {
	t.Helper()
	obj, _, err := serializer.NewCodecFactory(scheme.Scheme).UniversalDeserializer().Decode([]byte(manifest), nil, nil)
	if err != nil {
		t.Fatalf("decoding the manifest with client-go: %v", err)
	}
	return obj
}

// kubeJSON is obj's JSON as client-go writes it, with its type meta set
// from gvk and no resourceVersion (neither is stored inside the object).
func kubeJSON(t *testing.T, obj runtime.Object, gvk schema.GroupVersionKind) map[string]any {
	t.Helper()
	obj = obj.DeepCopyObject()
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "resourceVersion")
	}
	return m
}

// TestStoredAsKubeAPIServer: for each kind, what kplane stores is under
// kube-apiserver's key, starts with its "k8s\x00" envelope naming the
// storage version, and decodes with Kubernetes' own protobuf serializer
// to the object written; and an object Kubernetes' serializer wrote is
// read by kplane as the same object.
func TestStoredAsKubeAPIServer(t *testing.T) {
	resources := resourcesByName()
	st := &storage{prefix: "/registry/"}
	ser := kubeStorageSerializer()
	for _, tc := range kubeStorageCases() {
		t.Run(tc.resource, func(t *testing.T) {
			r := resources[tc.resource]
			want := kubeTyped(t, tc.manifest)
			gvk := want.GetObjectKind().GroupVersionKind()
			obj := r.New()
			if err := kubejson.Unmarshal([]byte(tc.manifest), obj, kubejson.Options{}); err != nil {
				t.Fatal(err)
			}
			m := meta(obj)
			key := st.key(r, m.Namespace, m.Name)
			if key != tc.key {
				t.Errorf("key = %s, want kube-apiserver's %s", key, tc.key)
			}
			if tc.view != "" {
				v := newViews(resources)[tc.view]
				if k := st.key(v, m.Namespace, m.Name); k != tc.key {
					t.Errorf("key through %s = %s, want %s", tc.view, k, tc.key)
				}
			}
			m.ResourceVersion = "42"
			b, err := st.encode(r, key, obj)
			if err != nil {
				t.Fatal(err)
			}
			if m.ResourceVersion != "42" {
				t.Errorf("encode changed the object's resourceVersion to %q", m.ResourceVersion)
			}

			// kplane → Kubernetes.
			got, gotGVK, err := ser.Decode(b, nil, nil)
			if err != nil {
				t.Fatalf("Kubernetes' serializer cannot read what kplane stored: %v", err)
			}
			if *gotGVK != gvk {
				t.Errorf("stored as %v, want %v", gotGVK, gvk)
			}
			if d := cmp.Diff(kubeJSON(t, want, gvk), kubeJSON(t, got, gvk)); d != "" {
				t.Errorf("Kubernetes reads another object than kplane stored (-want +got):\n%s", d)
			}
			var kb bytes.Buffer
			if err := ser.Encode(want, &kb); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, kb.Bytes()) {
				// Not required (both are valid encodings), but the
				// envelope and the field order are the same.
				t.Logf("kplane's bytes differ from Kubernetes' (%d vs %d bytes)", len(b), kb.Len())
			}

			// Kubernetes → kplane.
			back, err := st.decode(r, key, kb.Bytes(), 7)
			if err != nil {
				t.Fatalf("kplane cannot read what Kubernetes' serializer wrote: %v", err)
			}
			if rv := meta(back).ResourceVersion; rv != "7" {
				t.Errorf("resourceVersion = %q, want the key's revision 7", rv)
			}
			j, err := kubejson.Marshal(back)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(kubeJSON(t, want, gvk), kubeJSON(t, kubeTyped(t, string(j)), gvk)); d != "" {
				t.Errorf("kplane reads another object than Kubernetes stored (-want +got):\n%s", d)
			}
		})
	}
}

// newViews is the views the server serves, over resources.
func newViews(resources map[string]*resourceInfo) map[string]*resourceInfo {
	return map[string]*resourceInfo{
		"events.k8s.io/events":                 eventsView(resources["events"]),
		"autoscaling/horizontalpodautoscalers": hpaV1View(resources["horizontalpodautoscalers"]),
	}
}

const testCRDv1 = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com","uid":"0b2c6b8e-1111-4c5e-9d3a-000000000009","generation":1,"creationTimestamp":"2026-01-02T03:04:05Z"},
	"spec":{"group":"example.com","names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList","shortNames":["wd"]},"scope":"Namespaced",
	"versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
	"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{"size":{"type":"integer","minimum":1,"default":3},"color":{"type":"string","enum":["red","blue"]}},"required":["color"]},"status":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}},
	"additionalPrinterColumns":[{"name":"Color","type":"string","jsonPath":".spec.color"}]}],"conversion":{"strategy":"None"}},
	"status":{"conditions":[{"type":"Established","status":"True","lastTransitionTime":"2026-01-02T03:04:05Z","reason":"InitialNamesAccepted","message":"the initial names have been accepted"}],
	"acceptedNames":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList","shortNames":["wd"]},"storedVersions":["v1"]}}`

// TestCRDStoredAsKubeAPIServer: CustomResourceDefinitions are stored as
// kube-apiserver's apiextensions server stores them, JSON under
// apiextensions.k8s.io/customresourcedefinitions/: what kplane writes
// apiextensions' codecs read as the same object, and what kube-apiserver
// writes (apiextensions.k8s.io/v1beta1 JSON, its storage version) kplane
// reads converted to v1.
func TestCRDStoredAsKubeAPIServer(t *testing.T) {
	r := resourcesByName()["customresourcedefinitions"]
	st := &storage{prefix: "/registry/"}
	sch := runtime.NewScheme()
	apiextinstall.Install(sch)
	codecs := serializer.NewCodecFactory(sch)
	decodeV1 := func(b []byte) *kubeapiextv1.CustomResourceDefinition {
		t.Helper()
		obj, _, err := codecs.UniversalDecoder(kubeapiextv1.SchemeGroupVersion).Decode(b, nil, nil)
		if err != nil {
			t.Fatalf("apiextensions cannot read %s: %v", b, err)
		}
		return obj.(*kubeapiextv1.CustomResourceDefinition)
	}
	want := decodeV1([]byte(testCRDv1))
	gvk := kubeapiextv1.SchemeGroupVersion.WithKind("CustomResourceDefinition")

	obj := r.New()
	if err := kubejson.Unmarshal([]byte(testCRDv1), obj, kubejson.Options{}); err != nil {
		t.Fatal(err)
	}
	key := st.key(r, "", "widgets.example.com")
	if key != "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com" {
		t.Errorf("key = %s, want kube-apiserver's", key)
	}
	b, err := st.encode(r, key, obj)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(kubeJSON(t, want, gvk), kubeJSON(t, decodeV1(b), gvk)); d != "" {
		t.Errorf("apiextensions reads another CRD than kplane stored (-want +got):\n%s", d)
	}

	// What kube-apiserver stores: v1beta1 JSON.
	internal := &apiext.CustomResourceDefinition{}
	if err := sch.Convert(want, internal, nil); err != nil {
		t.Fatal(err)
	}
	v1beta1, err := runtime.Encode(codecs.LegacyCodec(kubeapiextv1beta1.SchemeGroupVersion), internal)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(v1beta1), `"apiVersion":"apiextensions.k8s.io/v1beta1"`) {
		t.Fatalf("not v1beta1: %s", v1beta1)
	}
	for _, stored := range [][]byte{v1beta1, b} {
		back, err := st.decode(r, key, stored, 9)
		if err != nil {
			t.Fatalf("kplane cannot read a stored CRD: %v\n%s", err, stored)
		}
		j, err := kubejson.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(kubeJSON(t, want, gvk), kubeJSON(t, decodeV1(j), gvk)); d != "" {
			t.Errorf("kplane reads another CRD than was stored (-want +got):\n%s", d)
		}
	}
}
