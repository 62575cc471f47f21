// Package testutil holds the few helpers that tests across kplane share:
// finding external tools (which may be skipped on a person's machine but must
// be present under CI), picking free loopback ports and building the kplane
// binary for tests that start its processes.
package testutil

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kplane/kplane/internal/freeport"
)

// InCI reports whether the tests run under CI (CI=true), where a missing tool
// is a failure rather than a reason to skip.
func InCI() bool {
	v, _ := strconv.ParseBool(os.Getenv("CI"))
	return v
}

// RequireBinary returns the path of the named executable. When it is missing
// the test is skipped with a message saying what to install, or, under CI,
// fails.
func RequireBinary(t testing.TB, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if InCI() {
		t.Fatalf("%s is required under CI but was not found (%v); install it with: %s", name, err, install)
	}
	t.Skipf("%s not found; install it with: %s (or run scripts/install-deps.sh)", name, install)
	return ""
}

// RequireRoot skips the test (or fails it under CI) unless it runs as root.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if InCI() {
		t.Fatalf("this test must run as root under CI: %s", why)
	}
	t.Skipf("needs root: %s", why)
}

// FreePort returns a TCP port on 127.0.0.1 that was free when asked. The
// port is released before returning, so a racing process could take it;
// tests that start real processes accept that small risk. A test that needs
// several ports takes them from one FreePorts call.
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free when
// asked. Unlike n calls to FreePort, it cannot return one port twice: every
// listener stays open until all n are chosen.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := freeport.Pick("127.0.0.1", n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// SkipShort skips the test under go test -short (the quick tier), saying
// what it does that the quick tier leaves out: building the kplane binary,
// starting a whole cluster.
func SkipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("skipped under -short: %s", what)
	}
}

// RunWithKplane builds cmd/kplane into a temporary directory, sets *bin to
// its path, runs the package's tests and removes the binary: a TestMain for
// packages whose tests start kplane processes. It returns the exit code.
// Like VerifyNoLeaks, it fails a successful run that leaves goroutines
// behind. Under -short it builds nothing and leaves *bin empty: the tests that run
// the binary skip themselves with SkipShort.
func RunWithKplane(m *testing.M, bin *string) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		return CheckLeaks(m.Run())
	}
	dir, err := os.MkdirTemp("", "kplane-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*bin = filepath.Join(dir, "kplane")
	build := exec.Command("go", "build", "-o", *bin, "github.com/kplane/kplane/cmd/kplane")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build kplane:", err)
		return 1
	}
	return CheckLeaks(m.Run())
}

// Tail returns the last n lines of s: what a failing test shows of a log.
func Tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
