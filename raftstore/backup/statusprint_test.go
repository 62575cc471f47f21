// This file holds the tests of Status.Print, `kplane store snapshot
// status`'s output formats.

package backup

import (
	"bytes"
	"testing"
)

func TestStatusPrint(t *testing.T) {
	st := Status{Hash: 0xb2720f5e, Revision: 52, TotalKey: 51, TotalSize: 1568}
	tests := []struct {
		name    string
		format  string
		want    string
		wantErr bool
	}{
		{name: "simple", format: "simple", want: "b2720f5e, 52, 51, 1.6 kB\n"},
		{name: "json", format: "json", want: `{"hash":2993819486,"revision":52,"totalKey":51,"totalSize":1568}` + "\n"},
		{name: "table", format: "table", want: "" +
			"+----------+----------+------------+------------+\n" +
			"|   HASH   | REVISION | TOTAL KEYS | TOTAL SIZE |\n" +
			"+----------+----------+------------+------------+\n" +
			"| b2720f5e | 52       | 51         | 1.6 kB     |\n" +
			"+----------+----------+------------+------------+\n"},
		{name: "unknown format", format: "yaml", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := st.Print(&buf, tt.format)
			if (err != nil) != tt.wantErr {
				t.Fatalf("got error %v, want error: %v", err, tt.wantErr)
			}
			if got := buf.String(); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
