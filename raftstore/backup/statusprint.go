// This file holds Status.Print: a backup's status in etcdutl's output
// formats (`kplane store snapshot status`).

package backup

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/dustin/go-humanize"
)

// Print writes st as `etcdutl snapshot status -w format` does: simple,
// table or json.
func (st Status) Print(w io.Writer, format string) error {
	hash := fmt.Sprintf("%x", st.Hash)
	rev := fmt.Sprint(st.Revision)
	keys := fmt.Sprint(st.TotalKey)
	size := humanize.Bytes(uint64(st.TotalSize))
	switch format {
	case "simple":
		_, err := fmt.Fprintf(w, "%s, %s, %s, %s\n", hash, rev, keys, size)
		return err
	case "json":
		return json.NewEncoder(w).Encode(st)
	case "table":
		_, err := io.WriteString(w, formatTable(
			[]string{"HASH", "REVISION", "TOTAL KEYS", "TOTAL SIZE"},
			[]string{hash, rev, keys, size},
		))
		return err
	}
	return fmt.Errorf("--write-out %q: want simple, table or json", format)
}

// formatTable draws one header row and one value row in etcdctl's table
// style: headers centred, values left-aligned. Written here rather than
// with a table library for two rows.
func formatTable(header, row []string) string {
	widths := make([]int, len(header))
	for i := range header {
		widths[i] = max(len(header[i]), len(row[i]))
	}
	var b strings.Builder
	rule := func() {
		for _, w := range widths {
			b.WriteString("+" + strings.Repeat("-", w+2))
		}
		b.WriteString("+\n")
	}
	cells := func(vals []string, centre bool) {
		for i, v := range vals {
			pad := widths[i] - len(v)
			left := 0
			if centre {
				left = pad / 2
			}
			b.WriteString("| " + strings.Repeat(" ", left) + v + strings.Repeat(" ", pad-left) + " ")
		}
		b.WriteString("|\n")
	}
	rule()
	cells(header, true)
	rule()
	cells(row, false)
	rule()
	return b.String()
}
