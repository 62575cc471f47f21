// This file holds the expansion of $(VAR) references in a container's env
// values, command and args, by Kubernetes' rules for them.

package nodeagent

import (
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// expandRefs replaces each $(NAME) in s whose NAME lookup knows by its
// value, as the kubelet does: $$ is a literal $ (so $$(NAME) stays
// "$(NAME)"), an unknown $(NAME) and an unclosed $( are left as written (what follows an unclosed $(
// is still expanded),
// and a $ before any other character is kept.
func expandRefs(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// envLookup finds a variable in env (the last of a name wins).
func envLookup(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

// expandAll expands $(NAME) references in a container's command or args
// with its final environment.
func expandAll(args []string, env []*runtimeapi.KeyValue) []string {
	if len(args) == 0 {
		return args
	}
	defined := make(map[string]string, len(env))
	for _, kv := range env {
		defined[kv.GetKey()] = kv.GetValue()
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expandRefs(a, envLookup(defined))
	}
	return out
}
