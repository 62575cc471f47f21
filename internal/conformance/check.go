// This file holds the choice of tests to run and the check of the CI tier:
// every test expected to pass passed.
package main

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// selectedTests returns the full names of the tests a Ginkgo dry run
// selected. Its JUnit report lists every spec of the suite; a dry run
// reports the ones --focus and --skip selected as passed and the others as
// skipped.
func selectedTests(dryRun string) ([]string, error) {
	rep, err := readJUnit(dryRun)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, o := range rep.Tests {
		if o.Status == "passed" {
			names = append(names, o.Name)
		}
	}
	return names, nil
}

// isSerial reports whether a test must not run beside others, as Ginkgo
// itself runs [Serial] specs alone.
func isSerial(name string) bool {
	return strings.Contains(name, "[Serial]") || strings.Contains(name, "[Disruptive]")
}

// focusFor is the Ginkgo --focus that selects exactly the test named:
// Ginkgo matches it against "<suite description> <full text>", so the name
// is anchored at its end and preceded by the separating space.
func focusFor(name string) string {
	return " " + regexp.QuoteMeta(name) + "$"
}

// writeRunList writes one line per test to run, tests listed apart left
// out: "1" or "0" for serial, the focus regexp and the name, tab-separated.
func writeRunList(w io.Writer, selected []string, apart listedApart) error {
	var b strings.Builder
	for _, name := range selected {
		if _, ok := apart[name]; ok {
			continue
		}
		serial := "0"
		if isSerial(name) {
			serial = "1"
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\n", serial, focusFor(name), name)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write test list: %w", err)
	}
	return nil
}

// errRegression is returned when a test expected to pass did not.
var errRegression = errors.New("conformance: a test expected to pass did not pass")

// checkExpected writes every expected test that did not pass (or did not
// run) with its outcome, and returns errRegression if there is any.
func checkExpected(w io.Writer, want []string, results map[string]outcome) error {
	var b strings.Builder
	bad := 0
	for _, name := range want {
		o, ok := results[name]
		switch {
		case !ok:
			fmt.Fprintf(&b, "NOT RUN  %s\n", name)
		case o.Status != "passed":
			fmt.Fprintf(&b, "%-8s %s\n         %s\n", strings.ToUpper(o.Status), name, o.Detail)
		default:
			continue
		}
		bad++
	}
	fmt.Fprintf(&b, "%d of %d expected passes passed\n", len(want)-bad, len(want))
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write check: %w", err)
	}
	if bad > 0 {
		return fmt.Errorf("%w: %d of %d", errRegression, bad, len(want))
	}
	return nil
}
