// This file tests what kubejson does with the options proto/internal/kubegen
// sets: MicroTime with 6 digits, inline fields, list wrappers, fields
// Kubernetes writes even when empty.

package kubejson

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	coordinationv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

func TestMicroTimeHasSixDigits(t *testing.T) {
	for _, nanos := range []int32{0, 123456789, 500000000} {
		l := &coordinationv1.Lease{Spec: &coordinationv1.LeaseSpec{RenewTime: &timestamppb.Timestamp{Seconds: 1700000000, Nanos: nanos}}}
		out, err := Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		want := map[int32]string{0: "2023-11-14T22:13:20.000000Z", 123456789: "2023-11-14T22:13:20.123456Z", 500000000: "2023-11-14T22:13:20.500000Z"}[nanos]
		if !strings.Contains(string(out), `"renewTime":"`+want+`"`) {
			t.Errorf("nanos %d: got %s, want renewTime %s", nanos, out, want)
		}
	}
}

func TestInlineFields(t *testing.T) {
	in := `{"configMap":{"name":"cm","optional":true},"name":"v"}` // keys in Marshal's order
	var v corev1.Volume
	if err := Unmarshal([]byte(in), &v, Options{}); err != nil {
		t.Fatal(err)
	}
	if v.GetConfigMap().GetName() != "cm" || v.GetVolumeSource().GetConfigMap().GetLocalObjectReference().GetName() != "cm" {
		t.Fatalf("inline fields not read: %v", &v)
	}
	out, err := Marshal(&v)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Fatalf("Marshal = %s, want %s", out, in)
	}
	err = Unmarshal([]byte(`{"name":"v","configMap":{"nam":"cm"},"bogus":1}`), &v, Options{})
	if err == nil || err.Error() != `kubejson: unknown field "bogus", unknown field "configMap.nam"` {
		t.Fatalf("err = %v", err)
	}
}

func TestListWrapperAndEmitEmpty(t *testing.T) {
	in := `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","metadata":{},"spec":{"user":"u","extra":{"scopes":["a","b"]}},"status":{"allowed":false}}`
	var r authorizationv1.SubjectAccessReview
	if err := Unmarshal([]byte(in), &r, Options{}); err != nil {
		t.Fatal(err)
	}
	if got := r.GetSpec().GetExtra()["scopes"].GetItems(); len(got) != 2 {
		t.Fatalf("extra = %v", got)
	}
	out, err := Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"extra":{"scopes":["a","b"]}`, `"allowed":false`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("Marshal = %s, want it to contain %s", out, want)
		}
	}
}
