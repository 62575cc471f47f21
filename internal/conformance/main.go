// Command conformance is scripts/conformance.sh's helper around Kubernetes'
// e2e conformance tests: it lists the tests a Ginkgo dry run selected, turns
// the runs' JUnit reports into CONFORMANCE.md, and checks that the tests
// expected to pass did.
//
//	conformance list -dry-run dry.xml -listed-apart conformance/listed-apart.txt
//	conformance list -names conformance/expected-passes.txt
//	    one line per test to run: "serial<TAB>focus regexp<TAB>full name"
//	conformance report -dry-run dry.xml -results "LABEL=DIR" [-results ...] -out CONFORMANCE.md [-date ... -commit ...]
//	conformance check -results DIR -expected conformance/expected-passes.txt
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(os.Args) < 2 {
		logger.Error("usage: conformance list|report|check [flags]")
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "list":
		err = listCmd(os.Stdout, args)
	case "report":
		err = reportCmd(os.Stdout, args)
	case "check":
		err = checkCmd(os.Stdout, args)
	default:
		err = fmt.Errorf("unknown command %q (list, report, check)", cmd)
	}
	if err != nil {
		logger.Error("conformance", "command", os.Args[1], "err", err)
		os.Exit(1)
	}
}

func listCmd(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	dry := fs.String("dry-run", "", "JUnit report of a Ginkgo dry run (the selected tests)")
	names := fs.String("names", "", "instead of -dry-run, a file of full test names (one a line, # comments)")
	apart := fs.String("listed-apart", "", "file of tests that are not run, with the reason")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var selected []string
	var err error
	if *names != "" {
		selected, err = readExpected(*names)
	} else {
		selected, err = selectedTests(*dry)
	}
	if err != nil {
		return err
	}
	skip, err := readListedApart(*apart)
	if err != nil {
		return err
	}
	return writeRunList(w, selected, skip)
}

// runFlags collects a repeated flag of report (-results LABEL=DIR, -note).
type runFlags []string

func (r *runFlags) String() string     { return strings.Join(*r, ",") }
func (r *runFlags) Set(v string) error { *r = append(*r, v); return nil }

func reportCmd(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	var info pageInfo
	var runArgs runFlags
	dry := fs.String("dry-run", "", "JUnit report of the Ginkgo dry run (the selected tests)")
	fs.Var(&runArgs, "results", "LABEL=DIR[,DIR...]: a column's label and its run directories (N.name, N.xml, N.exit, N.log, wall; the first with a result for a test wins); repeat for more columns")
	apart := fs.String("listed-apart", "", "file of tests that are not run, with the reason")
	out := fs.String("out", "", "write the page here instead of standard output")
	fs.StringVar(&info.Date, "date", "", "when the runs started")
	fs.StringVar(&info.Machine, "machine", "", "the machine (cores, memory, kernel)")
	fs.StringVar(&info.Commit, "commit", "", "the commit of kplane")
	fs.StringVar(&info.Focus, "focus", "", "Ginkgo --focus of the runs")
	fs.StringVar(&info.Skip, "skip", "", "Ginkgo --skip of the runs")
	fs.IntVar(&info.Procs, "procs", 1, "tests run at a time")
	fs.StringVar(&info.Timeout, "timeout", "", "the per-test timeout")
	fs.StringVar(&info.Version, "version", "", "Kubernetes version of e2e.test")
	fs.IntVar(&info.Nodes, "nodes", 0, "simulated nodes of kplane up")
	var notes runFlags
	fs.Var(&notes, "note", "a paragraph added to the page's introduction (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	info.Notes = notes
	selected, err := selectedTests(*dry)
	if err != nil {
		return err
	}
	runs, err := readRuns(runArgs)
	if err != nil {
		return err
	}
	skip, err := readListedApart(*apart)
	if err != nil {
		return err
	}
	rows, cs := scoreboard(selected, runs, skip)
	if *out == "" {
		return writeMarkdown(w, info, runs, rows, cs)
	}
	if err := writeFile(*out, func(f io.Writer) error { return writeMarkdown(f, info, runs, rows, cs) }); err != nil {
		return err
	}
	for i, rn := range runs {
		c := cs[i]
		fmt.Fprintf(w, "%s: passed %d, failed %d, skipped %d, listed apart %d, not run %d of %d\n",
			rn.Label, c.Passed, c.Failed, c.Skipped, c.ListedApart, c.NotRun, c.Selected)
	}
	return nil
}

// readRuns reads the result directories named by -results LABEL=DIR. A
// column may join runs of the same kind, LABEL=DIR1,DIR2: a test takes its
// result from the first directory that has one (say so with -note), and
// the wall times are listed one after the other.
func readRuns(args []string) ([]run, error) {
	var runs []run
	for _, a := range args {
		label, dirs, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("-results %q: want LABEL=DIR", a)
		}
		rn := run{Label: label, Results: map[string]outcome{}}
		var walls []string
		for _, dir := range strings.Split(dirs, ",") {
			res, err := readResults(dir)
			if err != nil {
				return nil, err
			}
			for name, o := range res {
				if _, ok := rn.Results[name]; !ok {
					rn.Results[name] = o
				}
			}
			if w := readWall(dir); w != "" {
				walls = append(walls, w)
			}
		}
		rn.Wall = strings.Join(walls, " + ")
		runs = append(runs, rn)
	}
	return runs, nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

func checkCmd(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	results := fs.String("results", "", "directory of the runs (N.name, N.xml, N.exit, N.log)")
	expected := fs.String("expected", "", "file of tests expected to pass")
	if err := fs.Parse(args); err != nil {
		return err
	}
	want, err := readExpected(*expected)
	if err != nil {
		return err
	}
	res, err := readResults(*results)
	if err != nil {
		return err
	}
	return checkExpected(w, want, res)
}
