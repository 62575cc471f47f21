// This file holds the test of mkdir, which behaves as os.MkdirAll.

package nodeagent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMkdir: mkdir behaves as os.MkdirAll: it makes missing parents,
// accepts a directory that exists, and refuses a file in the way.
func TestMkdir(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "pods", "default_p_uid", "app")
	if err := mkdir(deep); err != nil {
		t.Fatalf("missing parents: %v", err)
	}
	if st, err := os.Stat(deep); err != nil || !st.IsDir() {
		t.Fatalf("%s not made: %v", deep, err)
	}
	if err := mkdir(deep); err != nil {
		t.Fatalf("existing directory: %v", err)
	}
	sibling := filepath.Join(root, "pods", "default_q_uid")
	if err := mkdir(sibling); err != nil {
		t.Fatalf("parent exists: %v", err)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := mkdir(file); err == nil {
		t.Fatal("a file in the way: no error")
	}
}
