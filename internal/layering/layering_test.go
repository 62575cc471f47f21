// Package layering holds the tests of kplane's house rules: which package
// may import which, checked over `go list -deps` of each component (test
// files excluded), and that every hand-written file opens with a comment
// saying what it holds (headers_test.go).
package layering

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/kplane/kplane/"

// deps returns every package the packages matching pattern import,
// directly or not (their own included), without test files.
func deps(t *testing.T, pattern string) []string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "list", "-deps", pattern)
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pattern, err)
	}
	return strings.Fields(string(out))
}

// TestStoreKnowsNothingOfKubernetes: the store (raftstore and everything
// under it) imports nothing of k8s.io, nothing of the resource schema and
// no other kplane component: it is an etcd, usable alone.
func TestStoreKnowsNothingOfKubernetes(t *testing.T) {
	for _, d := range deps(t, "./raftstore/...") {
		switch {
		case strings.HasPrefix(d, "k8s.io/"), strings.HasPrefix(d, "sigs.k8s.io/"):
			t.Errorf("the store links %s", d)
		case strings.HasPrefix(d, module+"proto/"), strings.HasPrefix(d, module+"services/"),
			strings.HasPrefix(d, module+"gateway"), strings.HasPrefix(d, module+"nodeagent"):
			t.Errorf("the store links %s", d)
		}
	}
}

// TestComponentsImportNoOtherComponent: the scheduler, the controllers, the
// node agent and the gateway talk to the API service only over gRPC, and
// the API service to the store only over etcd's API: none imports another
// component. What they share of the wire beside the schema — the error
// vocabulary (proto/apierrors) and the identity metadata keys
// (proto/identity) — lives under proto/, and the client library
// (services/client) is shared by all.
func TestComponentsImportNoOtherComponent(t *testing.T) {
	components := map[string]string{
		"scheduler":   "services/scheduler",
		"controllers": "services/controllers",
		"nodeagent":   "nodeagent",
		"gateway":     "gateway",
		"apiserver":   "services/apiserver",
		"store":       "raftstore",
	}
	for name, dir := range components {
		for _, d := range deps(t, "./"+dir) {
			rel, ok := strings.CutPrefix(d, module)
			if !ok || rel == dir || strings.HasPrefix(rel, dir+"/") {
				continue
			}
			for other, odir := range components {
				if other == name || (rel != odir && !strings.HasPrefix(rel, odir+"/")) {
					continue
				}
				t.Errorf("%s (%s) imports %s, part of %s", name, dir, rel, other)
			}
		}
	}
}

// TestClientImportsNoServer: the client library every component shares
// (services/client; its tests' server is services/apiserver/apiservertest)
// imports nothing of the API service, so a component built on it never
// links the server's wiring.
func TestClientImportsNoServer(t *testing.T) {
	for _, d := range deps(t, "./services/client") {
		rel, ok := strings.CutPrefix(d, module)
		if !ok {
			continue
		}
		if rel == "services/apiserver" || strings.HasPrefix(rel, "services/apiserver/") {
			t.Errorf("services/client imports %s", rel)
		}
	}
}
