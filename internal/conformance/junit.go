// This file holds the reading of Ginkgo's JUnit reports: the test names as
// e2e.test prints them and each test's outcome.
package main

import (
	"encoding/xml"
	"fmt"
	"os"
	"strings"
)

// junitSuites is the part of Ginkgo's JUnit report that the scoreboard
// reads. Ginkgo writes one <testcase> per spec and per suite node
// (BeforeSuite, ReportAfterSuite, ...); only [It] cases are tests.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string   `xml:"name,attr"`
	Status  string   `xml:"status,attr"`
	Time    float64  `xml:"time,attr"`
	Skipped *message `xml:"skipped"`
	Failure *message `xml:"failure"`
	Error   *message `xml:"error"`
}

type message struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// outcome is one test's result as the scoreboard shows it.
type outcome struct {
	Name   string
	Status string // passed, failed, skipped, timedout, interrupted, panicked, aborted, ...
	// Detail is the first line of the failure (or of the skip reason).
	Detail  string
	Seconds float64
}

// report is what a Ginkgo JUnit report says.
type report struct {
	// Tests are the outcomes of the [It] cases, in the report's order.
	Tests []outcome
	// SetupFailure is the first suite node (such as
	// [SynchronizedBeforeSuite]) that did not pass, if any; when the
	// suite's setup fails, Ginkgo runs no test and reports none of them.
	SetupFailure *outcome
}

// readJUnit reads a Ginkgo JUnit report.
func readJUnit(path string) (report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return report{}, fmt.Errorf("read junit report: %w", err)
	}
	var doc junitSuites
	if err := xml.Unmarshal(data, &doc); err != nil {
		return report{}, fmt.Errorf("parse junit report %s: %w", path, err)
	}
	var out report
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			o := outcome{Status: c.Status, Detail: caseDetail(c), Seconds: c.Time}
			name, ok := testName(c.Name)
			switch {
			case ok:
				o.Name = name
				out.Tests = append(out.Tests, o)
			case out.SetupFailure == nil && c.Status != "passed" && c.Status != "skipped":
				o.Name = c.Name
				out.SetupFailure = &o
			}
		}
	}
	return out, nil
}

// testName turns a JUnit case name, "[It] <full text> [<labels>]", into the
// test's full text, the string Ginkgo's --focus and --skip match and the one
// e2e.test --list-tests prints. Kubernetes puts every label in the text as
// well ("[sig-apps]", "[Conformance]"), so the trailing label list is only
// dropped when each of its labels already appears in the text; otherwise it
// is kept. Cases other than [It] (suite nodes) report ok false.
func testName(caseName string) (string, bool) {
	text, ok := strings.CutPrefix(caseName, "[It] ")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(text, " [")
	if i < 0 || !strings.HasSuffix(text, "]") {
		return text, true
	}
	body, labels := text[:i], strings.Split(text[i+2:len(text)-1], ", ")
	for _, l := range labels {
		if !strings.Contains(body, "["+l+"]") {
			return text, true
		}
	}
	return body, true
}

// caseDetail is the first non-empty line of what went wrong, or of why the
// test was skipped.
func caseDetail(c junitCase) string {
	for _, m := range []*message{c.Failure, c.Error, c.Skipped} {
		if m == nil {
			continue
		}
		if l := firstLine(m.Message); l != "" {
			return l
		}
		if l := firstLine(m.Text); l != "" {
			return l
		}
	}
	return ""
}

func firstLine(s string) string {
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}
