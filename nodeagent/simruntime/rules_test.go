// This file holds the tests of reading simulation rules from an image name,
// and a fuzz test of container rules.

package simruntime

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestParseImage(t *testing.T) {
	tests := []struct {
		name         string
		ref          string
		wantNamed    string
		wantNotFound bool
		wantLatency  string
	}{
		{name: "short name", ref: "nginx", wantNamed: "docker.io/library/nginx:latest"},
		{name: "registry and tag", ref: "example.com/team/web:1.2", wantNamed: "example.com/team/web:1.2"},
		{name: "notfound in path", ref: "example.com/notfound/web:1", wantNamed: "example.com/notfound/web:1", wantNotFound: true},
		{name: "notfound in registry only", ref: "notfound.example.com/web:1", wantNamed: "notfound.example.com/web:1"},
		{name: "latency tag", ref: "web:v1-pull-3s", wantNamed: "docker.io/library/web:v1-pull-3s", wantLatency: "3s"},
		{name: "latency tag alone", ref: "web:pull-250ms", wantNamed: "docker.io/library/web:pull-250ms", wantLatency: "250ms"},
		{name: "pull in the middle of a tag is not a rule", ref: "web:pull-3s-v1", wantNamed: "docker.io/library/web:pull-3s-v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			named, rules, err := parseImage(tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			if named.String() != tt.wantNamed {
				t.Errorf("name: got %q, want %q", named.String(), tt.wantNamed)
			}
			if rules.notFound != tt.wantNotFound {
				t.Errorf("not found: got %v, want %v", rules.notFound, tt.wantNotFound)
			}
			got := ""
			if rules.hasLatency {
				got = rules.latency.String()
			}
			if got != tt.wantLatency {
				t.Errorf("latency: got %q, want %q", got, tt.wantLatency)
			}
		})
	}
}

func FuzzContainerRules(f *testing.F) {
	f.Add(EnvRunSeconds, "1.5")
	f.Add(EnvExitCode, "3")
	f.Add(EnvLog, "a\nb\n")
	f.Add(EnvIgnoreSIGTERM, "true")
	f.Fuzz(func(t *testing.T, key, value string) {
		r, _, err := parseContainerRules([]*runtimeapi.KeyValue{{Key: key, Value: value}})
		if err != nil {
			return
		}
		if r.runFor < 0 || r.readyAfter < 0 || r.exitCode < 0 || r.exitCode > 255 || r.execExitCode < 0 || r.execExitCode > 255 {
			t.Fatalf("accepted %s=%q as out-of-range rules %+v", key, value, r)
		}
	})
}
