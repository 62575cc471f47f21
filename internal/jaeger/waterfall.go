// This file prints a trace as a terminal waterfall: the "where the seconds
// go" breakdown of one object's journey through the control plane.

package jaeger

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Row is one line of a waterfall.
type Row struct {
	Span
	Depth int
	// Offset is the span's start relative to the trace's first span.
	Offset time.Duration
	// Self is the span's time not covered by its children: the time spent
	// in that hop itself.
	Self    time.Duration
	Slowest bool
}

// Waterfall orders a trace's spans depth-first (children by start time),
// computes each one's offset and self time, and marks the span with the
// largest self time as the slowest. It also returns the trace's extent:
// from the first start to the last end.
func Waterfall(t *Trace) ([]Row, time.Duration) {
	if len(t.Spans) == 0 {
		return nil, 0
	}
	start, end := t.Spans[0].Start, t.Spans[0].Start
	ids := map[string]bool{}
	for _, s := range t.Spans {
		ids[s.SpanID] = true
		if s.Start.Before(start) {
			start = s.Start
		}
		if e := s.Start.Add(s.Duration); e.After(end) {
			end = e
		}
	}
	children := map[string][]Span{}
	var roots []Span
	for _, s := range t.Spans {
		if s.ParentID == "" || !ids[s.ParentID] {
			roots = append(roots, s) // a root, or a parent Jaeger lacks
			continue
		}
		children[s.ParentID] = append(children[s.ParentID], s)
	}
	var rows []Row
	var walk func(s Span, depth int)
	walk = func(s Span, depth int) {
		kids := children[s.SpanID]
		rows = append(rows, Row{Span: s, Depth: depth, Offset: s.Start.Sub(start), Self: selfTime(s, kids)})
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	slowest := -1
	for i, r := range rows {
		if slowest < 0 || r.Self > rows[slowest].Self {
			slowest = i
		}
	}
	rows[slowest].Slowest = true
	return rows, end.Sub(start)
}

// selfTime is s's duration minus the union of its children's intervals
// (clipped to s).
func selfTime(s Span, kids []Span) time.Duration {
	type iv struct{ a, b time.Time }
	end := s.Start.Add(s.Duration)
	var ivs []iv
	for _, k := range kids {
		a, b := k.Start, k.Start.Add(k.Duration)
		if a.Before(s.Start) {
			a = s.Start
		}
		if b.After(end) {
			b = end
		}
		if b.After(a) {
			ivs = append(ivs, iv{a, b})
		}
	}
	slices.SortFunc(ivs, func(x, y iv) int { return x.a.Compare(y.a) })
	covered := time.Duration(0)
	var cur iv
	for i, v := range ivs {
		switch {
		case i == 0:
			cur = v
		case !v.a.After(cur.b):
			if v.b.After(cur.b) {
				cur.b = v.b
			}
		default:
			covered += cur.b.Sub(cur.a)
			cur = v
		}
	}
	if len(ivs) > 0 {
		covered += cur.b.Sub(cur.a)
	}
	return s.Duration - covered
}

// barWidth is the width of the timeline column.
const barWidth = 40

// PrintWaterfall writes the waterfall of t to w: per span its start offset,
// duration, service, the hop indented under its parent, and a timeline bar;
// the slowest hop (largest self time) is marked.
func PrintWaterfall(w io.Writer, t *Trace) error {
	rows, total := Waterfall(t)
	services := map[string]bool{}
	for _, r := range rows {
		services[r.Service] = true
	}
	fmt.Fprintf(w, "trace %s: %d spans from %d services over %s\n\n", t.ID, len(rows), len(services), fmtDur(total))
	fmt.Fprintf(w, "%10s %10s  %-12s %-*s %s\n", "START", "DURATION", "SERVICE", barWidth, "TIMELINE", "HOP")
	for _, r := range rows {
		bar := []byte(strings.Repeat(" ", barWidth))
		if total > 0 {
			a := int(int64(r.Offset) * barWidth / int64(total))
			b := int(int64(r.Offset+r.Duration) * barWidth / int64(total))
			a = min(a, barWidth-1)
			b = min(max(b, a+1), barWidth)
			for i := a; i < b; i++ {
				bar[i] = '='
			}
		}
		mark := ""
		if r.Slowest {
			mark = fmt.Sprintf("   <== slowest (%s in this hop itself)", fmtDur(r.Self))
		}
		fmt.Fprintf(w, "%10s %10s  %-12s %s %s%s%s\n", fmtDur(r.Offset), fmtDur(r.Duration), r.Service, bar,
			strings.Repeat("  ", min(r.Depth, 16)), r.Name, mark)
	}
	return nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3fs", d.Seconds())
	default:
		return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
	}
}
