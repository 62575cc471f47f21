// This file holds the package's TestMain: its tests must leave no
// goroutine of ours running.

package proxy

import (
	"testing"

	"github.com/kplane/kplane/internal/testutil"
)

func TestMain(m *testing.M) {
	testutil.VerifyNoLeaks(m)
}
