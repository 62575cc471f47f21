// Tests of $(VAR) expansion in env values, command and args.

package nodeagent

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestExpandRefs(t *testing.T) {
	env := map[string]string{"FOO": "foo-value", "BAR": "bar-value", "EMPTY": ""}
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"$(FOO)", "foo-value"},
		{"$(FOO);;$(BAR)", "foo-value;;bar-value"},
		{"$(EMPTY)x", "x"},
		{"$(MISSING)", "$(MISSING)"},
		{"$$(FOO)", "$(FOO)"},
		{"$$$(FOO)", "$foo-value"},
		{"cost: $5", "cost: $5"},
		{"trailing $", "trailing $"},
		{"$(FOO", "$(FOO"},
		{"$(unclosed $(FOO)", "$(unclosed $(FOO)"}, // the name runs to the first )
		{"$(", "$("},
		{"$()", "$()"},
	}
	for _, tt := range tests {
		if got := expandRefs(tt.in, envLookup(env)); got != tt.want {
			t.Errorf("expandRefs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestExpandAllUsesTheFinalEnvironment(t *testing.T) {
	env := []*runtimeapi.KeyValue{{Key: "A", Value: "1"}, {Key: "B", Value: "2"}, {Key: "A", Value: "3"}}
	got := expandAll([]string{"echo", "$(A)$(B)", "$(C)"}, env)
	if want := []string{"echo", "32", "$(C)"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("got %q, want %q", got, want)
	}
}
