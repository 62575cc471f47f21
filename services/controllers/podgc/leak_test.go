// This file holds the package's TestMain: its tests must leave no
// goroutine of ours running.

package podgc_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/kplane/kplane/internal/testutil"
)

func TestMain(m *testing.M) {
	// The tests drive controllers they never Run; podgc.New starts a work
	// queue that only Run shuts down, and this external test package cannot
	// reach it. Its delay loop is the one goroutine such a controller
	// leaves (a test-only leak: a running controller's queue is shut down).
	testutil.VerifyNoLeaks(m, goleak.IgnoreTopFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"))
}
