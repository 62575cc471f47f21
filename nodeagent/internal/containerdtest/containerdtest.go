// Package containerdtest runs a real containerd for tests, as root, with
// nothing from the internet: it writes a containerd config under a fresh
// work directory, starts `containerd --config`, waits for the CRI to report
// RuntimeReady, builds a pause image and a small static HTTP "hello" image
// from the Go programs under nodeagent/internal/testimages as OCI image
// layout tars, and imports them with `ctr -n k8s.io images import`. Close
// removes everything it made, inside and outside the work directory.
//
// containerd's CNI configuration directory is Dir/cni/net.d, empty: a
// test that runs pods with host networking (NamespaceOption Network NODE
// and an empty Hostname, as the kubelet does for hostNetwork pods) needs
// no CNI network, leaves no bridge or IP range behind, and reaches a
// container's server on 127.0.0.1; a test of pod networking has the node
// agent write its network there (nodeagent Config.CNIConfDir), and
// cleans up the bridge and NAT rules the plugins leave.
//
// Containers' cgroups go under CgroupParent (give it as the sandbox's
// LinuxPodSandboxConfig.CgroupParent), a name unique to the Env, so Close
// removes exactly those.
package containerdtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/internal/ociimage"
)

// Image references of the test images, as containerd records them.
const (
	PauseImage = "kplane.test/pause:1"
	HelloImage = "kplane.test/hello:1"
	// BusyboxImage holds Debian's static busybox (Busybox) with a shell,
	// cat, tar and the other applets exec tests need under /bin; it is
	// built only when Busybox exists (tests that use it require it).
	BusyboxImage = "kplane.test/busybox:1"
)

// Busybox is the static busybox BusyboxImage is built from, and how to
// get it.
const (
	Busybox            = "/bin/busybox"
	BusyboxInstallHint = "apt-get install -y --no-install-recommends busybox-static"
)

// busyboxApplets are linked to busybox in BusyboxImage.
var busyboxApplets = []string{"sh", "cat", "echo", "tar", "ls", "hostname", "sleep", "env", "id", "mkdir", "rm", "true", "false", "wc", "head"}

// Environment variables of the hello image: the address it listens on
// (host:port), and an exit code that makes it exit at once instead.
const (
	HelloAddrEnv     = "HELLO_ADDR"
	HelloExitCodeEnv = "HELLO_EXIT_CODE"
)

// HelloProbe is an exec probe command for the hello image: it exits 0 when
// the server answers.
var HelloProbe = []string{"/hello", "probe"}

const (
	pausePkg = "github.com/kplane/kplane/nodeagent/internal/testimages/pause"
	helloPkg = "github.com/kplane/kplane/nodeagent/internal/testimages/hello"
)

// Binaries a real-containerd test needs, and how to install them.
var Binaries = []string{"containerd", "ctr", "runc"}

// InstallHint says how to get the binaries on Debian.
const InstallHint = "apt-get install -y --no-install-recommends containerd runc containernetworking-plugins"

// Options configures Start.
type Options struct {
	// Logger receives progress (nil: discard).
	Logger *slog.Logger
	// StartTimeout bounds the wait for RuntimeReady (default 60s).
	StartTimeout time.Duration
}

// Env is a running containerd.
type Env struct {
	// Dir is the work directory holding config, state, root and logs.
	Dir string
	// Socket is containerd's gRPC (and CRI) socket.
	Socket string
	// CgroupParent is the cgroup parent to give sandboxes.
	CgroupParent string

	cmd        *exec.Cmd
	exited     chan struct{}
	log        *slog.Logger
	shimIDs    map[string]bool // sandbox and shim IDs seen, to find their shim sockets
	runDirMade bool
}

const shimDir = "/run/containerd/s"

// Start starts containerd and imports the test images. On error everything
// made so far is removed. It needs root and the Binaries on the PATH, and
// must run inside the kplane module (it builds the test images with the go
// command).
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("containerdtest: needs root")
	}
	for _, b := range Binaries {
		if _, err := exec.LookPath(b); err != nil {
			return nil, fmt.Errorf("containerdtest: %s not found (install: %s): %w", b, InstallHint, err)
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	// A short path: the sockets under it must fit a sun_path (108 bytes).
	dir, err := os.MkdirTemp("/tmp", "kplane-ctrd-")
	if err != nil {
		return nil, fmt.Errorf("containerdtest: work dir: %w", err)
	}
	e := &Env{
		Dir:          dir,
		Socket:       filepath.Join(dir, "state", "containerd.sock"),
		CgroupParent: "/" + filepath.Base(dir),
		log:          log,
		exited:       make(chan struct{}),
		shimIDs:      map[string]bool{},
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Close())
		}
	}()
	if _, err := os.Stat("/run/containerd"); errors.Is(err, os.ErrNotExist) {
		e.runDirMade = true
	}
	for _, d := range []string{"root", "state", "cni/net.d", "images"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("containerdtest: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "containerd.toml"), []byte(config(dir)), 0o644); err != nil {
		return nil, fmt.Errorf("containerdtest: write config: %w", err)
	}

	// Build the images' binaries while containerd starts.
	type built struct {
		tars []string
		err  error
	}
	buildCtx, cancelBuild := context.WithCancel(ctx)
	buildc := make(chan built, 1)
	go func() {
		tars, err := buildImages(buildCtx, filepath.Join(dir, "images"))
		buildc <- built{tars, err}
	}()
	var b built
	buildDone := false
	waitBuild := func() built {
		if !buildDone {
			b, buildDone = <-buildc, true
		}
		return b
	}
	// Runs before the clean-up above: the build must be over before its
	// directory goes.
	defer func() {
		cancelBuild()
		waitBuild()
	}()

	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		return nil, fmt.Errorf("containerdtest: %w", err)
	}
	e.cmd = exec.Command("containerd", "--config", filepath.Join(dir, "containerd.toml"))
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	started := time.Now()
	if err := e.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("containerdtest: start containerd: %w", err)
	}
	go func() {
		e.cmd.Wait()
		logf.Close()
		close(e.exited)
	}()
	log.Info("containerd started", "pid", e.cmd.Process.Pid, "dir", dir)

	c, err := cri.New(cri.Config{Socket: e.Socket})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	readyErr := c.WaitReady(wctx, 200*time.Millisecond)
	cancel()
	if readyErr == nil {
		log.Info("containerd ready", "after", time.Since(started))
	}
	waitBuild()
	if readyErr != nil {
		return nil, fmt.Errorf("containerdtest: %w; containerd log:\n%s", readyErr, e.logTail())
	}
	log.Info("test images built", "after", time.Since(started))
	if b.err != nil {
		return nil, b.err
	}
	for _, tar := range b.tars {
		out, err := exec.CommandContext(ctx, "ctr", "--address", e.Socket, "-n", "k8s.io", "images", "import", tar).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("containerdtest: ctr images import %s: %w: %s", tar, err, out)
		}
	}
	for _, ref := range []string{PauseImage, HelloImage} {
		im, err := c.ImageStatus(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("containerdtest: %w", err)
		}
		if im == nil {
			return nil, fmt.Errorf("containerdtest: image %s imported but the CRI does not see it", ref)
		}
	}
	log.Info("test images imported", "after", time.Since(started))
	return e, nil
}

func config(dir string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Required here: the sandbox lacks CAP_SYS_RESOURCE, and runc fails with
  # "can't get final child's PID from pipe: EOF" without it.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"),
		filepath.Join(dir, "state", "containerd.sock"), filepath.Join(dir, "state", "containerd.sock.ttrpc"),
		PauseImage, filepath.Join(dir, "state", "runc"), filepath.Join(dir, "cni", "net.d"))
}

// buildImages compiles the pause and hello programs statically and writes
// one image tar for each into dir.
func buildImages(ctx context.Context, dir string) ([]string, error) {
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin+"/", pausePkg, helloPkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("containerdtest: build test images: %w: %s", err, out)
	}
	var tars []string
	if data, err := os.ReadFile(Busybox); err == nil && isStatic(data) {
		links := map[string]string{}
		for _, a := range busyboxApplets {
			links["bin/"+a] = "busybox"
		}
		var buf bytes.Buffer
		if err := ociimage.Write(&buf, ociimage.Image{
			Name:       BusyboxImage,
			Dirs:       []string{"bin", "tmp", "etc"},
			Files:      map[string][]byte{"bin/busybox": data},
			Symlinks:   links,
			Entrypoint: []string{"/bin/sh"},
			Env:        []string{"PATH=/bin"},
		}); err != nil {
			return nil, err
		}
		tar := filepath.Join(dir, "busybox.tar")
		if err := os.WriteFile(tar, buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
		tars = append(tars, tar)
	}
	for _, im := range []struct{ ref, bin string }{{PauseImage, "pause"}, {HelloImage, "hello"}} {
		data, err := os.ReadFile(filepath.Join(bin, im.bin))
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		if err := ociimage.Write(&buf, ociimage.Image{
			Name:       im.ref,
			Files:      map[string][]byte{im.bin: data},
			Entrypoint: []string{"/" + im.bin},
		}); err != nil {
			return nil, err
		}
		tar := filepath.Join(dir, im.bin+".tar")
		if err := os.WriteFile(tar, buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
		tars = append(tars, tar)
	}
	return tars, nil
}

func (e *Env) logTail() string {
	b, _ := os.ReadFile(filepath.Join(e.Dir, "containerd.log"))
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// Close removes every sandbox through the CRI, stops containerd, kills any
// shim left serving this containerd, unmounts what is mounted under Dir,
// removes the shim sockets, cgroups and directories it made, and returns
// every failure it met.
func (e *Env) Close() error {
	var errs []error
	if e.cmd != nil && e.cmd.Process != nil {
		select {
		case <-e.exited:
		default:
			t0 := time.Now()
			errs = append(errs, e.removeSandboxes())
			e.log.Info("sandboxes removed", "took", time.Since(t0))
			e.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-e.exited:
			case <-time.After(15 * time.Second):
				e.log.Warn("containerd ignored SIGTERM for 15s; killing it")
				e.cmd.Process.Kill()
				<-e.exited
			}
			e.log.Info("containerd stopped", "took", time.Since(t0))
		}
	}
	errs = append(errs, e.killShims(), e.unmountAll(), e.removeCgroups())
	// containerd 1.6 puts a shim's socket at a fixed place, named by the
	// hash of containerd's address, the namespace and the shim's ID (the
	// sandbox's): remove exactly ours, not another containerd's.
	for id := range e.shimIDs {
		sum := sha256.Sum256([]byte(filepath.Join(e.Socket, "k8s.io", id)))
		if err := os.Remove(filepath.Join(shimDir, hex.EncodeToString(sum[:]))); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if e.runDirMade {
		// Only empty directories go: another containerd may use them.
		os.Remove(shimDir)
		os.Remove("/run/containerd")
	}
	if e.Dir != "" {
		errs = append(errs, os.RemoveAll(e.Dir))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("containerdtest: clean up: %w", err)
	}
	return nil
}

func (e *Env) removeSandboxes() error {
	c, err := cri.New(cri.Config{Socket: e.Socket, Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sbs, err := c.ListPodSandbox(ctx, nil)
	if err != nil {
		return nil // containerd is not answering; the shims are killed below
	}
	var errs []error
	for _, sb := range sbs {
		e.shimIDs[sb.GetId()] = true
		if err := c.StopPodSandbox(ctx, sb.GetId()); err != nil {
			errs = append(errs, err)
		}
		if err := c.RemovePodSandbox(ctx, sb.GetId()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killShims kills the containerd-shim processes serving this Env (their
// command line names its socket), and what runs under them has already
// been stopped with the sandboxes.
func (e *Env) killShims() error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, de := range ents {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", de.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.Contains(filepath.Base(args[0]), "containerd-shim") && slices.Contains(args, e.Socket) {
			if i := slices.Index(args, "-id"); i >= 0 && i+1 < len(args) {
				e.shimIDs[args[i+1]] = true
			}
			e.log.Info("killing leftover shim", "pid", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

// unmountAll detaches every mount under Dir, deepest first.
func (e *Env) unmountAll() error { return UnmountAll(e.Dir) }

// UnmountAll detaches every mount at or under dir, deepest first: what a
// node agent left mounted there (the tmpfs of pods' secret, projected and
// Memory emptyDir volumes stay mounted when an agent stops, as the
// kubelet's do) before a test removes dir.
func UnmountAll(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeCgroups removes the CgroupParent directories (deepest first) in
// every cgroup hierarchy.
func (e *Env) removeCgroups() error {
	roots, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		return err
	}
	roots = append(roots, "/sys/fs/cgroup")
	var errs []error
	for _, root := range roots {
		top := filepath.Join(root, e.CgroupParent)
		var dirs []string
		filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// isStatic tells whether the ELF binary data needs no dynamic loader (an
// image holding only it can run it): Debian's busybox-static, not its
// dynamically linked busybox.
func isStatic(data []byte) bool {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}
