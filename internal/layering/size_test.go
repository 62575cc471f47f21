// This file holds the checks that the mains stay thin: cmd/kplane's
// hand-written code under 800 lines (the commands map flags onto each
// part's Options and run it; the wiring lives in the parts' packages), and
// no hand-written Go file other than a test over 600 lines.

package layering

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Limits of issue 22 ("thin mains").
const (
	maxMainLines = 800
	maxFileLines = 600
)

func TestMainsStayThin(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	var mainLines int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "third_party" || name == "testdata" || name == "vendor" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".pb.go") ||
			strings.HasSuffix(name, ".pb.gw.go") || strings.HasPrefix(name, "zz_generated") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generated(src) {
			return nil
		}
		lines := bytes.Count(src, []byte("\n"))
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		isTest := strings.HasSuffix(name, "_test.go")
		if lines > maxFileLines && !isTest {
			t.Errorf("%s has %d lines, more than %d: split it by concept", rel, lines, maxFileLines)
		}
		if strings.HasPrefix(rel, "cmd/kplane/") && !isTest {
			mainLines += lines
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	if mainLines == 0 || mainLines >= maxMainLines {
		t.Errorf("cmd/kplane has %d lines of non-test Go, want under %d: move wiring into the parts' Options and constructors", mainLines, maxMainLines)
	}
}
