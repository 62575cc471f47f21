// This file holds the lists kept in the repository: the tests listed apart
// (not run, with the reason) and the tests expected to pass.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// listedApart maps a test's full text to the reason it is not run.
type listedApart map[string]string

// readListedApart reads a file of tests that are not run. A line "## REASON"
// gives the reason of the tests named on the lines after it, one full test
// name a line; other lines starting with "#" and blank lines are comments.
// A name before any reason is an error, so every entry says why.
func readListedApart(path string) (listedApart, error) {
	out := listedApart{}
	if path == "" {
		return out, nil
	}
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	reason := ""
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l.text, "## "):
			reason = strings.TrimSpace(l.text[3:])
		case strings.HasPrefix(l.text, "#"):
		case reason == "":
			return nil, fmt.Errorf("%s:%d: test listed before any \"## reason\" line", path, l.number)
		default:
			out[l.text] = reason
		}
	}
	return out, nil
}

// readExpected reads the list of tests expected to pass: one full test
// name a line, "#" comments and blank lines ignored.
func readExpected(path string) ([]string, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(l.text, "#") {
			out = append(out, l.text)
		}
	}
	return out, nil
}

type line struct {
	number int
	text   string
}

// readLines returns the non-blank lines of a file, trimmed.
func readLines(path string) ([]line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read list: %w", err)
	}
	defer f.Close()
	var out []line
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if t := strings.TrimSpace(sc.Text()); t != "" {
			out = append(out, line{number: n, text: t})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read list %s: %w", path, err)
	}
	return out, nil
}
