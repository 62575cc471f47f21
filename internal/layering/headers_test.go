// This file holds the check that every hand-written Go file opens with a
// comment saying what it holds (after its build constraint, if any).

package layering

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestEveryFileOpensWithAComment: every hand-written .go file of the
// repository, tests included, opens with a // comment once its build
// constraint lines and blank lines are passed. Generated files (*.pb.go,
// *.pb.gw.go, zz_generated*, anything marked "Code generated ... DO NOT
// EDIT.") and third_party/ are not ours to word.
func TestEveryFileOpensWithAComment(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	var checked int
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
		checked++
		if !opensWithComment(src) {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s does not open with a comment saying what it holds", filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	if checked == 0 {
		t.Fatalf("no Go files found under %s", root)
	}
}

// opensWithComment reports whether the first line of src that is neither
// blank nor a build constraint is a // comment.
func opensWithComment(src []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), len(src)+1)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "//go:build") || strings.HasPrefix(line, "// +build") {
			continue
		}
		return strings.HasPrefix(line, "//")
	}
	return false
}

// generated reports whether src carries Go's marker of a generated file, a
// line "// Code generated ... DO NOT EDIT." (https://go.dev/s/generatedcode).
func generated(src []byte) bool {
	for line := range strings.Lines(string(src)) {
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(line, "// Code generated ") && strings.HasSuffix(line, " DO NOT EDIT.") {
			return true
		}
	}
	return false
}

// TestOpensWithComment pins the rule itself: a build constraint and blank
// lines may come first, then the comment; a package clause, an import or
// nothing at all is not a header.
func TestOpensWithComment(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      bool
	}{
		{"header", "// This file holds x.\n\npackage p\n", true},
		{"package first", "package p\n\n// This file holds x.\n", false},
		{"build tag, then header", "//go:build linux\n\n// This file holds x.\n\npackage p\n", true},
		{"header, then build tag", "// This file holds x.\n\n//go:build linux\n\npackage p\n", true},
		{"build tag, then package", "//go:build linux\n\npackage p\n", false},
		{"old build tag, then package", "// +build linux\n\npackage p\n", false},
		{"block comment", "/* x */\npackage p\n", false},
		{"empty", "", false},
	} {
		if got := opensWithComment([]byte(tc.src)); got != tc.want {
			t.Errorf("%s: opensWithComment = %v, want %v", tc.name, got, tc.want)
		}
	}
}
