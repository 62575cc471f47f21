// This file holds the tests of kubejson: real manifests round-tripped,
// numbers and type meta written as Kubernetes writes them, decoding and its
// errors, managedFields, and a fuzz test of Unmarshal.

package kubejson

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func readManifest(t *testing.T, name string) []byte {
	t.Helper()
	y, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func generic(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

func TestRoundTripRealManifests(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		msg   func() proto.Message
		check func(t *testing.T, m proto.Message)
	}{
		{name: "deployment", file: "deployment.yaml", msg: func() proto.Message { return &appsv1.Deployment{} },
			check: func(t *testing.T, m proto.Message) {
				d := m.(*appsv1.Deployment)
				if got, want := d.GetSpec().GetReplicas(), int32(3); got != want {
					t.Errorf("replicas: got %d, want %d", got, want)
				}
				ru := d.GetSpec().GetStrategy().GetRollingUpdate()
				if got, want := ru.GetMaxSurge().GetIntVal(), int32(1); got != want {
					t.Errorf("maxSurge: got %d, want %d", got, want)
				}
				if got, want := ru.GetMaxUnavailable().GetStrVal(), "25%"; got != want {
					t.Errorf("maxUnavailable: got %q, want %q", got, want)
				}
				if got, want := d.GetMetadata().GetGeneration(), int64(3); got != want {
					t.Errorf("generation: got %d, want %d", got, want)
				}
			}},
		{name: "pod with probes, resources, affinity, tolerations", file: "pod.yaml", msg: func() proto.Message { return &corev1.Pod{} },
			check: func(t *testing.T, m proto.Message) {
				p := m.(*corev1.Pod)
				c := p.GetSpec().GetContainers()[0]
				if got, want := c.GetLivenessProbe().GetHttpGet().GetPort().GetStrVal(), "http"; got != want {
					t.Errorf("liveness port: got %q, want %q", got, want)
				}
				if got, want := c.GetReadinessProbe().GetTcpSocket().GetPort().GetIntVal(), int32(8080); got != want {
					t.Errorf("readiness port: got %d, want %d", got, want)
				}
				if got, want := c.GetResources().GetRequests()["cpu"], "250m"; got != want {
					t.Errorf("cpu request: got %q, want %q", got, want)
				}
				if got, want := p.GetSpec().GetTolerations()[0].GetTolerationSeconds(), int64(300); got != want {
					t.Errorf("tolerationSeconds: got %d, want %d", got, want)
				}
				if got, want := p.GetStatus().GetPodIps()[0].GetIp(), "10.244.1.7"; got != want {
					t.Errorf("podIPs: got %q, want %q", got, want)
				}
				if got, want := p.GetSpec().GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution().GetNodeSelectorTerms()[0].GetMatchExpressions()[0].GetValues(), []string{"a", "b"}; !cmp.Equal(got, want) {
					t.Errorf("affinity values: got %v, want %v", got, want)
				}
			}},
		{name: "secret data is base64", file: "secret.yaml", msg: func() proto.Message { return &corev1.Secret{} },
			check: func(t *testing.T, m proto.Message) {
				if got, want := string(m.(*corev1.Secret).GetData()["password"]), "hunter2"; got != want {
					t.Errorf("password: got %q, want %q", got, want)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := readManifest(t, tt.file)
			m := tt.msg()
			if err := Unmarshal(in, m, Options{}); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			tt.check(t, m)
			out, err := Marshal(m)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if diff := cmp.Diff(generic(t, in), generic(t, out)); diff != "" {
				t.Errorf("round trip differs (-in +out):\n%s", diff)
			}
		})
	}
}

func TestMarshalWritesNumbersAndTypeMeta(t *testing.T) {
	p := &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "a", Generation: 7}}
	out, err := Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), `{"apiVersion":"v1","kind":"Pod","metadata":{"generation":7,"name":"a"}}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	l := &appsv1.ReplicaSetList{Items: []*appsv1.ReplicaSet{{Metadata: &metav1.ObjectMeta{Name: "x"}}}}
	out, err = Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), `{"apiVersion":"apps/v1","items":[{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"x"}}],"kind":"ReplicaSetList"}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestUnmarshal(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		opts    Options
		wantErr string
		want    *corev1.Pod
	}{
		{name: "int64 as string", in: `{"metadata":{"generation":"4"}}`, want: &corev1.Pod{Metadata: &metav1.ObjectMeta{Generation: 4}}},
		{name: "int64 as number", in: `{"metadata":{"generation":4}}`, want: &corev1.Pod{Metadata: &metav1.ObjectMeta{Generation: 4}}},
		{name: "null means unset", in: `{"metadata":null,"spec":{"nodeName":null}}`, want: &corev1.Pod{Spec: &corev1.PodSpec{}}},
		{name: "unknown field with path", in: `{"spec":{"containers":[{"name":"a","imagePullPolicyy":"Always"}]}}`, wantErr: `unknown field "spec.containers[0].imagePullPolicyy"`},
		{name: "unknown field discarded", in: `{"spec":{"bogus":1,"nodeName":"n"}}`, opts: Options{DiscardUnknown: true}, want: &corev1.Pod{Spec: &corev1.PodSpec{NodeName: "n"}}},
		{name: "proto field names are not Kubernetes names", in: `{"spec":{"node_name":"n"}}`, wantErr: `unknown field "spec.node_name"`},
		{name: "IntOrString of the wrong type", in: `{"spec":{"containers":[{"livenessProbe":{"tcpSocket":{"port":true}}}]}}`, wantErr: "spec.containers[0].livenessProbe.tcpSocket.port: want a number or a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := &corev1.Pod{}
			err := Unmarshal([]byte(tt.in), got, tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzUnmarshal checks that no input panics and that whatever decodes
// re-encodes to JSON that decodes and re-encodes identically.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"spec":{"containers":[{"name":"a","ports":[{"containerPort":80}]}]}}`))
	f.Add([]byte(`{"metadata":{"generation":"1","labels":{"a":"b"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &corev1.Pod{}
		if err := Unmarshal(data, p, Options{}); err != nil {
			return
		}
		out, err := Marshal(p)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		q := &corev1.Pod{}
		if err := Unmarshal(out, q, Options{}); err != nil {
			t.Fatalf("re-Unmarshal %s: %v", out, err)
		}
		out2, err := Marshal(q)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		if string(out) != string(out2) {
			t.Fatalf("round trip changed the JSON: %s vs %s", out, out2)
		}
	})
}

// managedFields[].fieldsV1 is a JSON value in Kubernetes and a string of
// JSON in the proto; it round-trips as the JSON value.
func TestManagedFieldsV1(t *testing.T) {
	in := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","managedFields":[{"manager":"m","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:a":{}}}}]}}`
	var cm corev1.ConfigMap
	if err := Unmarshal([]byte(in), &cm, Options{}); err != nil {
		t.Fatal(err)
	}
	if got := cm.GetMetadata().GetManagedFields()[0].GetFieldsV1(); string(got.GetRaw()) != `{"f:data":{"f:a":{}}}` {
		t.Fatalf("fields_v1 = %q", got)
	}
	out, err := Marshal(&cm)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"fieldsV1":{"f:data":{"f:a":{}}}`) {
		t.Fatalf("Marshal: got %s, want fieldsV1 as a JSON object", out)
	}
}
