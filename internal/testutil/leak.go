// This file holds the goroutine-leak check every package whose tests start
// goroutines runs from its TestMain, and the few third-party goroutines it
// ignores.

package testutil

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakIgnores are goroutines that libraries start once, at init or on
// first use, and keep for the life of the process by design: none is ours
// to stop, and none grows with what a test does.
func leakIgnores() []goleak.Option {
	return []goleak.Option{
		// klog's flush daemon: klog (which the Kubernetes modules we link
		// log through) starts it on its first write and never stops it.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		// lumberjack v2's backup remover, which the audit log's rotating
		// file starts on its first rotation or clean-up: Logger.Close does
		// not stop it (lumberjack never closes its channel).
		goleak.IgnoreTopFunction("gopkg.in/natefinch/lumberjack%2ev2.(*Logger).millRun"),
	}
}

// VerifyNoLeaks runs the package's tests and then fails the run if any
// goroutine is left over, other than the known third-party ones and extra:
// a TestMain for packages whose tests start servers, informers or workers.
// It does not return.
func VerifyNoLeaks(m *testing.M, extra ...goleak.Option) {
	os.Exit(CheckLeaks(m.Run(), extra...))
}

// leakGrace is how long goroutines that are already ending get to end
// before they count as leaked. goleak's own retries wait about half a
// second, and some stop only at their next tick: client-go's work queue
// notices ShutDown in its unfinished-work loop on a 500 ms ticker, which a
// loaded machine delays further.
const leakGrace = 5 * time.Second

// CheckLeaks reports goroutines left over after a successful run, as
// VerifyNoLeaks does, for a TestMain that does more than run the tests.
func CheckLeaks(code int, extra ...goleak.Option) int {
	if code != 0 {
		return code
	}
	opts := append(leakIgnores(), extra...)
	deadline := time.Now().Add(leakGrace)
	for {
		err := goleak.Find(opts...)
		if err == nil {
			return code
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			return 1
		}
		time.Sleep(100 * time.Millisecond)
	}
}
