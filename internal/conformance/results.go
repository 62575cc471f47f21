// This file holds the reading of a results directory: one Ginkgo run per
// test, as scripts/conformance.sh leaves them.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Exit statuses of timeout(1) when it stopped the command: 124, or 137
// when the command outlived the grace period and was sent SIGKILL.
const (
	timeoutExit = 124
	killedExit  = 137
)

// readResults reads the outcome of every test run in dir, keyed by the
// test's full text. The script runs each test as its own Ginkgo run, number
// N, and leaves N.name (the full text), N.xml (Ginkgo's JUnit report),
// N.exit (the run's exit status; 124 or 137 when the per-test timeout
// stopped it)
// and N.log (its output). A run stopped by the timeout is "timeout" whatever
// its report says; a run with no report for its test is "error", with the
// last line of its log, or "crashed" with where e2e.test panicked.
func readResults(dir string) (map[string]outcome, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.name"))
	if err != nil {
		return nil, fmt.Errorf("list results: %w", err)
	}
	out := make(map[string]outcome, len(names))
	for _, n := range names {
		o, err := readRun(strings.TrimSuffix(n, ".name"))
		if err != nil {
			return nil, err
		}
		out[o.Name] = o
	}
	return out, nil
}

// readRun reads the files of run base (base.name, base.xml, ...).
func readRun(base string) (outcome, error) {
	name, err := os.ReadFile(base + ".name")
	if err != nil {
		return outcome{}, fmt.Errorf("read test name: %w", err)
	}
	o := outcome{Name: strings.TrimSpace(string(name)), Status: "error"}
	exit, hasExit, err := readExit(base + ".exit")
	if err != nil {
		return outcome{}, err
	}
	found, err := findInReport(base+".xml", o.Name)
	if err != nil {
		return outcome{}, err
	}
	timedOut := hasExit && (exit == timeoutExit || exit == killedExit)
	switch {
	case found != nil && !timedOut:
		return *found, nil
	case timedOut:
		o.Status = "timeout"
		o.Detail = "stopped by the per-test timeout"
		if found != nil && found.Detail != "" {
			o.Detail += ": " + found.Detail
		}
	default:
		o.Detail = fmt.Sprintf("no JUnit report for the test (exit status %s)", exitText(exit, hasExit))
		if at, ok := panicLocation(base + ".log"); ok {
			o.Status = "crashed"
			o.Detail += "; e2e.test panicked at " + at
		} else if l := lastLogLine(base + ".log"); l != "" {
			o.Detail += "; last log line: " + l
		}
	}
	return o, nil
}

// findInReport returns the outcome of test name in a JUnit report: its own
// case, or, when the suite's setup failed so that no test ran, "failed"
// with the setup node's failure. It returns nil when the report is missing
// or says nothing of the test.
func findInReport(path, name string) (*outcome, error) {
	rep, err := readJUnit(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, o := range rep.Tests {
		if o.Name == name {
			return &o, nil
		}
	}
	if f := rep.SetupFailure; f != nil {
		return &outcome{Name: name, Status: "failed", Detail: f.Name + " " + f.Detail}, nil
	}
	return nil, nil
}

func readExit(path string) (code int, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read exit status: %w", err)
	}
	code, err = strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, false, fmt.Errorf("exit status in %s: %w", path, err)
	}
	return code, true, nil
}

func exitText(code int, ok bool) string {
	if !ok {
		return "unknown"
	}
	return strconv.Itoa(code)
}

// ansiEscape matches the terminal colour codes Ginkgo may leave in a log.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// goLocation matches a source location such as
// "k8s.io/kubernetes@v1.33.13/test/e2e/apimachinery/chunking.go:68".
var goLocation = regexp.MustCompile(`[\w.@/-]+\.go:[0-9]+`)

// panicLocation reports where e2e.test panicked when a run's log shows a
// panic that took the process down (as when a test fails in a goroutine
// without Ginkgo's recovery, and no report gets written): the first source
// location the log names once the specs start ("Will run ..."; the lines
// before are the suite's own logging).
func panicLocation(path string) (string, bool) {
	data, err := os.ReadFile(path)
	log := ansiEscape.ReplaceAllString(string(data), "")
	if err != nil || !strings.Contains(log, "\npanic(") {
		return "", false
	}
	if _, after, ok := strings.Cut(log, "Will run "); ok {
		log = after
	}
	at := goLocation.FindString(log)
	return at, at != ""
}

// lastLogLine is the last non-blank line of a log, or "" if there is none.
func lastLogLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// readWall returns the run's wall time that the script left in DIR/wall,
// or "" if there is none.
func readWall(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "wall"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}
