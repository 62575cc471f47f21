// Tests of the awk applet: the field-printing programs it runs and its
// refusal of any other.

package simruntime_test

import (
	"strings"
	"testing"

	"github.com/kplane/kplane/nodeagent/simruntime"
)

func TestAwkPrintsFields(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		code   int32
		want   []string // lines of the log, in order
	}{
		{name: "wc piped to awk, as Kubernetes' restart test", code: 0,
			script: `f=/tmp/count; count=$(echo hello >> $f; wc -l $f | awk {'print $1'}); echo "count=$count"`,
			want:   []string{"stdout F count=1"}},
		{name: "fields, NF, NR, $NF, literals", code: 0,
			script: `printf 'a b  c\nd e\n' | awk '{ print NR": "$2, $NF, NF }'`,
			want:   []string{"stdout F 1: b c 3", "stdout F 2: e e 2"}},
		{name: "a separator, a file, the whole line", code: 0,
			script: `printf 'x:y:z\n' > /tmp/f; awk -F: '{print $3 $1}' /tmp/f; awk '{print}' /tmp/f; awk '{print $0}' /tmp/f; awk '{print $9}' /tmp/f`,
			want:   []string{"stdout F zx", "stdout F x:y:z", "stdout F x:y:z", "stdout F "}},
		{name: "any other program is refused", code: 2,
			script: `echo 1 | awk 'BEGIN { x = 1 } { print x }'`,
			want:   []string{"stderr F awk: only `{print ...}` programs are supported here"}},
		{name: "a missing file", code: 1,
			script: `awk '{print $1}' /nope`,
			want:   []string{"stderr F awk: /nope: No such file or directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, simruntime.Config{})
			id := runScripted(t, e, "pod", []string{"sh", "-c", tc.script}, nil, nil)
			st := waitExited(t, e, id)
			if st.GetExitCode() != tc.code {
				t.Errorf("exit code: got %d, want %d", st.GetExitCode(), tc.code)
			}
			log := logOf(t, st)
			var lines []string
			for _, l := range strings.Split(strings.TrimSuffix(log, "\n"), "\n") {
				if _, rest, ok := strings.Cut(l, " "); ok {
					lines = append(lines, rest)
				}
			}
			if len(lines) != len(tc.want) {
				t.Fatalf("log: got %q, want lines starting %q", lines, tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) || (!strings.HasPrefix(w, "stderr") && lines[i] != w) {
					t.Errorf("log line %d: got %q, want %q", i, lines[i], w)
				}
			}
		})
	}
}
