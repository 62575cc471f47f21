// This file holds the tests of the scoreboard helper: JUnit reading, the
// outcome of each run, the counts, the focus of one test and the CI check.
package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTestName(t *testing.T) {
	tests := []struct {
		name     string
		caseName string
		want     string
		wantOK   bool
	}{
		{
			name:     "labels repeated in the text are dropped",
			caseName: "[It] [sig-apps] Deployment should run [Conformance] [sig-apps, Conformance]",
			want:     "[sig-apps] Deployment should run [Conformance]",
			wantOK:   true,
		},
		{
			name:     "a trailing bracket that is not a label list stays",
			caseName: "[It] [sig-node] Pods should be updated [NodeConformance]",
			want:     "[sig-node] Pods should be updated [NodeConformance]",
			wantOK:   true,
		},
		{
			name:     "labels not in the text keep the list",
			caseName: "[It] a test [slow]",
			want:     "a test [slow]",
			wantOK:   true,
		},
		{name: "suite node", caseName: "[SynchronizedBeforeSuite]", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := testName(tt.caseName)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("testName(%q) = %q, %v; want %q, %v", tt.caseName, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

const (
	testA = "[sig-api-machinery] A works [Conformance]"
	testB = "[sig-api-machinery] B works [Serial] [Conformance]"
)

// junitCaseXML is one <testcase> as Ginkgo writes it.
func junitCaseXML(name, status, inner string) string {
	return `<testcase name="` + name + `" classname="Kubernetes e2e suite" status="` + status + `" time="1.5">` + inner + `</testcase>`
}

func junitXML(cases ...string) string {
	return `<?xml version="1.0" encoding="UTF-8"?><testsuites><testsuite name="Kubernetes e2e suite">` +
		strings.Join(cases, "") + `</testsuite></testsuites>`
}

// writeRun writes the files the script leaves for run n; an empty content
// leaves that file out.
func writeRun(t *testing.T, dir, n, name, xml, exit, log string) {
	t.Helper()
	files := map[string]string{".name": name + "\n", ".xml": xml, ".exit": exit, ".log": log}
	for ext, content := range files {
		if content == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, n+ext), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadRun(t *testing.T) {
	passed := junitXML(junitCaseXML("[BeforeSuite]", "passed", ""), junitCaseXML("[It] "+testA+" [sig-api-machinery, Conformance]", "passed", ""))
	failed := junitXML(junitCaseXML("[It] "+testA+" [sig-api-machinery, Conformance]", "failed",
		`<failure message="&#xA;expected 200, got 404&#xA;more" type="failed">stack</failure>`))
	setup := junitXML(junitCaseXML("[SynchronizedBeforeSuite]", "failed",
		`<failure message="Failed to get kubernetes service ClusterIP: services &#34;kubernetes&#34; not found" type="failed"></failure>`))
	interrupted := junitXML(junitCaseXML("[It] "+testA+" [sig-api-machinery, Conformance]", "interrupted",
		`<error message="interrupted by timeout" type="interrupted"></error>`))
	tests := []struct {
		name string
		xml  string
		exit string
		log  string
		want outcome
	}{
		{name: "passed", xml: passed, exit: "0", want: outcome{Name: testA, Status: "passed", Seconds: 1.5}},
		{name: "failed, first line of the message", xml: failed, exit: "1",
			want: outcome{Name: testA, Status: "failed", Detail: "expected 200, got 404", Seconds: 1.5}},
		{name: "suite setup failed", xml: setup, exit: "1",
			want: outcome{Name: testA, Status: "failed", Detail: `[SynchronizedBeforeSuite] Failed to get kubernetes service ClusterIP: services "kubernetes" not found`}},
		{name: "stopped by the timeout", xml: interrupted, exit: "124",
			want: outcome{Name: testA, Status: "timeout", Detail: "stopped by the per-test timeout: interrupted by timeout"}},
		{name: "killed after the timeout, no report", exit: "137",
			want: outcome{Name: testA, Status: "timeout", Detail: "stopped by the per-test timeout"}},
		{name: "crashed", exit: "1",
			log:  "I1126 18:29:16.643566 3554 e2e.go:109] Starting e2e run\nWill run 1 of 6741 specs\n\t\x1b[38;5;243mk8s.io/kubernetes@v1.33.13/test/e2e/apimachinery/chunking.go:68\n  When you call Fail()\npanic({0x4dd0760?})\n\truntime/panic.go:860\nTest Suite Failed\n",
			want: outcome{Name: testA, Status: "crashed", Detail: "no JUnit report for the test (exit status 1); e2e.test panicked at k8s.io/kubernetes@v1.33.13/test/e2e/apimachinery/chunking.go:68"}},
		{name: "no report", exit: "2", log: "building\nflag provided but not defined: -x\n",
			want: outcome{Name: testA, Status: "error", Detail: "no JUnit report for the test (exit status 2); last log line: flag provided but not defined: -x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeRun(t, dir, "0001", testA, tt.xml, tt.exit, tt.log)
			got, err := readResults(dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string]outcome{testA: tt.want}, got); diff != "" {
				t.Errorf("readResults (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScoreboard(t *testing.T) {
	testC := "[sig-node] C [Conformance]"
	testD := "[sig-node] D [Conformance]"
	selected := []string{testD, testC, testB, testA}
	runs := []run{
		{Label: "as-is", Results: map[string]outcome{
			testA: {Name: testA, Status: "failed", Detail: `wait for service account "default" in namespace "a-12": timed out`},
			testB: {Name: testB, Status: "failed", Detail: `wait for service account "default" in namespace "a-345": timed out`},
			testC: {Name: testC, Status: "skipped", Detail: "skipped - provider"},
		}},
		{Label: "assisted", Results: map[string]outcome{
			testA: {Name: testA, Status: "passed"},
			testB: {Name: testB, Status: "timeout", Detail: "stopped by the per-test timeout"},
		}},
	}
	apart := listedApart{testD: "pulls an image from the internet"}
	rows, cs := scoreboard(selected, runs, apart)
	wantRows := []row{
		{Name: testA, Results: []string{"failed", "passed"}},
		{Name: testB, Results: []string{"failed", "timeout"}, Detail: "stopped by the per-test timeout"},
		{Name: testC, Results: []string{"skipped", "not run"}, Detail: "skipped - provider"},
		{Name: testD, Results: []string{"listed apart", "listed apart"}, Detail: "pulls an image from the internet"},
	}
	if diff := cmp.Diff(wantRows, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	wantCounts := []counts{
		{Selected: 4, Failed: 2, Skipped: 1, ListedApart: 1,
			Common: `wait for service account "default" in namespace "a-N": timed out`, CommonCount: 2},
		{Selected: 4, Passed: 1, Failed: 1, ListedApart: 1, NotRun: 1,
			Common: "stopped by the per-test timeout", CommonCount: 1},
	}
	if diff := cmp.Diff(wantCounts, cs); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}

	var page strings.Builder
	if err := writeMarkdown(&page, pageInfo{Focus: `\[Conformance\]`, Procs: 2, Timeout: "5m", Version: "v1.33.13", Nodes: 3}, runs, rows, cs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| as-is | 4 | 0 | 2 | 1 | 1 | 0 |",
		"| [sig-api-machinery] A works [Conformance] | failed | passed |",
		"| [sig-node] D [Conformance] | pulls an image from the internet |",
	} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %q:\n%s", want, page.String())
		}
	}
}

func TestFocusSelectsOnlyThatTest(t *testing.T) {
	name := "[sig-apps] Deployment should run (and scale) [Conformance]"
	others := []string{
		"[sig-apps] Deployment should run (and scale) [Conformance] again",
		"[sig-apps] Deployment should run xand scalex [Conformance]",
	}
	re := regexp.MustCompile(focusFor(name))
	// Ginkgo matches --focus against "<suite description> <full text>".
	if !re.MatchString("Kubernetes e2e suite " + name) {
		t.Errorf("focus %q does not select %q", re, name)
	}
	for _, o := range others {
		if re.MatchString("Kubernetes e2e suite " + o) {
			t.Errorf("focus %q also selects %q", re, o)
		}
	}
}

func TestWriteRunList(t *testing.T) {
	var b strings.Builder
	if err := writeRunList(&b, []string{testA, testB}, listedApart{testA: "internet"}); err != nil {
		t.Fatal(err)
	}
	want := "1\t" + focusFor(testB) + "\t" + testB + "\n"
	if b.String() != want {
		t.Errorf("run list = %q, want %q", b.String(), want)
	}
}

func TestReadListedApart(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    listedApart
		wantErr bool
	}{
		{
			name:    "reasons apply to the names after them",
			content: "# comment\n\n## pulls images\n" + testA + "\n## reaches the internet\n" + testB + "\n",
			want:    listedApart{testA: "pulls images", testB: "reaches the internet"},
		},
		{name: "a name without a reason", content: testA + "\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "apart.txt")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readListedApart(path)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); !tt.wantErr && diff != "" {
				t.Errorf("listed apart (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckExpected(t *testing.T) {
	results := map[string]outcome{
		testA: {Name: testA, Status: "passed"},
		testB: {Name: testB, Status: "failed", Detail: "got 404"},
	}
	tests := []struct {
		name     string
		want     []string
		wantErr  error
		wantText string
	}{
		{name: "all passed", want: []string{testA}, wantText: "1 of 1 expected passes passed"},
		{name: "one failed", want: []string{testA, testB}, wantErr: errRegression, wantText: "FAILED   " + testB},
		{name: "one not run", want: []string{"[sig-x] gone [Conformance]"}, wantErr: errRegression, wantText: "NOT RUN  [sig-x] gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			err := checkExpected(&b, tt.want, results)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(b.String(), tt.wantText) {
				t.Errorf("output %q lacks %q", b.String(), tt.wantText)
			}
		})
	}
}

func TestReadRunsJoinsDirectories(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	pass := junitXML(junitCaseXML("[It] "+testA+" [sig-api-machinery, Conformance]", "passed", ""))
	fail := junitXML(junitCaseXML("[It] "+testA+" [sig-api-machinery, Conformance]", "failed", `<failure message="no" type="failed"></failure>`))
	writeRun(t, first, "0001", testA, pass, "0", "")
	writeRun(t, second, "0001", testA, fail, "1", "")
	writeRun(t, second, "0002", testB, "", "124", "")
	for dir, wall := range map[string]string{first: "0h07m49s", second: "0h35m10s"} {
		if err := os.WriteFile(filepath.Join(dir, "wall"), []byte(wall+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := readRuns([]string{"assisted=" + first + "," + second})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("got %d runs, want 1", len(runs))
	}
	got := runs[0]
	if got.Label != "assisted" || got.Wall != "0h07m49s + 0h35m10s" {
		t.Errorf("label, wall = %q, %q; want assisted, 0h07m49s + 0h35m10s", got.Label, got.Wall)
	}
	if s := got.Results[testA].Status; s != "passed" {
		t.Errorf("%s: got %s, want passed (the first directory wins)", testA, s)
	}
	if s := got.Results[testB].Status; s != "timeout" {
		t.Errorf("%s: got %s, want timeout (only in the second directory)", testB, s)
	}
}
