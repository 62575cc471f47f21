// This file holds the applets a scripted container's shell runs in place
// of an image's binaries (sleep, cat, env, id, ls, expr, wc, ...), each
// reading and writing the container's filesystem and the runtime's clock.

package simruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"mvdan.cc/sh/v3/interp"
)

// applet is one applet's call.
type applet struct {
	s    *shell
	hc   interp.HandlerContext
	name string
}

// fail reports err as coreutils do and returns exit status 1.
func (a applet) fail(err error) error {
	var pe *os.PathError
	msg := err.Error()
	if errors.As(err, &pe) {
		msg = fmt.Sprintf("%s: %s", pe.Path, errText(pe.Err))
	}
	fmt.Fprintf(a.hc.Stderr, "%s: %s\n", a.name, msg)
	return interp.NewExitStatus(1)
}

func errText(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, fs.ErrExist):
		return "File exists"
	case errors.Is(err, syscall.EROFS):
		return "Read-only file system"
	case errors.Is(err, syscall.ENOSPC):
		return "No space left on device"
	case errors.Is(err, syscall.EISDIR):
		return "Is a directory"
	case errors.Is(err, syscall.ENOTDIR):
		return "Not a directory"
	}
	s := err.Error()
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// each applies f to each operand's resolved path; the exit status is 1
// if any failed.
func (a applet) each(operands []string, f func(p string) error) error {
	if len(operands) == 0 {
		fmt.Fprintf(a.hc.Stderr, "%s: missing operand\n", a.name)
		return interp.NewExitStatus(1)
	}
	var failed error
	for _, o := range operands {
		if err := f(resolve(a.hc.Dir, o)); err != nil {
			if pe, ok := err.(*os.PathError); ok {
				err = &os.PathError{Op: pe.Op, Path: o, Err: pe.Err} // the operand, not where it led
			}
			failed = a.fail(err)
		}
	}
	return failed
}

// flags splits leading single-letter flags (of the letters known) from
// operands.
func flags(args []string, known string) (map[rune]bool, []string) {
	set := map[rune]bool{}
	for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' {
		if args[0] == "--" {
			return set, args[1:]
		}
		for _, ch := range args[0][1:] {
			if strings.ContainsRune(known, ch) {
				set[ch] = true
			}
		}
		args = args[1:]
	}
	return set, args
}

// sleep waits the sum of its operands (seconds, or with a suffix s, m, h,
// d; "infinity") on the runtime's clock.
func (a applet) sleep(ctx context.Context, operands []string) error {
	if len(operands) == 0 {
		fmt.Fprintln(a.hc.Stderr, "sleep: missing operand")
		return interp.NewExitStatus(1)
	}
	var total time.Duration
	forever := false
	for _, o := range operands {
		if o == "infinity" || o == "inf" {
			forever = true
			continue
		}
		unit := time.Second
		num := o
		switch {
		case strings.HasSuffix(o, "s"):
			num = strings.TrimSuffix(o, "s")
		case strings.HasSuffix(o, "m"):
			num, unit = strings.TrimSuffix(o, "m"), time.Minute
		case strings.HasSuffix(o, "h"):
			num, unit = strings.TrimSuffix(o, "h"), time.Hour
		case strings.HasSuffix(o, "d"):
			num, unit = strings.TrimSuffix(o, "d"), 24*time.Hour
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil || f < 0 || f > 1e9 {
			fmt.Fprintf(a.hc.Stderr, "sleep: invalid time interval '%s'\n", o)
			return interp.NewExitStatus(1)
		}
		total += time.Duration(f * float64(unit))
	}
	if forever {
		<-ctx.Done()
		return ctx.Err()
	}
	t := a.s.clock.NewTimer(total)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

func (a applet) cat(operands []string) error {
	if len(operands) == 0 {
		operands = []string{"-"}
	}
	var failed error
	for _, o := range operands {
		if o == "-" {
			if a.hc.Stdin == nil {
				continue
			}
			if _, err := io.Copy(a.hc.Stdout, a.hc.Stdin); err != nil {
				failed = a.fail(err)
			}
			continue
		}
		p := resolve(a.hc.Dir, o)
		if info, err := a.s.fs.stat(p); err == nil && info.IsDir() {
			failed = a.fail(&os.PathError{Op: "read", Path: o, Err: errors.New("is a directory")})
			continue
		}
		f, err := a.s.fs.open(p, os.O_RDONLY, 0)
		if err != nil {
			failed = a.fail(&os.PathError{Op: "open", Path: o, Err: fs.ErrNotExist})
			continue
		}
		_, err = io.Copy(a.hc.Stdout, f)
		_ = f.Close()
		if err != nil {
			failed = a.fail(err)
		}
	}
	return failed
}

// env prints the exported variables (env, printenv), or printenv's named
// ones (exit 1 if one is unset).
func (a applet) env(operands []string) error {
	if a.name == "env" && len(operands) > 0 {
		fmt.Fprintln(a.hc.Stderr, "env: running a command is not supported by the built-in runtime")
		return interp.NewExitStatus(exitNotFound)
	}
	if len(operands) > 0 {
		var missing bool
		for _, name := range operands {
			v := a.hc.Env.Get(name)
			if !v.IsSet() || !v.Exported {
				missing = true
				continue
			}
			fmt.Fprintln(a.hc.Stdout, v.String())
		}
		if missing {
			return interp.NewExitStatus(1)
		}
		return nil
	}
	var lines []string
	for name, v := range a.hc.Env.Each {
		if v.IsSet() && v.Exported {
			lines = append(lines, name+"="+v.String())
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Fprintln(a.hc.Stdout, l)
	}
	return nil
}

// id prints the user the container runs as (its securityContext's
// runAsUser and runAsGroup; root when unset).
func (a applet) id(operands []string) error {
	set, _ := flags(operands, "ug")
	switch {
	case set['u']:
		fmt.Fprintln(a.hc.Stdout, a.s.uid)
	case set['g']:
		fmt.Fprintln(a.hc.Stdout, a.s.gid)
	default:
		fmt.Fprintf(a.hc.Stdout, "uid=%d gid=%d groups=%d\n", a.s.uid, a.s.gid, a.s.gid)
	}
	return nil
}

func (a applet) ls(operands []string) error {
	set, rest := flags(operands, "1alA")
	if len(rest) == 0 {
		rest = []string{"."}
	}
	var failed error
	for _, o := range rest {
		p := resolve(a.hc.Dir, o)
		info, err := a.s.fs.stat(p)
		if err != nil {
			fmt.Fprintf(a.hc.Stderr, "ls: cannot access '%s': No such file or directory\n", o)
			failed = interp.NewExitStatus(2)
			continue
		}
		if !info.IsDir() {
			fmt.Fprintln(a.hc.Stdout, o)
			continue
		}
		entries, err := a.s.fs.readDir(p)
		if err != nil {
			failed = a.fail(err)
			continue
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") && !set['a'] && !set['A'] {
				continue
			}
			fmt.Fprintln(a.hc.Stdout, e.Name())
		}
	}
	return failed
}

// date prints the runtime clock's time in UTC, or as +%s (seconds since
// the epoch).
func (a applet) date(operands []string) error {
	now := a.s.clock.Now().UTC()
	if len(operands) == 1 && operands[0] == "+%s" {
		fmt.Fprintln(a.hc.Stdout, now.Unix())
		return nil
	}
	fmt.Fprintln(a.hc.Stdout, now.Format("Mon Jan _2 15:04:05 UTC 2006"))
	return nil
}

// expr evaluates integer arithmetic and comparisons, as expr(1) does for
// them: operands and operators are separate arguments, * / % bind tighter
// than + -, which bind tighter than the comparisons, then & and |. It
// prints the result and exits 1 when it is 0 or empty, 2 on a syntax
// error.
func (a applet) expr(args []string) error {
	v, rest, err := exprOr(args)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("syntax error: unexpected argument '%s'", rest[0])
	}
	if err != nil {
		fmt.Fprintf(a.hc.Stderr, "expr: %v\n", err)
		return interp.NewExitStatus(2)
	}
	fmt.Fprintln(a.hc.Stdout, v)
	if v == "0" || v == "" {
		return interp.NewExitStatus(1)
	}
	return nil
}

// exprLevel parses one precedence level of expr: operands of next joined
// by ops.
func exprLevel(args []string, ops []string, next func([]string) (string, []string, error), apply func(op, l, r string) (string, error)) (string, []string, error) {
	l, rest, err := next(args)
	if err != nil {
		return "", nil, err
	}
	for len(rest) > 0 && slices.Contains(ops, rest[0]) {
		op := rest[0]
		var r string
		r, rest, err = next(rest[1:])
		if err != nil {
			return "", nil, err
		}
		if l, err = apply(op, l, r); err != nil {
			return "", nil, err
		}
	}
	return l, rest, nil
}

func exprOr(args []string) (string, []string, error) {
	return exprLevel(args, []string{"|"}, exprAnd, func(_, l, r string) (string, error) {
		if l != "" && l != "0" {
			return l, nil
		}
		if r != "" && r != "0" {
			return r, nil
		}
		return "0", nil
	})
}

func exprAnd(args []string) (string, []string, error) {
	return exprLevel(args, []string{"&"}, exprCompare, func(_, l, r string) (string, error) {
		if l == "" || l == "0" || r == "" || r == "0" {
			return "0", nil
		}
		return l, nil
	})
}

func exprCompare(args []string) (string, []string, error) {
	return exprLevel(args, []string{"=", "!=", "<", "<=", ">", ">="}, exprSum, func(op, l, r string) (string, error) {
		var c int
		li, lerr := strconv.ParseInt(l, 10, 64)
		ri, rerr := strconv.ParseInt(r, 10, 64)
		if lerr == nil && rerr == nil {
			c = cmpInt(li, ri)
		} else {
			c = strings.Compare(l, r)
		}
		ok := map[string]bool{"=": c == 0, "!=": c != 0, "<": c < 0, "<=": c <= 0, ">": c > 0, ">=": c >= 0}[op]
		if ok {
			return "1", nil
		}
		return "0", nil
	})
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func exprSum(args []string) (string, []string, error) {
	return exprLevel(args, []string{"+", "-"}, exprProduct, exprArith)
}

func exprProduct(args []string) (string, []string, error) {
	return exprLevel(args, []string{"*", "/", "%"}, exprOperand, exprArith)
}

func exprArith(op, l, r string) (string, error) {
	li, err := strconv.ParseInt(l, 10, 64)
	if err != nil {
		return "", errors.New("non-integer argument")
	}
	ri, err := strconv.ParseInt(r, 10, 64)
	if err != nil {
		return "", errors.New("non-integer argument")
	}
	switch op {
	case "+":
		return strconv.FormatInt(li+ri, 10), nil
	case "-":
		return strconv.FormatInt(li-ri, 10), nil
	case "*":
		return strconv.FormatInt(li*ri, 10), nil
	}
	if ri == 0 {
		return "", errors.New("division by zero")
	}
	if op == "/" {
		return strconv.FormatInt(li/ri, 10), nil
	}
	return strconv.FormatInt(li%ri, 10), nil
}

// exprOperand is one operand or a parenthesised expression.
func exprOperand(args []string) (string, []string, error) {
	if len(args) == 0 {
		return "", nil, errors.New("syntax error: missing argument")
	}
	if args[0] == "(" {
		v, rest, err := exprOr(args[1:])
		if err != nil {
			return "", nil, err
		}
		if len(rest) == 0 || rest[0] != ")" {
			return "", nil, errors.New("syntax error: expecting ')'")
		}
		return v, rest[1:], nil
	}
	return args[0], args[1:], nil
}

// wc counts lines, words and bytes of its files (or stdin), printing the
// counts its flags ask for (-l, -w, -c; all three without flags).
func (a applet) wc(args []string) error {
	set, files := flags(args, "lwc")
	if len(set) == 0 {
		set = map[rune]bool{'l': true, 'w': true, 'c': true}
	}
	count := func(r io.Reader, name string) error {
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		var fields []string
		for _, f := range []struct {
			on bool
			n  int
		}{{set['l'], strings.Count(string(b), "\n")}, {set['w'], len(strings.Fields(string(b)))}, {set['c'], len(b)}} {
			if f.on {
				fields = append(fields, strconv.Itoa(f.n))
			}
		}
		if name != "" {
			fields = append(fields, name)
		}
		fmt.Fprintln(a.hc.Stdout, strings.Join(fields, " "))
		return nil
	}
	if len(files) == 0 {
		if a.hc.Stdin == nil {
			return count(strings.NewReader(""), "")
		}
		return count(a.hc.Stdin, "")
	}
	var failed error
	for _, name := range files {
		f, err := a.s.fs.open(resolve(a.hc.Dir, name), os.O_RDONLY, 0)
		if err != nil {
			failed = a.fail(&os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist})
			continue
		}
		err = count(f, name)
		_ = f.Close()
		if err != nil {
			failed = a.fail(err)
		}
	}
	return failed
}
