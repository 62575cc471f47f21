// Package simruntime is kplane's built-in container runtime: a CRI v1 server
// (RuntimeService and ImageService of k8s.io/cri-api) on a unix socket that
// starts no processes. It simulates pod sandboxes, images and containers, and
// writes container logs in the CRI log format, so that a node agent — and
// many of them in one process — can run pods without a real runtime. Its
// Version says RuntimeName "kplane-sim", making plain that nothing really
// runs there.
//
// # Rules
//
// Everything a simulated container does follows from its manifest, through
// deterministic rules. Containers read them from their environment (the CRI
// ContainerConfig.Envs, i.e. the pod's env), images from their name:
//
//	KPLANE_SIM_RUN_SECONDS=N      the container exits N seconds (a decimal,
//	                              e.g. 0.5) after it starts. With no
//	                              KPLANE_SIM_EXIT_CODE it exits 0.
//	KPLANE_SIM_EXIT_CODE=C        the container exits with code C (0-255)
//	                              after KPLANE_SIM_RUN_SECONDS (default 0:
//	                              right after it starts). Reason "Completed"
//	                              for 0, "Error" otherwise, as containerd.
//	(neither of the two)          the container runs until it is stopped.
//	KPLANE_SIM_LOG=TEXT           each line of TEXT is written to stdout,
//	                              stamped with the start time, when the
//	                              container starts.
//	KPLANE_SIM_EXEC_EXIT_CODE=C   every ExecSync (an exec probe) in the
//	                              container exits with C (default 0).
//	KPLANE_SIM_READY_AFTER_SECONDS=N
//	                              ExecSync exits 1 until the container has
//	                              run N seconds, then as above: a readiness
//	                              probe that passes after a while.
//	KPLANE_SIM_IGNORE_SIGTERM=true
//	                              StopContainer takes the whole timeout (the
//	                              grace period), then the container exits 137
//	                              as if killed; without it a stopped
//	                              container exits 143 (SIGTERM) at once.
//	KPLANE_SIM_CPU_USAGE=Q        ContainerStats reports Q cores (a quantity:
//	                              "250m") as the running container's CPU
//	                              usage (default 0): a declared usage, for
//	                              kubectl top and the HPA; nothing is spent.
//	KPLANE_SIM_MEMORY_USAGE=Q     likewise Q bytes ("64Mi") of working set.
//
// Images:
//
//	a repository path containing "notfound"
//	                              (e.g. "example.com/notfound/web:1",
//	                              "notfound:latest") fails PullImage with
//	                              codes.NotFound, like a registry that has no
//	                              such image: ErrImagePull / ImagePullBackOff.
//	a tag ending in "pull-<duration>"
//	                              (e.g. "web:v1-pull-3s", "web:pull-250ms")
//	                              makes PullImage of that image take the
//	                              duration instead of Config.PullLatency.
//	any other reference           pulls after Config.PullLatency. The image
//	                              gets an ID and digest derived from its
//	                              normalised name and a synthetic size
//	                              between 5 and 50 MiB.
//
// CreateContainer fails with NotFound for an image that was not pulled (or
// preloaded through Config.Images), as containerd does.
//
// Mounts: a container's CRI Mounts are recorded as given and reported in
// its ContainerStatus.Mounts; a scripted container's shell reads and
// writes the mounted directories and files (see Scripted containers),
// nothing else reads them. The node agent has materialised the host side of every volume before it
// asks for the container (files of configMap, secret, downwardAPI and
// projected volumes, emptyDir directories), exactly as on containerd, so
// what a pod mounts — and what keeps it from starting — is the same on
// both runtimes (except that nothing there is a tmpfs: Memory emptyDirs,
// secret and projected volumes are plain directories).
//
// Pod sandboxes:
//
//	annotation sim.kplane.io/run-pod-sandbox-error: MESSAGE
//	                              RunPodSandbox fails with MESSAGE
//	                              (FailedCreatePodSandBox).
//	pod network                   the sandbox gets the next free address of
//	                              the pod CIDR (Config.PodCIDR, or the one
//	                              UpdateRuntimeConfig gives, as the kubelet
//	                              does); no pod CIDR means no pod IP, and the
//	                              node agent must assign one itself.
//	host network (NODE)           no pod IP: the node's address is the pod's.
//
// The address is released when the sandbox stops. Network and broadcast
// addresses and the first host address (the bridge's gateway, by
// convention) are never handed out.
//
// # Scripted containers
//
// A container whose command (with its args) is a shell with -c ("sh",
// "bash", "ash" or "dash" in any directory; -c may be combined with e, u
// and x, as in "-ec") or one of the applets below run directly ("sleep
// 3600", "/bin/true"), and which sets neither KPLANE_SIM_RUN_SECONDS nor
// KPLANE_SIM_EXIT_CODE, has that command run by mvdan.cc/sh's POSIX shell
// interpreter inside the runtime: the script's exit status is the
// container's exit code, its stdout and stderr go to the container's log
// (up to 10 MiB), and StopContainer ends it with 143. The script sees the
// container's environment (plus HOSTNAME, and PATH and HOME if unset) and
// its own filesystem, kept in memory (at most 4 MiB of file content, then
// "no space left on device"), which holds the usual top directories,
// /etc/hostname, /etc/resolv.conf written from the sandbox's DnsConfig
// (search, nameserver and options lines, as containerd writes it; absent
// without one) and an empty /dev/termination-log, and nothing of the
// host's but the container's CRI mounts: each mount of a directory is its
// host directory (a volume the node agent prepared), read and written in
// place (refused when the mount is read-only), reached through os.Root so
// that no path or symbolic link leads out of it; each mount of a regular
// file (a subPath of one file, the node agent's termination message file
// at /dev/termination-log) is that host file, read and written in place,
// never removed. Output that ends without a newline is logged as a
// partial line ("P"), as containerd logs it. A read-only root
// filesystem (readonlyRootfs) refuses every change outside the mounts. The applets are sleep (on Config.Clock), cat, true, false, env,
// printenv, hostname, id (the security context's runAsUser and
// runAsGroup), touch, mkdir, rm, ls, date, expr (integer arithmetic and
// comparisons), wc and awk (programs that print fields only, such as
// `{print $1}`; any other program exits 2); the shell's builtins (echo,
// printf, test, read, ...) are the interpreter's. Any other command is
// "not found" (exit 127), as in an image without it: the image's own
// binaries are not run. ExecSync and a streaming exec into a scripted
// container run their command the same way, in the same filesystem, when
// it is a shell -c or an applet; otherwise the exec rules above answer.
// Containers with any other command follow the environment rules.
//
// # Probes
//
// Nothing listens in a simulated container, so an httpGet or tcpSocket
// probe cannot reach it. A node agent on this runtime (Version's
// RuntimeName is "kplane-sim") should run every probe as an ExecSync —
// the command naming the probe is only informational — so that all probe
// kinds follow the exec rules above. Lifecycle hooks go the same way: an
// exec hook is an ExecSync (so it runs in a scripted container's shell),
// and an httpGet hook is an ExecSync naming it.
//
// # Time
//
// Every time comes from Config.Clock (the real clock by default), and
// containers change state lazily: a container whose run time is over is
// reported exited, at the exact time its rules say, by the next call that
// looks at it. No goroutine or timer is kept per container (a scripted
// container's running script is the exception), so one process can carry
// many runtimes with thousands of containers; a test steps a fake
// clock and observes the transitions without sleeping.
package simruntime
