// This file holds the awk applet: the one kind of awk program the scripts
// of Kubernetes' tests run, printing fields of each line
// (`wc -l f | awk '{print $1}'`), and a refusal that says so for any
// other program. No Go implementation of awk is available to the build
// (the module proxy serves none), and a whole language would dwarf what
// scripts here need.

package simruntime

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"
)

// exitAwkUsage is awk's exit status for a program it cannot run.
const exitAwkUsage = 2

// awkItem is one item of a print statement: a field ($N, $NF), NF, NR or
// a string literal.
type awkItem struct {
	field   int  // $N (0: the whole line); -1: not a field
	lastNF  bool // $NF
	nf, nr  bool
	literal string
}

// awkPrint is a parsed `{print ...}` program: its items, each group of
// items joined by a comma printed with a space between (OFS), items side
// by side concatenated.
type awkPrint struct {
	groups [][]awkItem
}

// parseAwk parses a program of the form `{ print ITEMS }` (or `{print}`).
func parseAwk(prog string) (awkPrint, error) {
	body, ok := strings.CutPrefix(strings.TrimSpace(prog), "{")
	if body, ok = strings.CutSuffix(strings.TrimSpace(body), "}"); !ok {
		return awkPrint{}, fmt.Errorf("only `{print ...}` programs are supported here, not %q", prog)
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(body), "print")
	if !ok || (rest != "" && !strings.ContainsAny(rest[:1], " \t;$\"")) {
		return awkPrint{}, fmt.Errorf("only `{print ...}` programs are supported here, not %q", prog)
	}
	rest = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), ";"))
	var p awkPrint
	if rest == "" {
		p.groups = [][]awkItem{{{field: 0}}}
		return p, nil
	}
	group := []awkItem{}
	for rest != "" {
		var tok string
		switch {
		case rest[0] == ',':
			if len(group) == 0 {
				return awkPrint{}, fmt.Errorf("syntax error in %q", prog)
			}
			p.groups = append(p.groups, group)
			group = []awkItem{}
			rest = strings.TrimSpace(rest[1:])
			continue
		case rest[0] == '"':
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return awkPrint{}, fmt.Errorf("unterminated string in %q", prog)
			}
			group = append(group, awkItem{field: -1, literal: rest[1 : end+1]})
			rest = strings.TrimSpace(rest[end+2:])
			continue
		}
		end := strings.IndexAny(rest, " \t,\"")
		if end < 0 {
			end = len(rest)
		}
		tok, rest = rest[:end], strings.TrimSpace(rest[end:])
		item := awkItem{field: -1}
		switch {
		case tok == "NF":
			item.nf = true
		case tok == "NR":
			item.nr = true
		case tok == "$NF":
			item.lastNF = true
		case strings.HasPrefix(tok, "$"):
			n, err := strconv.Atoi(tok[1:])
			if err != nil || n < 0 {
				return awkPrint{}, fmt.Errorf("only $N, $NF, NF, NR and strings can be printed here, not %q", tok)
			}
			item.field = n
		default:
			return awkPrint{}, fmt.Errorf("only $N, $NF, NF, NR and strings can be printed here, not %q", tok)
		}
		group = append(group, item)
	}
	if len(group) == 0 {
		return awkPrint{}, fmt.Errorf("syntax error in %q", prog)
	}
	p.groups = append(p.groups, group)
	return p, nil
}

// line prints one input line (without its newline), the nr-th, split by
// split.
func (p awkPrint) line(w io.Writer, text string, nr int, split func(string) []string) {
	fields := split(text)
	var b strings.Builder
	for i, g := range p.groups {
		if i > 0 {
			b.WriteByte(' ')
		}
		for _, it := range g {
			switch {
			case it.nf:
				b.WriteString(strconv.Itoa(len(fields)))
			case it.nr:
				b.WriteString(strconv.Itoa(nr))
			case it.lastNF && len(fields) > 0:
				b.WriteString(fields[len(fields)-1])
			case it.lastNF:
				b.WriteString(text) // $NF of an empty line is $0
			case it.field == 0:
				b.WriteString(text)
			case it.field > 0 && it.field <= len(fields):
				b.WriteString(fields[it.field-1])
			case it.field < 0:
				b.WriteString(it.literal)
			}
		}
	}
	b.WriteByte('\n')
	_, _ = io.WriteString(w, b.String())
}

// awk runs `awk [-F SEP] PROGRAM [FILE...]` for the programs parseAwk
// takes, over the files or standard input.
func (a applet) awk(args []string) error {
	sep := ""
	for len(args) > 0 && strings.HasPrefix(args[0], "-F") {
		if sep = args[0][2:]; sep == "" && len(args) > 1 {
			sep, args = args[1], args[1:]
		}
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(a.hc.Stderr, "awk: no program")
		return interp.NewExitStatus(exitAwkUsage)
	}
	prog, err := parseAwk(args[0])
	if err != nil {
		fmt.Fprintf(a.hc.Stderr, "awk: %v (the built-in runtime's awk prints fields only)\n", err)
		return interp.NewExitStatus(exitAwkUsage)
	}
	split := strings.Fields
	if sep != "" && sep != " " {
		if sep == `\t` {
			sep = "\t"
		}
		split = func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, sep)
		}
	}
	nr := 0
	run := func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for sc.Scan() {
			nr++
			prog.line(a.hc.Stdout, sc.Text(), nr, split)
		}
		return sc.Err()
	}
	files := args[1:]
	if len(files) == 0 {
		if a.hc.Stdin == nil {
			return nil
		}
		if err := run(a.hc.Stdin); err != nil {
			return a.fail(err)
		}
		return nil
	}
	var failed error
	for _, name := range files {
		if name == "-" {
			if a.hc.Stdin != nil {
				if err := run(a.hc.Stdin); err != nil {
					failed = a.fail(err)
				}
			}
			continue
		}
		f, err := a.s.fs.open(resolve(a.hc.Dir, name), os.O_RDONLY, 0)
		if err != nil {
			failed = a.fail(&os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist})
			continue
		}
		err = run(f)
		_ = f.Close()
		if err != nil {
			failed = a.fail(err)
		}
	}
	return failed
}
