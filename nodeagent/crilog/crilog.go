// Package crilog reads and writes container log files in the CRI log format,
// the format the kubelet and every CRI runtime share:
//
//	2016-10-06T00:17:09.669794202Z stdout F hello world
//
// Each line holds an RFC 3339 timestamp with nanoseconds, the stream
// ("stdout" or "stderr"), a tag ("F" for a full line, "P" for a partial one
// that continues on the next entry of the same stream) and the content.
// The built-in runtime writes these files; the node agent reads them to serve
// pods/log (tail, follow, previous).
package crilog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"
)

// Stream names as they appear in a log line.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Tags as they appear in a log line.
const (
	TagFull    = "F"
	TagPartial = "P"
)

// MaxLineContent is the largest content one log line carries; longer output
// is split into partial ("P") lines followed by a final ("F") one, as
// containerd does with its 16 KiB default.
const MaxLineContent = 16 * 1024

// ErrMalformed is returned (wrapped) for a line that is not in the CRI log
// format.
var ErrMalformed = errors.New("crilog: malformed log line")

// Entry is one parsed log line.
type Entry struct {
	Time    time.Time
	Stream  string
	Partial bool
	// Content is the line's text without the trailing newline.
	Content []byte
}

// Parse parses one log line (with or without its trailing newline). The
// returned Content aliases line.
func Parse(line []byte) (Entry, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	ts, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return Entry{}, fmt.Errorf("no timestamp delimiter in %q: %w", clip(line), ErrMalformed)
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return Entry{}, fmt.Errorf("timestamp %q: %w", ts, ErrMalformed)
	}
	stream, rest, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return Entry{}, fmt.Errorf("no stream delimiter in %q: %w", clip(line), ErrMalformed)
	}
	s := string(stream)
	if s != Stdout && s != Stderr {
		return Entry{}, fmt.Errorf("unknown stream %q: %w", s, ErrMalformed)
	}
	tag, content, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		// A line with an empty content may lack the last space in
		// hand-written files; the tag must still be there.
		tag, content = rest, nil
	}
	var partial bool
	switch string(tag) {
	case TagFull:
	case TagPartial:
		partial = true
	default:
		return Entry{}, fmt.Errorf("unknown tag %q: %w", tag, ErrMalformed)
	}
	return Entry{Time: t, Stream: s, Partial: partial, Content: content}, nil
}

func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// Format appends the CRI log lines for one line of output (without its
// newline) to dst and returns the extended buffer. Content longer than
// MaxLineContent becomes partial lines followed by a full one.
func Format(dst []byte, t time.Time, stream string, content []byte) []byte {
	return format(dst, t, stream, content, TagFull)
}

// FormatPartial is Format for output that ends without a newline (the
// last output of a stream that closed mid-line): every line it appends is
// partial, as containerd writes it, so that a reader shows the content
// without a newline it never had.
func FormatPartial(dst []byte, t time.Time, stream string, content []byte) []byte {
	return format(dst, t, stream, content, TagPartial)
}

// format appends content's lines, the last one tagged last.
func format(dst []byte, t time.Time, stream string, content []byte, last string) []byte {
	ts := t.UTC().Format(time.RFC3339Nano)
	for {
		tag := last
		chunk := content
		if len(chunk) > MaxLineContent {
			chunk, tag = chunk[:MaxLineContent], TagPartial
		}
		dst = append(dst, ts...)
		dst = append(dst, ' ')
		dst = append(dst, stream...)
		dst = append(dst, ' ')
		dst = append(dst, tag...)
		dst = append(dst, ' ')
		dst = append(dst, chunk...)
		dst = append(dst, '\n')
		content = content[len(chunk):]
		if len(content) == 0 {
			return dst
		}
	}
}

// WriteLines writes each line of output to w in the CRI log format, all
// stamped with t.
func WriteLines(w io.Writer, t time.Time, stream string, lines []string) error {
	var buf []byte
	for _, l := range lines {
		buf = Format(buf, t, stream, []byte(l))
	}
	_, err := w.Write(buf)
	return err
}
