// This file tests Parse: Kubernetes' static token CSV, and what it refuses.

package tokenfile

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Tokens
		wantErr bool
	}{
		{name: "groups quoted", in: `a,u1,1,"g1,g2"` + "\n",
			want: Tokens{"a": {Name: "u1", UID: "1", Groups: []string{"g1", "g2"}}}},
		{name: "no groups", in: "a,u1,1\n", want: Tokens{"a": {Name: "u1", UID: "1"}}},
		{name: "comment and blank lines", in: "# x\n\na,u1,1\n", want: Tokens{"a": {Name: "u1", UID: "1"}}},
		{name: "too few fields", in: "a,u1\n", wantErr: true},
		{name: "empty token", in: ",u1,1\n", wantErr: true},
		{name: "duplicate token", in: "a,u1,1\na,u2,2\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("got error %v, want error %v", err, tt.wantErr)
			}
			if err == nil {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("tokens mismatch (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// FuzzParse: any input either parses into well-formed users or is
// refused; it never panics.
func FuzzParse(f *testing.F) {
	f.Add("a,u1,1,\"g1,g2\"\n")
	f.Add("# c\nb,u2,2\n")
	f.Add("a,u1\n")
	f.Add("\"unterminated,u,1\n")
	f.Fuzz(func(t *testing.T, in string) {
		tokens, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		for tok, u := range tokens {
			if tok == "" || u.Name == "" {
				t.Fatalf("accepted an empty token or user: %q → %+v", tok, u)
			}
		}
	})
}
