// This file holds the scripted containers' shell: a container whose
// command is a shell with -c (or one of the applets below) has its script
// run by mvdan.cc/sh's POSIX shell interpreter, inside the runtime process,
// against the container's in-memory filesystem (memfs.go), with a small set
// of Go applets standing in for the image's binaries. No host process,
// file or network is reachable from a script.

package simruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"

	"github.com/kplane/kplane/nodeagent/crilog"
)

// Exit codes of a script, as a shell gives them.
const (
	exitUsage    = 2   // a script that does not parse
	exitNotFound = 127 // a command that is not an applet
)

// maxScriptLog is how many bytes of output a scripted container writes to
// its log; the rest is dropped (the kubelet would rotate the file instead).
const maxScriptLog = 10 << 20

// isShell reports whether name (a command's base name) is a shell whose
// -c script the interpreter runs.
func isShell(name string) bool {
	switch name {
	case "sh", "bash", "ash", "dash":
		return true
	}
	return false
}

// isApplet reports whether name is a command the interpreter provides.
func isApplet(name string) bool {
	switch name {
	case "sleep", "cat", "true", "false", "env", "printenv", "hostname", "id",
		"touch", "mkdir", "rm", "ls", "date", "expr", "wc", "awk", "echo", "test", "[", "printf":
		return true
	}
	return false
}

// shellCall is a shell invocation: `sh -c SCRIPT [NAME [ARGS...]]`, with
// the shell options given beside -c (e.g. -ec).
type shellCall struct {
	script string
	opts   []string
	params []string
}

// parseShellCall recognises `<shell> -c SCRIPT ...` in argv; the flag may
// combine c with e, u and x.
func parseShellCall(argv []string) (shellCall, bool) {
	if len(argv) < 3 || !isShell(path.Base(argv[0])) {
		return shellCall{}, false
	}
	flag := argv[1]
	if len(flag) < 2 || flag[0] != '-' || !strings.Contains(flag, "c") {
		return shellCall{}, false
	}
	var call shellCall
	for _, ch := range flag[1:] {
		switch ch {
		case 'c':
		case 'e', 'u', 'x':
			call.opts = append(call.opts, "-"+string(ch))
		default:
			return shellCall{}, false
		}
	}
	call.script = argv[2]
	if len(argv) > 3 {
		call.params = argv[4:] // argv[3] is $0, which the interpreter does not take
	}
	return call, true
}

// interpretable reports whether the interpreter runs argv: a shell with -c,
// or an applet by its base name (`sleep 5`, `/bin/true`).
func interpretable(argv []string) bool {
	if len(argv) == 0 {
		return false
	}
	if _, ok := parseShellCall(argv); ok {
		return true
	}
	return isApplet(path.Base(argv[0]))
}

// shell is what a scripted container's commands run with.
type shell struct {
	fs       containerFS
	env      []string // KEY=VALUE, the container's
	dir      string   // the working directory
	hostname string
	uid, gid int64
	clock    clock.Clock
}

// newShell prepares a container's shell: its root filesystem holds the
// working directory, /etc/hostname, /etc/resolv.conf (the sandbox's DNS
// configuration, when it has one), an empty /dev/termination-log and the
// mount points, and is then read-only if readOnly says so; the mounts'
// host directories are laid over it.
func newShell(clk clock.Clock, envs []string, dir, hostname, resolvConf string, uid, gid int64, readOnly bool, mounts []*runtimeapi.Mount) *shell {
	root := newMemFS(clk.Now)
	s := &shell{env: envs, dir: "/", hostname: hostname, uid: uid, gid: gid, clock: clk}
	if dir != "" {
		s.dir = resolve("/", dir)
		_ = root.mkdir(s.dir, true)
	}
	files := map[string]string{"/etc/hostname": hostname + "\n", "/dev/termination-log": ""}
	if resolvConf != "" {
		files["/etc/resolv.conf"] = resolvConf
	}
	for name, content := range files {
		if f, err := root.open(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err == nil {
			_, _ = io.WriteString(f, content)
			_ = f.Close()
		}
	}
	s.fs = newMountedFS(root, mounts)
	root.readOnly = readOnly
	return s
}

// run runs argv to its end, or until ctx is done (exit 143, as SIGTERM
// ends a shell), and returns its exit code.
func (s *shell) run(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) int32 {
	argv0 := "sh"
	call, ok := parseShellCall(argv)
	if ok {
		argv0 = argv[0]
	} else {
		// An applet run directly is the one-command script that runs it.
		quoted := make([]string, len(argv))
		for i, a := range argv {
			q, err := syntax.Quote(a, syntax.LangPOSIX)
			if err != nil {
				fmt.Fprintf(stderr, "%s: cannot run: %v\n", argv[0], err)
				return exitNotFound
			}
			quoted[i] = q
		}
		call = shellCall{script: strings.Join(quoted, " ")}
	}
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(call.script), "sh")
	if err != nil {
		fmt.Fprintf(stderr, "sh: %v\n", err)
		return exitUsage
	}
	var stdinFile io.Reader // nil: no input
	if stdin != nil {
		// The interpreter reads its input from a file; a pipe of our own,
		// closed at the end, does not outlive the run.
		pr, pw, err := os.Pipe()
		if err != nil {
			fmt.Fprintf(stderr, "sh: %v\n", err)
			return exitUsage
		}
		go func() {
			_, _ = io.Copy(pw, stdin)
			_ = pw.Close()
		}()
		defer pr.Close()
		stdinFile = pr
	}
	env := slices.Clone(s.env)
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }) {
		env = append(env, "HOME=/root")
	}
	params := append(slices.Clone(call.opts), "--")
	params = append(params, call.params...)
	runner, err := interp.New(
		interp.StdIO(stdinFile, stdout, stderr),
		interp.Env(expand.ListEnviron(env...)),
		interp.Params(params...),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc { return s.exec }),
		interp.OpenHandler(s.openAs(argv0)),
		interp.StatHandler(s.stat),
		interp.ReadDirHandler2(s.readDir),
		interp.AccessHandler(s.access),
	)
	if err != nil {
		fmt.Fprintf(stderr, "sh: %v\n", err)
		return exitUsage
	}
	runner.Dir = s.dir
	err = runner.Run(ctx, file)
	if ctx.Err() != nil {
		return exitCodeSIGTERM
	}
	if err == nil {
		return 0
	}
	if code, ok := interp.IsExitStatus(err); ok {
		return int32(code)
	}
	fmt.Fprintf(stderr, "sh: %v\n", err)
	return 1
}

// openAs is the redirections' open for a shell invoked as argv0; a
// failure is worded as BusyBox's sh words it (the shell of the images
// Kubernetes' own tests use): "sh: can't create /f: Read-only file system".
func (s *shell) openAs(argv0 string) interp.OpenHandlerFunc {
	return func(ctx context.Context, name string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
		hc := interp.HandlerCtx(ctx)
		switch p := resolve(hc.Dir, name); p {
		case "/dev/null":
			return devNull{}, nil
		case "/dev/stdout":
			return nopCloser{Writer: hc.Stdout}, nil
		case "/dev/stderr":
			return nopCloser{Writer: hc.Stderr}, nil
		default:
			f, err := s.fs.open(p, flag, perm)
			if err == nil {
				return f, nil
			}
			var cause error = err
			if pe, ok := err.(*os.PathError); ok {
				cause = pe.Err
			}
			if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE) != 0 {
				return nil, &os.PathError{Op: argv0 + ": can't create", Path: name, Err: errors.New(errText(cause))}
			}
			return nil, &os.PathError{Op: argv0 + ": can't open", Path: "'" + name + "'", Err: errors.New(errText(cause))}
		}
	}
}

func (s *shell) stat(ctx context.Context, name string, _ bool) (fs.FileInfo, error) {
	return s.fs.stat(resolve(interp.HandlerCtx(ctx).Dir, name))
}

func (s *shell) readDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	return s.fs.readDir(resolve(interp.HandlerCtx(ctx).Dir, name))
}

// access: the script runs as a user who may do anything to what exists.
func (s *shell) access(ctx context.Context, name string, _ interp.AccessMode) error {
	_, err := s.fs.stat(resolve(interp.HandlerCtx(ctx).Dir, name))
	return err
}

// exec runs the applet args[0] names; any other command is not found.
func (s *shell) exec(ctx context.Context, args []string) error {
	hc := interp.HandlerCtx(ctx)
	name := path.Base(args[0])
	a := applet{s: s, hc: hc, name: name}
	switch name {
	case "true":
		return nil
	case "false":
		return interp.NewExitStatus(1)
	case "sleep":
		return a.sleep(ctx, args[1:])
	case "cat":
		return a.cat(args[1:])
	case "env", "printenv":
		return a.env(args[1:])
	case "hostname":
		fmt.Fprintln(hc.Stdout, s.hostname)
		return nil
	case "id":
		return a.id(args[1:])
	case "touch":
		return a.each(args[1:], func(p string) error { return s.fs.touch(p) })
	case "mkdir":
		parents, rest := flags(args[1:], "p")
		return a.each(rest, func(p string) error { return s.fs.mkdir(p, parents['p']) })
	case "rm":
		set, rest := flags(args[1:], "rRf")
		return a.each(rest, func(p string) error {
			err := s.fs.remove(p, set['r'] || set['R'])
			if set['f'] && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		})
	case "ls":
		return a.ls(args[1:])
	case "date":
		return a.date(args[1:])
	case "expr":
		return a.expr(args[1:])
	case "wc":
		return a.wc(args[1:])
	case "awk":
		return a.awk(args[1:])
	case "echo", "test", "[", "printf":
		// Reached by a path (/bin/echo); the builtins are the same commands.
		return hc.Builtin(ctx, append([]string{name}, args[1:]...))
	}
	fmt.Fprintf(hc.Stderr, "sh: %s: not found\n", args[0])
	return interp.NewExitStatus(exitNotFound)
}

type devNull struct{}

func (devNull) Read([]byte) (int, error)    { return 0, io.EOF }
func (devNull) Write(p []byte) (int, error) { return len(p), nil }
func (devNull) Close() error                { return nil }

type nopCloser struct{ io.Writer }

func (nopCloser) Read([]byte) (int, error) { return 0, io.EOF }
func (nopCloser) Close() error             { return nil }

// logWriter writes a script's output to its container's CRI log file, a
// line at a time, stamped with the runtime clock; stdout and stderr of one
// container share it (and its byte budget).
type logWriter struct {
	shared *logFile
	stream string
	buf    []byte
}

type logFile struct {
	mu      sync.Mutex
	path    string
	clock   clock.Clock
	written int64
}

func (f *logFile) writer(stream string) *logWriter { return &logWriter{shared: f, stream: stream} }

func (w *logWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	var lines [][]byte
	for {
		i := slices.Index(w.buf, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(lines) > 0 {
		w.shared.append(w.stream, lines, false)
	}
	w.buf = slices.Clip(w.buf)
	return len(p), nil
}

// flush writes a last line without a newline, as a partial line (as
// containerd does when a stream ends mid-line): `echo -n DONE` logs DONE,
// not DONE and a newline.
func (w *logWriter) flush() {
	if len(w.buf) > 0 {
		w.shared.append(w.stream, [][]byte{w.buf}, true)
		w.buf = nil
	}
}

// append writes lines to the log, the last one partial if partial says so.
func (f *logFile) append(stream string, lines [][]byte, partial bool) {
	if f.path == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.clock.Now()
	var out []byte
	for i, l := range lines {
		if partial && i == len(lines)-1 {
			out = crilog.FormatPartial(out, t, stream, l)
			continue
		}
		out = crilog.Format(out, t, stream, l)
	}
	if f.written+int64(len(out)) > maxScriptLog {
		return
	}
	fh, err := os.OpenFile(f.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return
	}
	n, _ := fh.Write(out)
	_ = fh.Close()
	f.written += int64(n)
}

// scripted is what a scripted container adds to a container: the argv its
// shell runs and, once started, how to end the run.
type scripted struct {
	argv   []string
	shell  *shell
	cancel context.CancelFunc
}

// newScripted prepares the shell of a container created from cfg in sb.
func newScripted(clk clock.Clock, argv []string, cfg *runtimeapi.ContainerConfig, sb *sandbox) *scripted {
	envs := make([]string, 0, len(cfg.GetEnvs())+1)
	for _, kv := range cfg.GetEnvs() {
		envs = append(envs, kv.GetKey()+"="+kv.GetValue())
	}
	hostname := sb.hostname
	if hostname == "" {
		hostname = sb.meta.GetName()
	}
	envs = append(envs, "HOSTNAME="+hostname)
	sc := cfg.GetLinux().GetSecurityContext()
	return &scripted{
		argv:  argv,
		shell: newShell(clk, envs, cfg.GetWorkingDir(), hostname, sb.resolvConf, sc.GetRunAsUser().GetValue(), sc.GetRunAsGroup().GetValue(), sc.GetReadonlyRootfs(), cfg.GetMounts()),
	}
}

// startScript runs c's script in the background; its end is c's exit,
// unless c was stopped first. Called with r.mu held.
func (r *Runtime) startScript(c *container) {
	ctx, cancel := context.WithCancel(context.Background())
	c.sh.cancel = cancel
	log := &logFile{path: c.logPath, clock: r.clock}
	id, sh, argv := c.id, c.sh.shell, c.sh.argv
	r.scripts.Add(1)
	go func() {
		defer r.scripts.Done()
		defer cancel()
		stdout, stderr := log.writer(crilog.Stdout), log.writer(crilog.Stderr)
		code := sh.run(ctx, argv, nil, stdout, stderr)
		stdout.flush()
		stderr.flush()
		r.mu.Lock()
		defer r.mu.Unlock()
		if c, ok := r.containers[id]; ok && c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			c.exit(r.clock.Now(), code)
		}
	}()
}

// execScript runs cmd in scripted container c's shell (ExecSync and
// streaming exec); ok is false when c is not scripted or cmd is not
// something its shell runs, and the runtime's rules answer instead.
func execScript(ctx context.Context, c *container, cmd []string, stdin io.Reader, stdout, stderr io.Writer) (code int32, ok bool) {
	if c.sh == nil || !interpretable(cmd) {
		return 0, false
	}
	return c.sh.shell.run(ctx, cmd, stdin, stdout, stderr), true
}

// stopScripts ends every running script and waits for them (Close).
func (r *Runtime) stopScripts() {
	r.mu.Lock()
	for _, c := range r.containers {
		if c.sh != nil && c.sh.cancel != nil {
			c.sh.cancel()
		}
	}
	r.mu.Unlock()
	r.scripts.Wait()
}

// execScript runs a streaming exec's cmd in the shell of the scripted
// container id (see execScript); out or errw may be nil.
func (r *Runtime) execScript(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.Writer) (int32, bool) {
	r.mu.Lock()
	c, err := r.findContainerLocked(id)
	r.mu.Unlock()
	if err != nil {
		return 0, false
	}
	if out == nil {
		out = io.Discard
	}
	if errw == nil {
		errw = io.Discard
	}
	return execScript(ctx, c, cmd, in, out, errw)
}
