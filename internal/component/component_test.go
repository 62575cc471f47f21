// This file holds the tests of the process set-up: GOGC wins over
// --gc-percent, and a bad --log-level is refused naming the flag.

package component

import (
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

func TestSetGCPercentYieldsToGOGC(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	before := debug.SetGCPercent(77)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	t.Setenv("GOGC", "50")
	SetGCPercent(300, log)
	if got := debug.SetGCPercent(77); got != 77 {
		t.Fatalf("with GOGC set, --gc-percent changed the GC target to %d", got)
	}

	os.Unsetenv("GOGC") // t.Setenv restores it
	SetGCPercent(300, log)
	if got := debug.SetGCPercent(77); got != 300 {
		t.Fatalf("without GOGC, the GC target is %d, want the flag's 300", got)
	}
}

func TestNewLoggerRefusesUnknownLevel(t *testing.T) {
	if _, err := NewLogger("chatty"); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("got %v, want an error naming --log-level", err)
	}
	for _, level := range []string{"", "debug", "info", "warn", "error"} {
		if _, err := NewLogger(level); err != nil {
			t.Errorf("level %q: %v", level, err)
		}
	}
}
