// This file holds what the packaging tests share: the repository root, the
// kplane binary built once, and the test of the command-line checker.

package packaging

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/kplane/kplane/internal/testutil"
)

// repoRoot is the repository's root directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var kplane struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// kplaneBinary builds cmd/kplane once for the package's tests.
func kplaneBinary(t testing.TB) string {
	t.Helper()
	testutil.SkipShort(t, "builds the kplane binary")
	kplane.once.Do(func() {
		dir, err := os.MkdirTemp("", "kplane-packaging")
		if err != nil {
			kplane.err = err
			return
		}
		kplane.dir = dir
		kplane.path = filepath.Join(dir, "kplane")
		cmd := exec.Command("go", "build", "-o", kplane.path, "./cmd/kplane")
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			kplane.err = &buildError{out: string(out), err: err}
		}
	})
	if kplane.err != nil {
		t.Fatalf("build kplane: %v", kplane.err)
	}
	return kplane.path
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

func TestMain(m *testing.M) {
	code := m.Run()
	if kplane.dir != "" {
		os.RemoveAll(kplane.dir)
	}
	os.Exit(testutil.CheckLeaks(code))
}

// TestCheckArgsCatchesMistakes tests the checker: unknown flags, values of
// the wrong type, missing values, positional arguments and unknown
// subcommands are all refused; a correct line passes.
func TestCheckArgsCatchesMistakes(t *testing.T) {
	k := &Kplane{Bin: kplaneBinary(t)}
	ctx := context.Background()
	if err := k.CheckArgs(ctx, []string{"store", "--name=a", "--election-timeout", "500"}); err != nil {
		t.Errorf("a correct store line: %v", err)
	}
	if err := k.CheckArgs(ctx, []string{"apiserver", "--anonymous-auth", "--listen", "0.0.0.0:1"}); err != nil {
		t.Errorf("a correct store line: %v", err)
	}
	for name, args := range map[string][]string{
		"unknown flag":      {"store", "--no-such-flag=1"},
		"wrong type":        {"store", "--election-timeout=soon"},
		"missing value":     {"apiserver", "--listen"},
		"positional":        {"scheduler", "--server", "a:1", "extra"},
		"bool takes none":   {"scheduler", "--leader-elect", "a:1"},
		"unknown command":   {"no-such-command", "--help"},
		"flag of another":   {"gateway", "--store-endpoints=http://x:2379"},
		"unknown shorthand": {"store", "-x"},
	} {
		if err := k.CheckArgs(ctx, args); err == nil {
			t.Errorf("%s: %q passed", name, args)
		}
	}
}
