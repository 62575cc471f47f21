package main

import (
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"testing"
)

func TestSetGCPercentYieldsToGOGC(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	before := debug.SetGCPercent(77)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	t.Setenv("GOGC", "50")
	setGCPercent(300, log)
	if got := debug.SetGCPercent(77); got != 77 {
		t.Fatalf("with GOGC set, --gc-percent changed the GC target to %d", got)
	}

	os.Unsetenv("GOGC") // t.Setenv restores it
	setGCPercent(300, log)
	if got := debug.SetGCPercent(77); got != 300 {
		t.Fatalf("without GOGC, the GC target is %d, want the flag's 300", got)
	}
}

func TestAPIServerGCPercentFlag(t *testing.T) {
	f := newAPIServerCommand().Flags().Lookup("gc-percent")
	if f == nil {
		t.Fatal("kplane apiserver has no --gc-percent flag")
	}
	if f.DefValue != "300" {
		t.Fatalf("--gc-percent defaults to %s, want 300", f.DefValue)
	}
}

func TestNodeAgentGCPercentFlag(t *testing.T) {
	f := newNodeAgentCommand().Flags().Lookup("gc-percent")
	if f == nil {
		t.Fatal("kplane nodeagent has no --gc-percent flag")
	}
	if f.DefValue != "100" {
		t.Fatalf("--gc-percent defaults to %s, want 100", f.DefValue)
	}
}

func TestStoreGCPercentFlag(t *testing.T) {
	f := newStoreCommand().Flags().Lookup("gc-percent")
	if f == nil {
		t.Fatal("kplane store has no --gc-percent flag")
	}
	if f.DefValue != "100" {
		t.Fatalf("--gc-percent defaults to %s, want 100", f.DefValue)
	}
}
