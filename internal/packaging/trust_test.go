// This file holds the checks, shared by the compose and Helm tests, that a
// deployment lets only the API services and the members reach the store.

package packaging

import (
	"path/filepath"
	"strings"
	"testing"
)

// checkStoreTrust runs StoreTrust on a deployment's store members and API
// services and, with the credentials kplane certs wrote into pkiDir, checks
// that the certificates they name come from the right CA: the members'
// and the API services' store client certificate from the store CA only,
// the API services' serving certificate from the cluster CA only.
// $(POD_NAME) in a file name stands for podName.
func checkStoreTrust(t *testing.T, pkiDir string, stores [][]string, members []string, apiservers [][]string, podName string) {
	t.Helper()
	for _, p := range StoreTrust(stores, members, apiservers) {
		t.Error(p)
	}
	storeCA, clusterCA := filepath.Join(pkiDir, "store-ca.crt"), filepath.Join(pkiDir, "ca.crt")
	signer := func(args []string, flag string, wantStore bool) {
		t.Helper()
		v, ok := FlagValue(args, flag)
		if !ok {
			t.Errorf("no --%s in %q", flag, args)
			return
		}
		file := filepath.Join(pkiDir, strings.ReplaceAll(strings.TrimPrefix(v, PKIDir+"/"), "$(POD_NAME)", podName))
		byStore, err := SignedBy(file, storeCA)
		if err != nil {
			t.Error(err)
			return
		}
		byCluster, err := SignedBy(file, clusterCA)
		if err != nil {
			t.Error(err)
			return
		}
		if byStore != wantStore || byCluster == wantStore {
			t.Errorf("--%s %s: signed by the store CA %v, by the cluster CA %v; want the store CA's %v", flag, v, byStore, byCluster, wantStore)
		}
	}
	for _, args := range stores {
		signer(args, "cert-file", true)
		signer(args, "peer-cert-file", true)
	}
	for _, args := range apiservers {
		signer(args, "store-certfile", true)
		signer(args, "tls-cert-file", false)
	}
}

// TestStoreTrust checks StoreTrust's verdicts on command lines.
func TestStoreTrust(t *testing.T) {
	goodStore := []string{"store", "--name=a",
		"--trusted-ca-file=" + StoreCAFile, "--client-cert-auth",
		"--peer-trusted-ca-file=" + StoreCAFile, "--peer-client-cert-auth", "--peer-cert-allowed-cn=b,a"}
	goodAPI := []string{"apiserver", "--store-cafile=" + StoreCAFile, "--client-ca-file=" + PKIDir + "/ca.crt"}
	replace := func(args []string, flag, with string) []string {
		var out []string
		for _, a := range args {
			if a == "--"+flag || strings.HasPrefix(a, "--"+flag+"=") {
				if with != "" {
					out = append(out, with)
				}
				continue
			}
			out = append(out, a)
		}
		return out
	}
	tests := []struct {
		name       string
		store, api []string
		want       string // in the one problem; empty: none
	}{
		{name: "as kplane up", store: goodStore, api: goodAPI},
		{name: "store trusts the cluster CA", store: replace(goodStore, "trusted-ca-file", "--trusted-ca-file="+PKIDir+"/ca.crt"), api: goodAPI,
			want: "--trusted-ca-file"},
		{name: "peer port without an allow-list", store: replace(goodStore, "peer-cert-allowed-cn", ""), api: goodAPI,
			want: "--peer-cert-allowed-cn"},
		{name: "allow-list missing a member", store: replace(goodStore, "peer-cert-allowed-cn", "--peer-cert-allowed-cn=a"), api: goodAPI,
			want: "want the members a,b"},
		{name: "peer client certificates optional", store: replace(goodStore, "peer-client-cert-auth", ""), api: goodAPI,
			want: "no --peer-client-cert-auth"},
		{name: "API service verifies members with the cluster CA", store: goodStore, api: replace(goodAPI, "store-cafile", "--store-cafile="+PKIDir+"/ca.crt"),
			want: "--store-cafile"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := StoreTrust([][]string{tc.store}, []string{"a", "b"}, [][]string{tc.api})
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("problems %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("problems %q, want one about %q", got, tc.want)
			}
		})
	}
}
