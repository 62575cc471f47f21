// This file holds the test of Options.Upstreams (`kplane dns --forward`): none, a resolv.conf
// or a list of addresses.

package clusterdns

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParseForward(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte("nameserver 192.0.2.1\nnameserver 2001:db8::1\nsearch example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		value   string
		want    []string
		wantErr bool
	}{
		{name: "none", value: "none"},
		{name: "empty", value: ""},
		{name: "resolv.conf", value: conf, want: []string{"192.0.2.1:53", "[2001:db8::1]:53"}},
		{name: "list", value: "192.0.2.7:53,192.0.2.8:5353", want: []string{"192.0.2.7:53", "192.0.2.8:5353"}},
		{name: "missing file", value: filepath.Join(t.TempDir(), "missing"), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := (&Options{Forward: tc.value}).Upstreams()
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %t", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
