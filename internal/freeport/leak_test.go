// This file holds the package's TestMain: its tests must leave no
// goroutine running.

package freeport

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain uses goleak directly: internal/testutil, whose VerifyNoLeaks the
// other packages use, imports this package.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
