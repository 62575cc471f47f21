// This file holds the package's TestMain: its tests must leave no
// goroutine of ours running.

package replicationcontroller

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/kplane/kplane/internal/testutil"
)

func TestMain(m *testing.M) {
	// The tests call Reconcile on controllers they never Run; New starts a
	// work queue (replicaset.NewForKind) that only Run shuts down, and the
	// queue is not reachable from this package. Its delay loop is the one
	// goroutine such a controller leaves; the other packages' tests shut
	// the queue down themselves.
	testutil.VerifyNoLeaks(m, goleak.IgnoreTopFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"))
}
