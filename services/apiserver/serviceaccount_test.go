// This file holds the API service's tests of ServiceAccount: create, the
// secrets references cleaned to their name, name validation with
// Kubernetes' field paths and message, update, list and watch.
package apiserver

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

func TestServiceAccountCreateValidateListWatch(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	sas := corev1.NewServiceAccountServiceClient(e.conn)

	st, err := sas.WatchServiceAccounts(ctx, &corev1.WatchServiceAccountsRequest{Namespace: "default", ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}

	// Kubernetes keeps only the name of a secrets entry, and stores the
	// other fields as given.
	in := &corev1.ServiceAccount{Metadata: om("default", "robot"),
		Secrets:                      []*corev1.ObjectReference{{Name: "token-a", Namespace: "other", Kind: "Secret", Uid: "u"}},
		ImagePullSecrets:             []*corev1.LocalObjectReference{{Name: "registry"}},
		AutomountServiceAccountToken: proto.Bool(false)}
	cr, err := sas.CreateServiceAccount(ctx, &corev1.CreateServiceAccountRequest{Namespace: "default", ServiceAccount: in})
	if err != nil {
		t.Fatal(err)
	}
	got := cr.GetServiceAccount()
	want := []*corev1.ObjectReference{{Name: "token-a"}}
	if len(got.GetSecrets()) != 1 || !proto.Equal(got.GetSecrets()[0], want[0]) {
		t.Errorf("secrets: got %v, want %v", got.GetSecrets(), want)
	}
	if got.GetImagePullSecrets()[0].GetName() != "registry" || got.AutomountServiceAccountToken == nil || got.GetAutomountServiceAccountToken() {
		t.Errorf("imagePullSecrets/automountServiceAccountToken not kept: %v", got)
	}

	ev, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetType() != "ADDED" || ev.GetObject().GetMetadata().GetName() != "robot" {
		t.Errorf("watch: got %s %s, want ADDED robot", ev.GetType(), ev.GetObject().GetMetadata().GetName())
	}

	// An update without resourceVersion is accepted (unconditional, as
	// Kubernetes' strategy allows) and cleans the references again.
	upd := proto.Clone(got).(*corev1.ServiceAccount)
	upd.Metadata.ResourceVersion = ""
	upd.Secrets = append(upd.Secrets, &corev1.ObjectReference{Name: "token-b", ApiVersion: "v1"})
	ur, err := sas.UpdateServiceAccount(ctx, &corev1.UpdateServiceAccountRequest{Namespace: "default", Name: "robot", ServiceAccount: upd})
	if err != nil {
		t.Fatal(err)
	}
	if s := ur.GetServiceAccount().GetSecrets(); len(s) != 2 || !proto.Equal(s[1], &corev1.ObjectReference{Name: "token-b"}) {
		t.Errorf("updated secrets: got %v", s)
	}
	ev, err = st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetType() != "MODIFIED" {
		t.Errorf("watch: got %s, want MODIFIED", ev.GetType())
	}

	lr, err := sas.ListServiceAccounts(ctx, &corev1.ListServiceAccountsRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if items := lr.GetList().GetItems(); len(items) != 1 || items[0].GetMetadata().GetName() != "robot" {
		t.Errorf("list: got %v", items)
	}

	for _, tc := range []struct {
		name, want string
	}{
		{"Bad_Name", `ServiceAccount "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{"a.b", ""}, // a subdomain, not only a label
	} {
		_, err := sas.CreateServiceAccount(ctx, &corev1.CreateServiceAccountRequest{Namespace: "default",
			ServiceAccount: &corev1.ServiceAccount{Metadata: om("default", tc.name)}})
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		se := wantReason(t, err, apierrors.ReasonInvalid)
		if se.Message != tc.want {
			t.Errorf("%s: message\n got %q\nwant %q", tc.name, se.Message, tc.want)
		}
		if len(se.Causes) != 1 || se.Causes[0].Field != "metadata.name" || se.Causes[0].Type != "FieldValueInvalid" {
			t.Errorf("%s: causes %+v, want one FieldValueInvalid at metadata.name", tc.name, se.Causes)
		}
	}
}
