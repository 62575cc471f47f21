// This file holds the tests of the CRI log format: parsing, splitting of
// long lines, reading, tailing and following a log file.

package crilog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/testutil"
)

var t0 = time.Date(2016, 10, 6, 0, 17, 9, 669794202, time.UTC)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    Entry
		wantErr bool
	}{
		{name: "full stdout line", line: "2016-10-06T00:17:09.669794202Z stdout F hello world\n",
			want: Entry{Time: t0, Stream: Stdout, Content: []byte("hello world")}},
		{name: "partial stderr line", line: "2016-10-06T00:17:09.669794202Z stderr P part",
			want: Entry{Time: t0, Stream: Stderr, Partial: true, Content: []byte("part")}},
		{name: "empty content", line: "2016-10-06T00:17:09.669794202Z stdout F \n",
			want: Entry{Time: t0, Stream: Stdout, Content: []byte{}}},
		{name: "content keeps spaces", line: "2016-10-06T00:17:09.669794202Z stdout F  a  b ",
			want: Entry{Time: t0, Stream: Stdout, Content: []byte(" a  b ")}},
		{name: "bad timestamp", line: "yesterday stdout F x", wantErr: true},
		{name: "bad stream", line: "2016-10-06T00:17:09Z stdin F x", wantErr: true},
		{name: "bad tag", line: "2016-10-06T00:17:09Z stdout X x", wantErr: true},
		{name: "no fields", line: "garbage", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.line))
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("got %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.Time.Equal(tt.want.Time) || got.Stream != tt.want.Stream || got.Partial != tt.want.Partial || !bytes.Equal(got.Content, tt.want.Content) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestFormatSplitsLongLines(t *testing.T) {
	long := strings.Repeat("x", MaxLineContent*2+5)
	b := Format(nil, t0, Stdout, []byte(long))
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines: got %d, want 3", len(lines))
	}
	var joined []byte
	for i, l := range lines {
		e, err := Parse([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		if wantPartial := i < 2; e.Partial != wantPartial {
			t.Errorf("line %d partial: got %v, want %v", i, e.Partial, wantPartial)
		}
		joined = append(joined, e.Content...)
	}
	if string(joined) != long {
		t.Fatal("content does not survive the split")
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const sample = "2016-10-06T00:17:09.000000001Z stdout F one\n" +
	"2016-10-06T00:17:10.000000002Z stderr F two\n" +
	"not a log line\n" +
	"2016-10-06T00:17:11.000000003Z stdout P thr\n" +
	"2016-10-06T00:17:11.000000003Z stdout F ee\n" +
	"2016-10-06T00:17:12.000000004Z stdout F four\n"

func TestRead(t *testing.T) {
	tests := []struct {
		name string
		opts ReadOptions
		want string
	}{
		{name: "all", want: "one\ntwo\nthree\nfour\n"},
		{name: "tail 1", opts: ReadOptions{Tail: 1}, want: "four\n"},
		{name: "tail 3 counts file lines", opts: ReadOptions{Tail: 3}, want: "three\nfour\n"},
		{name: "tail beyond the file", opts: ReadOptions{Tail: 100}, want: "one\ntwo\nthree\nfour\n"},
		{name: "stderr only", opts: ReadOptions{Stream: Stderr}, want: "two\n"},
		{name: "since", opts: ReadOptions{Since: time.Date(2016, 10, 6, 0, 17, 11, 0, time.UTC)}, want: "three\nfour\n"},
		{name: "timestamps", opts: ReadOptions{Tail: 1, Timestamps: true}, want: "2016-10-06T00:17:12.000000004Z four\n"},
	}
	p := writeFile(t, sample)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Read(context.Background(), p, tt.opts, &out); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.want {
				t.Fatalf("got %q, want %q", out.String(), tt.want)
			}
		})
	}
}

func TestTailOfALongFile(t *testing.T) {
	var b []byte
	for i := range 5000 {
		b = Format(b, t0, Stdout, []byte(strings.Repeat("y", i%97)))
	}
	b = Format(b, t0, Stdout, []byte("last"))
	p := writeFile(t, string(b))
	var out bytes.Buffer
	if err := Read(context.Background(), p, ReadOptions{Tail: 2}, &out); err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("y", 4999%97) + "\nlast\n"; out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func TestFollow(t *testing.T) {
	p := writeFile(t, "2016-10-06T00:17:09.000000001Z stdout F one\n2016-10-06T00:17:09.000000001Z stdout F half")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- Read(ctx, p, ReadOptions{Follow: true, PollInterval: 5 * time.Millisecond}, &out) }()
	waitFor := func(want string) {
		t.Helper()
		testutil.EventuallyWithin(t, 10*time.Second, fmt.Sprintf("followed output %q", want), func() (bool, string) {
			got := out.String()
			return got == want, fmt.Sprintf("%q", got)
		})
	}
	waitFor("one\n")
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" line\n2016-10-06T00:17:09.000000001Z stdout F two\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	waitFor("one\nhalf line\ntwo\n")
	// A rotated file: the follower moves on to the new one.
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("2016-10-06T00:17:09.000000001Z stdout F three\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("one\nhalf line\ntwo\nthree\n")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not stop with its context")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("2016-10-06T00:17:09.669794202Z stdout F hello world\n"))
	f.Add([]byte("2016-10-06T00:17:09Z stderr P x"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := Parse(line)
		if err != nil {
			return
		}
		// What parses formats back to a line that parses the same.
		b := Format(nil, e.Time, e.Stream, e.Content)
		if e.Partial || len(e.Content) > MaxLineContent {
			return
		}
		e2, err := Parse(b)
		if err != nil {
			t.Fatalf("reformatted %q does not parse: %v", b, err)
		}
		if !e2.Time.Equal(e.Time) || e2.Stream != e.Stream || !bytes.Equal(e2.Content, e.Content) {
			t.Fatalf("round trip: got %+v, want %+v", e2, e)
		}
	})
}
