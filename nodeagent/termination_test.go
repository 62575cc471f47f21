// Tests of termination messages read from an exited container's status:
// the file, the log fallback, their bounds, and the pod's share.

package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/nodeagent/crilog"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

func TestAddTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o666); err != nil {
			t.Fatal(err)
		}
		return p
	}
	writeLog := func(name string, lines []string, partialLast bool) string {
		t.Helper()
		var b []byte
		for i, l := range lines {
			if partialLast && i == len(lines)-1 {
				b = crilog.FormatPartial(b, time.Unix(0, 0), crilog.Stdout, []byte(l))
				continue
			}
			b = crilog.Format(b, time.Unix(0, 0), crilog.Stderr, []byte(l))
		}
		return write(name, string(b))
	}
	var hundred []string
	for i := range 100 {
		hundred = append(hundred, fmt.Sprintf("line %d", i))
	}
	long := strings.Repeat("x", 3000)
	big := strings.Repeat("a", 100) + strings.Repeat("b", maxTerminationMessage)

	for _, tc := range []struct {
		name      string
		file      string // content of the termination message file; "-" for no file
		log       string // log path
		policy    string
		exitCode  int32
		reason    string
		criMsg    string
		at        string // the termination message path (default /dev/termination-log)
		mountedAt string // where the file is mounted (default: at)
		want      string
	}{
		{name: "file", file: "DONE", log: writeLog("l1", []string{"log"}, false), policy: "File", want: "DONE"},
		{name: "file of a failed container", file: "why", log: writeLog("l2", []string{"log"}, false), policy: "File", exitCode: 1, want: "why"},
		{name: "empty file, policy File", file: "", log: writeLog("l3", []string{"log"}, false), policy: "File", exitCode: 1, want: ""},
		{name: "fallback: failed, empty file", file: "", log: writeLog("l4", []string{"DONE"}, true), policy: policyFallbackToLogsOnError, exitCode: 1, want: "DONE"},
		{name: "fallback: failed, no file", file: "-", log: writeLog("l5", []string{"a", "b"}, false), policy: policyFallbackToLogsOnError, exitCode: 2, want: "a\nb\n"},
		{name: "fallback: succeeded", file: "", log: writeLog("l6", []string{"DONE"}, true), policy: policyFallbackToLogsOnError, want: ""},
		{name: "fallback: the file wins", file: "OK", log: writeLog("l7", []string{"DONE"}, false), policy: policyFallbackToLogsOnError, exitCode: 1, want: "OK"},
		{name: "fallback: could not run", file: "", log: writeLog("l8", []string{"DONE"}, false), policy: policyFallbackToLogsOnError, exitCode: 128, reason: "ContainerCannotRun", want: ""},
		{name: "fallback: the last 80 lines", file: "", log: writeLog("l9", hundred, false), policy: policyFallbackToLogsOnError, exitCode: 1,
			want: strings.Join(hundred[20:], "\n") + "\n"},
		{name: "fallback: the last 2 KiB", file: "", log: writeLog("l10", []string{long}, false), policy: policyFallbackToLogsOnError, exitCode: 1,
			want: long[len(long)-maxTerminationLogBytes+1:] + "\n"},
		{name: "fallback: no log", file: "", log: filepath.Join(dir, "none.log"), policy: policyFallbackToLogsOnError, exitCode: 1,
			want: "Error on reading termination message from logs: open container log: open " + filepath.Join(dir, "none.log") + ": no such file or directory"},
		{name: "the last 4 KiB of the file", file: big, policy: "File", want: big[100:]},
		{name: "after the runtime's message", file: "DONE", policy: "File", exitCode: 137, criMsg: "OOMKilled", want: "OOMKilled: DONE"},
		{name: "a relative path", file: "rel", policy: "File", at: "dev/termination-log", mountedAt: "/dev/termination-log", want: "rel"},
		{name: "not mounted there", file: "DONE", policy: "File", mountedAt: "/elsewhere", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := tc.at
			if at == "" {
				at = "/dev/termination-log"
			}
			mountedAt := tc.mountedAt
			if mountedAt == "" {
				mountedAt = at
			}
			host := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if tc.file != "-" {
				write(filepath.Base(host), tc.file)
			}
			st := &runtimeapi.ContainerStatus{
				State:       runtimeapi.ContainerState_CONTAINER_EXITED,
				ExitCode:    tc.exitCode,
				Reason:      tc.reason,
				Message:     tc.criMsg,
				Annotations: map[string]string{annotationTerminationMessagePath: at, annotationTerminationMessagePolicy: tc.policy},
				Mounts:      []*runtimeapi.Mount{{ContainerPath: mountedAt, HostPath: host}},
			}
			addTerminationMessage(context.Background(), st, tc.log)
			if st.GetMessage() != tc.want {
				t.Errorf("message: got %q, want %q", st.GetMessage(), tc.want)
			}
		})
	}

	t.Run("a running container has none", func(t *testing.T) {
		st := &runtimeapi.ContainerStatus{
			State:       runtimeapi.ContainerState_CONTAINER_RUNNING,
			Annotations: map[string]string{annotationTerminationMessagePath: "/dev/termination-log"},
			Mounts:      []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: write("running", "early")}},
		}
		addTerminationMessage(context.Background(), st, "")
		if st.GetMessage() != "" {
			t.Errorf("message: got %q, want none", st.GetMessage())
		}
	})
}

func TestBoundTerminationMessages(t *testing.T) {
	msg := strings.Repeat("m", 5000)
	term := func(m string) *corev1.ContainerState {
		return &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: m}}
	}
	for _, tc := range []struct {
		name       string
		containers int
		in         string
		want       string
	}{
		{name: "one container keeps 4 KiB (12 KiB is its share)", containers: 1, in: msg, want: msg},
		{name: "four containers share 12 KiB", containers: 4, in: msg, want: msg[:3072]},
		{name: "invalid UTF-8 shows as U+FFFD", containers: 1, in: "a\xffb\xe2\x82", want: "a\uFFFDb\uFFFD\uFFFD"},
		{name: "a rune cut in two", containers: 4, in: strings.Repeat("a", 3071) + "é", want: strings.Repeat("a", 3071) + "\uFFFD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &corev1.PodStatus{
				ContainerStatuses:     []*corev1.ContainerStatus{{State: term(tc.in), LastTerminationState: term(tc.in)}},
				InitContainerStatuses: []*corev1.ContainerStatus{{State: term(tc.in)}},
			}
			boundTerminationMessages(st, tc.containers)
			for _, got := range []string{
				st.GetContainerStatuses()[0].GetState().GetTerminated().GetMessage(),
				st.GetContainerStatuses()[0].GetLastTerminationState().GetTerminated().GetMessage(),
				st.GetInitContainerStatuses()[0].GetState().GetTerminated().GetMessage(),
			} {
				if got != tc.want {
					t.Errorf("got %q (%d bytes), want %q (%d bytes)", got, len(got), tc.want, len(tc.want))
				}
			}
		})
	}
}
