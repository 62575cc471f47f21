// This file holds how volumes leave the node: a pod's volumes unmounted
// and removed, mounts found through mountinfo, and the volumes of pods no
// longer on the node collected.

package nodeagent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// tearDownVolumes unmounts the pod's tmpfs volumes and removes its
// directory. It removes nothing while a mount under the directory
// remains (the content of what is mounted there is not the pod's to
// remove).
func (a *Agent) tearDownVolumes(uid string) error {
	if uid == "" {
		return nil
	}
	dir := a.podDir(uid)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil // a pod without volumes, or already removed
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	// Deepest first.
	slices.SortFunc(mounts, func(x, y string) int { return len(y) - len(x) })
	for _, m := range mounts {
		if err := unix.Unmount(m, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
	}
	if left, err := mountsUnder(dir); err != nil || len(left) > 0 {
		if err == nil {
			err = fmt.Errorf("still mounted: %v", left)
		}
		return fmt.Errorf("pod directory %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove pod directory: %w", err)
	}
	return nil
}

// releaseVolumes tears down the volumes of a pod that finished (Succeeded
// or Failed): no container of it will start again, so its tmpfs memory is
// given back now, as the kubelet unmounts the volumes of terminated pods,
// rather than when the pod is deleted, and the watches of the ConfigMaps
// and Secrets it used are released. A failure is retried at deletion.
func (a *Agent) releaseVolumes(rec *podRecord) {
	rec.volumes, rec.volumesReady, rec.tokens = nil, false, nil
	a.watches.unregister(rec.uid)
	if err := a.tearDownVolumes(rec.uid); err != nil {
		a.log.Warn("removing the volumes of a finished pod failed", "uid", rec.uid, "err", err)
	}
}

// mountsUnder lists the mount points at or below dir, from
// /proc/self/mountinfo.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// collectOrphanedVolumes removes the pod directories of pods the node no
// longer has (deleted while the agent was down).
func (a *Agent) collectOrphanedVolumes(live map[string]bool) {
	entries, err := os.ReadDir(filepath.Join(a.cfg.RootDir, "pods"))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.log.Warn("listing pod directories failed", "err", err)
		}
		return
	}
	for _, e := range entries {
		if !e.IsDir() || live[e.Name()] {
			continue
		}
		a.log.Info("removing an orphaned pod directory", "uid", e.Name())
		if err := a.tearDownVolumes(e.Name()); err != nil {
			a.log.Warn("removing an orphaned pod directory failed", "uid", e.Name(), "err", err)
		}
	}
}
