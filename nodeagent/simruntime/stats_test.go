// This file holds the tests of the declared usage rules: the quantities
// read from a container's environment, and a refusal of a bad one.
package simruntime

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestDeclaredUsage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cpu, mem  string
		wantNano  uint64
		wantBytes uint64
		wantErr   bool
	}{
		{name: "millicores and Mi", cpu: "250m", mem: "64Mi", wantNano: 250_000_000, wantBytes: 64 << 20},
		{name: "whole and decimal cores", cpu: "1.5", mem: "1G", wantNano: 1_500_000_000, wantBytes: 1_000_000_000},
		{name: "not a quantity", cpu: "lots", wantErr: true},
		{name: "negative", mem: "-1Mi", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var envs []*runtimeapi.KeyValue
			if tc.cpu != "" {
				envs = append(envs, &runtimeapi.KeyValue{Key: EnvCPUUsage, Value: tc.cpu})
			}
			if tc.mem != "" {
				envs = append(envs, &runtimeapi.KeyValue{Key: EnvMemoryUsage, Value: tc.mem})
			}
			r, _, err := parseContainerRules(envs)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got rules %+v, want an error", r)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.cpuNanoCores != tc.wantNano || r.memoryBytes != tc.wantBytes {
				t.Errorf("got %d nanocores, %d bytes; want %d, %d", r.cpuNanoCores, r.memoryBytes, tc.wantNano, tc.wantBytes)
			}
		})
	}
}
