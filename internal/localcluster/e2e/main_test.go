// This file holds what the `kplane up` tests share: the kplane binary built
// once for the package.

package e2e

import (
	"os"
	"testing"

	"github.com/kplane/kplane/internal/testutil"
)

// kplaneBin is the kplane binary built once for the package by TestMain.
var kplaneBin string

func TestMain(m *testing.M) {
	os.Exit(testutil.RunWithKplane(m, &kplaneBin))
}
