// Tests of scripted containers: a container whose command is a shell script
// (or an applet) has it run by the interpreter, against its own in-memory
// filesystem, on the runtime's clock.

package simruntime_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/nodeagent/simruntime"
)

// runScripted starts a container whose command is argv, with the given
// environment and security context; it returns the container's ID.
func runScripted(t *testing.T, e *env, name string, argv []string, envm map[string]string, sc *runtimeapi.LinuxContainerSecurityContext, mounts ...*runtimeapi.Mount) string {
	t.Helper()
	ctx := context.Background()
	const image = "example.com/busybox:1"
	if _, err := e.client.PullImage(ctx, image, nil, nil); err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	sbCfg := sandboxConfig(e, name, 0)
	sbCfg.Hostname = name
	sb, err := e.client.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	id, err := e.client.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  argv[:1],
		Args:     argv[1:],
		Envs:     envs(envm),
		LogPath:  "app/0.log",
		Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: sc},
		Mounts:   mounts,
	}, sbCfg)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if err := e.client.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return id
}

// waitExited waits (bounded) until the container has exited and returns
// its status.
func waitExited(t *testing.T, e *env, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	for range 1000 {
		st, err := e.client.ContainerStatus(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			return st
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the container did not exit")
	return nil
}

func logOf(t *testing.T, st *runtimeapi.ContainerStatus) string {
	t.Helper()
	raw, err := os.ReadFile(st.GetLogPath())
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestScriptExitsWithItsCodeAndLogsItsOutput(t *testing.T) {
	e := start(t, simruntime.Config{})
	id := runScripted(t, e, "pod", []string{"/bin/sh", "-c", `echo "hello $GREETING from $(hostname)"; echo oops >&2; exit 3`},
		map[string]string{"GREETING": "world"}, nil)
	st := waitExited(t, e, id)
	if st.GetExitCode() != 3 || st.GetReason() != "Error" {
		t.Fatalf("exit: got %d %q, want 3 Error", st.GetExitCode(), st.GetReason())
	}
	want := "2026-11-22T12:00:00Z stdout F hello world from pod\n2026-11-22T12:00:00Z stderr F oops\n"
	if got := logOf(t, st); got != want {
		t.Fatalf("log: got %q, want %q", got, want)
	}
}

func TestScriptSleepsOnTheRuntimeClock(t *testing.T) {
	e := start(t, simruntime.Config{})
	id := runScripted(t, e, "pod", []string{"sh", "-c", "sleep 10; exit 0"}, nil, nil)
	waitForWaiter(t, e.clock)
	st, err := e.client.ContainerStatus(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("state while sleeping: %v", st.GetState())
	}
	e.clock.Step(10 * time.Second)
	st = waitExited(t, e, id)
	if st.GetExitCode() != 0 || st.GetReason() != "Completed" {
		t.Fatalf("exit: got %d %q, want 0 Completed", st.GetExitCode(), st.GetReason())
	}
	if ran := time.Duration(st.GetFinishedAt() - st.GetStartedAt()); ran != 10*time.Second {
		t.Fatalf("ran for %v, want 10s", ran)
	}
}

// TestExecSeesTheScriptsFiles is the shape of an exec liveness probe on a
// file the container's own script removes after a while.
func TestExecSeesTheScriptsFiles(t *testing.T) {
	e := start(t, simruntime.Config{})
	id := runScripted(t, e, "pod", []string{"/bin/sh", "-c", "echo ok > /tmp/health; sleep 10; rm -rf /tmp/health; sleep 600"}, nil, nil)
	waitForWaiter(t, e.clock)
	resp, err := e.client.ExecSync(context.Background(), id, []string{"cat", "/tmp/health"}, time.Second)
	if err != nil {
		t.Fatalf("ExecSync: %v", err)
	}
	if resp.GetExitCode() != 0 || string(resp.GetStdout()) != "ok\n" {
		t.Fatalf("before: exit %d, stdout %q, stderr %q", resp.GetExitCode(), resp.GetStdout(), resp.GetStderr())
	}
	e.clock.Step(10 * time.Second)
	for range 1000 { // the script goes on to rm, then sleeps again
		if e.clock.HasWaiters() {
			if resp, err = e.client.ExecSync(context.Background(), id, []string{"cat", "/tmp/health"}, time.Second); err == nil && resp.GetExitCode() != 0 {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("ExecSync: %v", err)
	}
	if resp.GetExitCode() != 1 || !strings.Contains(string(resp.GetStderr()), "cat: /tmp/health: No such file or directory") {
		t.Fatalf("after: exit %d, stderr %q", resp.GetExitCode(), resp.GetStderr())
	}
	// A command that is not an applet is not found, as in a real shell.
	resp, err = e.client.ExecSync(context.Background(), id, []string{"sh", "-c", "curl -s localhost"}, time.Second)
	if err != nil {
		t.Fatalf("ExecSync: %v", err)
	}
	if resp.GetExitCode() != 127 || !strings.Contains(string(resp.GetStderr()), "curl: not found") {
		t.Fatalf("unknown command: exit %d, stderr %q", resp.GetExitCode(), resp.GetStderr())
	}
}

func TestScriptedContainers(t *testing.T) {
	uid := &runtimeapi.LinuxContainerSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: 3000}}
	tests := []struct {
		name     string
		argv     []string
		env      map[string]string
		sc       *runtimeapi.LinuxContainerSecurityContext
		wantExit int32
		wantLog  string // a substring of the log
	}{
		{name: "an applet run directly", argv: []string{"/bin/true"}, wantExit: 0},
		{name: "false", argv: []string{"false"}, wantExit: 1},
		{name: "a command that is not an applet", argv: []string{"sh", "-c", "agnhost netexec"}, wantExit: 127, wantLog: "agnhost: not found"},
		{name: "arithmetic and tests", argv: []string{"sh", "-c", `i=0; while [ $i -lt 5 ]; do i=$((i+1)); done; test $i -eq 5 && exit $((i*2))`}, wantExit: 10},
		{name: "-e stops at the first failure", argv: []string{"sh", "-ec", "false; exit 9"}, wantExit: 1},
		{name: "files", argv: []string{"sh", "-c", "mkdir -p /data/a && echo x > /data/a/f && cat /data/a/f && ls /data/a && rm -r /data && cat /data/a/f"}, wantExit: 1, wantLog: "stdout F f"},
		{name: "no way out of the root", argv: []string{"sh", "-c", "cat ../../../../etc/passwd"}, wantExit: 1, wantLog: "No such file or directory"},
		{name: "the user of the security context", argv: []string{"sh", "-c", `echo "$(id -u):$(id -g)"`}, sc: uid, wantExit: 0, wantLog: "stdout F 1000:3000"},
		{name: "printenv", argv: []string{"printenv", "MODE"}, env: map[string]string{"MODE": "batch"}, wantLog: "stdout F batch"},
		{name: "a script that does not parse", argv: []string{"sh", "-c", "if then"}, wantExit: 2},
		{name: "expr", argv: []string{"sh", "-c", `if [ $(expr 7 % 2) -ne 0 ]; then exit $(expr \( 2 + 3 \) \* 4); fi`}, wantExit: 20},
		{name: "expr of zero exits 1", argv: []string{"expr", "3", "-", "3"}, wantExit: 1, wantLog: "stdout F 0"},
		{name: "wc", argv: []string{"sh", "-c", "printf 'a b\\nc\\n' > /tmp/f; wc -l /tmp/f; wc -w < /tmp/f"}, wantLog: "stdout F 2 /tmp/f"},
		{name: "a read-only root filesystem", argv: []string{"/bin/sh", "-c", "echo x > /file"}, sc: &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true},
			wantExit: 1, wantLog: "stderr F /bin/sh: can't create /file: Read-only file system"},
		{name: "reading what is not there", argv: []string{"sh", "-c", "read x < /nothing"}, wantExit: 1, wantLog: "stderr F sh: can't open '/nothing': No such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, simruntime.Config{})
			id := runScripted(t, e, "pod", tt.argv, tt.env, tt.sc)
			st := waitExited(t, e, id)
			if st.GetExitCode() != tt.wantExit {
				t.Fatalf("exit code: got %d, want %d; log %q", st.GetExitCode(), tt.wantExit, logOf(t, st))
			}
			if log := logOf(t, st); !strings.Contains(log, tt.wantLog) {
				t.Fatalf("log: got %q, want it to contain %q", log, tt.wantLog)
			}
		})
	}
}

func TestStopEndsAScript(t *testing.T) {
	e := start(t, simruntime.Config{})
	id := runScripted(t, e, "pod", []string{"sleep", "1000000"}, nil, nil)
	waitForWaiter(t, e.clock)
	if err := e.client.StopContainer(context.Background(), id, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	st := waitExited(t, e, id)
	if st.GetExitCode() != 143 {
		t.Fatalf("exit code: got %d, want 143", st.GetExitCode())
	}
}

// The environment's rules win over a command: the manifest says what the
// simulation does.
func TestRulesWinOverAScript(t *testing.T) {
	e := start(t, simruntime.Config{})
	id := runScripted(t, e, "pod", []string{"sh", "-c", "exit 0"}, map[string]string{simruntime.EnvExitCode: "4"}, nil)
	st := waitExited(t, e, id)
	if st.GetExitCode() != 4 {
		t.Fatalf("exit code: got %d, want 4", st.GetExitCode())
	}
}

// TestScriptsSeeTheirMounts: a mount is its host directory (a volume the
// node agent prepared), read-only when the mount says so, and nothing
// outside it is reachable through it.
func TestScriptsSeeTheirMounts(t *testing.T) {
	data, cfg := t.TempDir(), t.TempDir()
	if err := os.WriteFile(cfg+"/key", []byte("value\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", data+"/escape"); err != nil {
		t.Fatal(err)
	}
	e := start(t, simruntime.Config{})
	script := `cat /cfg/key; echo written > /data/out; ls /; echo no > /cfg/new; cat /data/escape; rm -r /data; echo done`
	id := runScripted(t, e, "pod", []string{"sh", "-c", script}, nil, &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true},
		&runtimeapi.Mount{ContainerPath: "/data", HostPath: data},
		&runtimeapi.Mount{ContainerPath: "/cfg", HostPath: cfg, Readonly: true})
	st := waitExited(t, e, id)
	log := logOf(t, st)
	for _, want := range []string{
		"stdout F value",
		"stdout F cfg", "stdout F data", // the mount points, in the listing of /
		"stderr F sh: can't create /cfg/new: Read-only file system",
		"stderr F cat: /data/escape:", // a link out of the volume leads nowhere
		"stderr F rm: /data: Device or resource busy",
		"stdout F done",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log: no %q in\n%s", want, log)
		}
	}
	if b, err := os.ReadFile(data + "/out"); err != nil || string(b) != "written\n" {
		t.Errorf("the host directory: got %q, %v; want the file the script wrote", b, err)
	}
	if _, err := os.Stat(cfg + "/new"); err == nil {
		t.Errorf("a read-only mount was written")
	}
}

// TestScriptsSeeTheirFileMounts: a mount of one host file (the node
// agent's termination message file, a subPath of one file) is that file:
// a script writes it in place (through a redirection, over the empty
// /dev/termination-log of the root), reads it, lists it, cannot remove it
// or go below it; a read-only one refuses writes. Output that ends
// without a newline is logged as a partial line, as containerd logs it.
func TestScriptsSeeTheirFileMounts(t *testing.T) {
	dir := t.TempDir()
	msg, ro := dir+"/msg", dir+"/ro"
	for _, f := range []string{msg, ro} {
		if err := os.WriteFile(f, nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(ro, []byte("fixed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := start(t, simruntime.Config{})
	script := `/bin/echo -n DONE > /dev/termination-log; cat /dev/termination-log; echo; test -s /dev/termination-log && echo non-empty; ls /dev; ls /etc/fixed.conf; cat /etc/fixed.conf; ` +
		`echo no > /etc/fixed.conf; rm /dev/termination-log; cat /dev/termination-log/x; echo -n last`
	id := runScripted(t, e, "pod", []string{"sh", "-c", script}, nil, &runtimeapi.LinuxContainerSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: 10000}},
		&runtimeapi.Mount{ContainerPath: "/dev/termination-log", HostPath: msg},
		&runtimeapi.Mount{ContainerPath: "/etc/fixed.conf", HostPath: ro, Readonly: true})
	st := waitExited(t, e, id)
	log := logOf(t, st)
	for _, want := range []string{
		"stdout F DONE\n",
		"stdout F non-empty\n", // stat is the host file's
		"stdout F termination-log\n",
		"stdout F /etc/fixed.conf\n",
		"stdout F fixed\n",
		"stderr F sh: can't create /etc/fixed.conf: Read-only file system\n",
		"stderr F rm: /dev/termination-log: Device or resource busy\n",
		"stderr F cat: /dev/termination-log/x:", // nothing is below a file
		"stdout P last\n",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log: no %q in\n%s", want, log)
		}
	}
	if b, err := os.ReadFile(msg); err != nil || string(b) != "DONE" {
		t.Errorf("the host file: got %q, %v; want DONE", b, err)
	}
	if b, err := os.ReadFile(ro); err != nil || string(b) != "fixed\n" {
		t.Errorf("the read-only host file: got %q, %v; want it unchanged", b, err)
	}
}

// TestScriptSeesResolvConf: a scripted container's /etc/resolv.conf is the
// sandbox's DnsConfig, written as containerd writes it (search, then a
// nameserver line each, then options); without a DnsConfig there is none.
func TestScriptSeesResolvConf(t *testing.T) {
	e := start(t, simruntime.Config{})
	ctx := context.Background()
	const image = "example.com/busybox:1"
	if _, err := e.client.PullImage(ctx, image, nil, nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dns  *runtimeapi.DNSConfig
		want string
	}{
		{name: "cluster-first", dns: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"},
			Searches: []string{"team.svc.cluster.local", "svc.cluster.local", "cluster.local"}, Options: []string{"ndots:5"}},
			want: "search team.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"},
		{name: "two-servers", dns: &runtimeapi.DNSConfig{Servers: []string{"192.0.2.1", "192.0.2.2"}},
			want: "nameserver 192.0.2.1\nnameserver 192.0.2.2\n"},
		{name: "none", want: "cat: /etc/resolv.conf: No such file or directory\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sbCfg := sandboxConfig(e, tc.name, 0)
			sbCfg.DnsConfig = tc.dns
			sb, err := e.client.RunPodSandbox(ctx, sbCfg, "")
			if err != nil {
				t.Fatal(err)
			}
			id, err := e.client.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: image},
				Command: []string{"sh", "-c", "cat /etc/resolv.conf 2>&1"}, LogPath: "app/0.log"}, sbCfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.client.StartContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, line := range strings.SplitAfter(logOf(t, waitExited(t, e, id)), "\n") {
				if _, text, ok := strings.Cut(line, " F "); ok {
					got = append(got, text)
				}
			}
			if strings.Join(got, "") != tc.want {
				t.Errorf("/etc/resolv.conf: got %q, want %q", strings.Join(got, ""), tc.want)
			}
		})
	}
}
