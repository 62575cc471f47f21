// This file holds the reader: tail, follow and stream selection over one
// CRI log file, writing the containers' output as kubectl logs shows it.

package crilog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// ReadOptions selects what Read copies out of a log file.
type ReadOptions struct {
	// Tail, when > 0, starts at the last Tail lines of the file (as the
	// kubelet counts them: lines of the file, so a long output line split
	// into partial entries counts once per entry). 0 or less means from the
	// beginning.
	Tail int
	// Follow keeps reading as the file grows until ctx is done.
	Follow bool
	// Since skips entries stamped before it (zero: keep all).
	Since time.Time
	// Stream keeps only Stdout or Stderr; empty keeps both.
	Stream string
	// Timestamps prefixes every output line with its RFC 3339 timestamp.
	Timestamps bool
	// PollInterval is how often a follower checks the file for new data
	// (default 100ms).
	PollInterval time.Duration
}

// Read copies the containers' output recorded in the log file at path to w:
// the content of each entry, with a newline after every full line. Without
// Follow it returns at the end of the file; with Follow it returns when ctx
// is done (returning nil) or on an error. A malformed line is skipped, like
// the kubelet does, rather than ending the stream. If the file is replaced
// (log rotation, ReopenContainerLog) while following, reading continues at
// the start of the new file.
func Read(ctx context.Context, path string, opts ReadOptions, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open container log: %w", err)
	}
	defer func() { f.Close() }()
	if opts.Tail > 0 {
		off, err := tailOffset(f, opts.Tail)
		if err != nil {
			return fmt.Errorf("find last %d lines: %w", opts.Tail, err)
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return fmt.Errorf("seek container log: %w", err)
		}
	}
	poll := opts.PollInterval
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	r := bufio.NewReader(f)
	var pending []byte // a line written only partly so far
	var out []byte
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			pending = append(pending, line...)
			continue
		}
		if err == nil {
			if len(pending) > 0 {
				line = append(pending, line...)
				pending = pending[:0]
			}
			out = appendEntry(out[:0], line, opts)
			if len(out) > 0 {
				if _, werr := w.Write(out); werr != nil {
					return fmt.Errorf("write log output: %w", werr)
				}
			}
			continue
		}
		if !errors.Is(err, io.EOF) {
			return fmt.Errorf("read container log: %w", err)
		}
		pending = append(pending, line...)
		if !opts.Follow {
			// A last line without its newline is still being written;
			// the kubelet does not show it either.
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
		if nf, replaced := reopenIfReplaced(f, path); replaced {
			f.Close()
			f = nf
			r.Reset(f)
			pending = pending[:0]
		}
	}
}

// appendEntry appends what one log line shows to out, or nothing when the
// options filter it out or it is malformed.
func appendEntry(out, line []byte, opts ReadOptions) []byte {
	e, err := Parse(line)
	if err != nil {
		return out
	}
	if opts.Stream != "" && e.Stream != opts.Stream {
		return out
	}
	if !opts.Since.IsZero() && e.Time.Before(opts.Since) {
		return out
	}
	if opts.Timestamps {
		out = append(out, e.Time.UTC().Format(time.RFC3339Nano)...)
		out = append(out, ' ')
	}
	out = append(out, e.Content...)
	if !e.Partial {
		out = append(out, '\n')
	}
	return out
}

// reopenIfReplaced opens path again when it no longer names the file f has
// open (rotated or recreated). It returns false when f is still current or
// the new file cannot be opened yet.
func reopenIfReplaced(f *os.File, path string) (*os.File, bool) {
	cur, err := f.Stat()
	if err != nil {
		return nil, false
	}
	now, err := os.Stat(path)
	if err != nil || os.SameFile(cur, now) {
		return nil, false
	}
	nf, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	return nf, true
}

// tailOffset returns the offset at which the last n lines of f begin,
// scanning backwards in chunks so a long file is not read whole.
func tailOffset(f *os.File, n int) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := st.Size()
	const chunk = 16 * 1024
	buf := make([]byte, chunk)
	seen := 0
	first := true
	for end > 0 {
		start := max(end-chunk, 0)
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if first {
			// The file's final newline ends the last line; it does not
			// begin another one.
			b = bytes.TrimSuffix(b, []byte("\n"))
			first = false
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != '\n' {
				continue
			}
			seen++
			if seen == n {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}
