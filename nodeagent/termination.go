// This file holds termination messages: the host file the agent mounts at
// a container's terminationMessagePath, and the message read from it (or,
// with FallbackToLogsOnError, from the tail of the log) when the
// container exits, bounded as the kubelet bounds it.

package nodeagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"unicode/utf8"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/nodeagent/crilog"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// The kubelet's bounds on termination messages.
const (
	// maxTerminationMessage is the most of the file that is read: its
	// last 4 KiB.
	maxTerminationMessage = 4 * 1024
	// maxTerminationLogLines and maxTerminationLogBytes bound the log
	// tail FallbackToLogsOnError uses: the last 80 lines, of which the
	// last 2 KiB.
	maxTerminationLogLines = 80
	maxTerminationLogBytes = 2 * 1024
	// maxPodTerminationMessages is shared by all the containers of a pod
	// (init and ephemeral ones too): each terminated state's message is
	// cut to its share.
	maxPodTerminationMessages = 12 * 1024
)

// The container annotations that carry a container's termination message
// settings to its CRI status (the kubelet's names), so that the message
// can be read from the status alone, by an agent that adopted the
// container too.
const (
	annotationTerminationMessagePath   = "io.kubernetes.container.terminationMessagePath"
	annotationTerminationMessagePolicy = "io.kubernetes.container.terminationMessagePolicy"
)

// policyFallbackToLogsOnError is the terminationMessagePolicy that reads
// the log when the file is empty and the container failed.
const policyFallbackToLogsOnError = "FallbackToLogsOnError"

// terminationMessageMount makes the host file for one instance of
// container c of pod uid — <pod dir>/containers/<name>/<random id>, empty
// and writable by every user (the container may run as any) — and returns
// the CRI mount of it at c's terminationMessagePath. With no path set
// there is no file and no mount (nil).
func (a *Agent) terminationMessageMount(uid string, c *corev1.Container) (*runtimeapi.Mount, error) {
	at := c.GetTerminationMessagePath()
	if at == "" {
		return nil, nil
	}
	dir := filepath.Join(a.podDir(uid), "containers", c.GetName())
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("termination message file: %w", err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand documents it)
	file := filepath.Join(dir, hex.EncodeToString(id[:]))
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if err != nil {
		return nil, fmt.Errorf("termination message file: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("termination message file: %w", err)
	}
	// The umask took bits off the mode given to open.
	if err := os.Chmod(file, 0o666); err != nil {
		return nil, fmt.Errorf("termination message file: %w", err)
	}
	return &runtimeapi.Mount{ContainerPath: absPath(at), HostPath: file}, nil
}

// absPath makes a container path absolute, as the kubelet does before
// mounting at it.
func absPath(p string) string {
	if path.IsAbs(p) {
		return p
	}
	return "/" + p
}

// terminationAnnotations are the annotations of a container's CRI config
// recording its termination message settings.
func terminationAnnotations(c *corev1.Container, into map[string]string) {
	into[annotationTerminationMessagePath] = c.GetTerminationMessagePath()
	into[annotationTerminationMessagePolicy] = c.GetTerminationMessagePolicy()
}

// addTerminationMessage appends an exited instance's termination message
// to its status message (after ": " when the runtime gave one), as the
// kubelet does, reading it from what the status says: the annotations
// (path and policy), the mount at the path (the host file) and logPath,
// the instance's log. The file's last 4 KiB are the message; with
// FallbackToLogsOnError, when the file is empty or missing and the
// container failed (exit code not 0, and it did run: the reason is not
// ContainerCannotRun), the message is the log's tail instead. st is the
// caller's own (a fresh status from the runtime) and is changed in place.
func addTerminationMessage(ctx context.Context, st *runtimeapi.ContainerStatus, logPath string) {
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		return
	}
	ann := st.GetAnnotations()
	fallback := ann[annotationTerminationMessagePolicy] == policyFallbackToLogsOnError &&
		st.GetExitCode() != 0 && st.GetReason() != "ContainerCannotRun"
	msg, checkLogs := fileMessage(st, ann[annotationTerminationMessagePath], fallback)
	if checkLogs && logPath != "" {
		msg = logTail(ctx, logPath)
	}
	if msg == "" {
		return
	}
	if st.Message != "" {
		st.Message += ": "
	}
	st.Message += msg
}

// fileMessage reads the termination message file mounted at at; checkLogs
// says whether the log should be read instead (fallback, and no message
// in the file).
func fileMessage(st *runtimeapi.ContainerStatus, at string, fallback bool) (msg string, checkLogs bool) {
	if at == "" {
		return "", fallback
	}
	at = absPath(at)
	for _, m := range st.GetMounts() {
		if m.GetContainerPath() != at {
			continue
		}
		data, err := readTail(m.GetHostPath(), maxTerminationMessage)
		if errors.Is(err, fs.ErrNotExist) {
			return "", fallback
		}
		if err != nil {
			return fmt.Sprintf("Error on reading termination log %s: %v", m.GetHostPath(), err), false
		}
		return string(data), fallback && len(data) == 0
	}
	return "", fallback
}

// readTail reads at most the last n bytes of the file at p.
func readTail(p string, n int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size == 0 {
		return nil, nil
	}
	if _, err := f.Seek(-min(size, n), io.SeekEnd); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// logTail is the last 80 lines of the log at logPath, both streams, of
// which the last 2 KiB.
func logTail(ctx context.Context, logPath string) string {
	var tail lastBytes
	tail.max = maxTerminationLogBytes
	if err := crilog.Read(ctx, logPath, crilog.ReadOptions{Tail: maxTerminationLogLines}, &tail); err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	return string(tail.buf)
}

// lastBytes is a writer that keeps the last max bytes written to it.
type lastBytes struct {
	max int
	buf []byte
}

func (w *lastBytes) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= w.max {
		w.buf = append(w.buf[:0], p[len(p)-w.max:]...)
		return n, nil
	}
	if over := len(w.buf) + len(p) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	w.buf = append(w.buf, p...)
	return n, nil
}

// boundTerminationMessages cuts the message of every terminated state in
// st to the pod's share per container (12 KiB over all its containers),
// as the kubelet does before it writes a status. What is left is made
// valid UTF-8 the way a JSON encoder shows invalid bytes (each one as
// U+FFFD): a status is a protobuf message, whose strings must be UTF-8.
func boundTerminationMessages(st *corev1.PodStatus, containers int) {
	per := maxPodTerminationMessages
	if containers > 0 {
		per /= containers
	}
	bound := func(t *corev1.ContainerStateTerminated) {
		if t == nil {
			return
		}
		if len(t.Message) > per {
			t.Message = t.Message[:per]
		}
		t.Message = validUTF8(t.Message)
	}
	for _, list := range [][]*corev1.ContainerStatus{st.GetInitContainerStatuses(), st.GetContainerStatuses(), st.GetEphemeralContainerStatuses()} {
		for _, cs := range list {
			bound(cs.GetState().GetTerminated())
			bound(cs.GetLastTerminationState().GetTerminated())
		}
	}
}

// validUTF8 replaces each byte of s that is not part of valid UTF-8 with
// U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	out := make([]rune, 0, len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		out = append(out, r) // RuneError for an invalid byte (size 1)
		i += size
	}
	return string(out)
}
