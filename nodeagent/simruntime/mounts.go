// This file holds a scripted container's view of its files: the in-memory
// root filesystem with the container's CRI mounts laid over it, each mount
// a host directory the node agent prepared (a volume), reached through
// os.Root so that nothing outside it — by "..", an absolute path or a
// symbolic link — can be reached, or a host file (a subPath of one file,
// the termination message file).

package simruntime

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerFS is what the shell and its applets read and write.
type containerFS interface {
	open(p string, flag int, perm fs.FileMode) (io.ReadWriteCloser, error)
	stat(p string) (fs.FileInfo, error)
	readDir(p string) ([]fs.DirEntry, error)
	mkdir(p string, parents bool) error
	remove(p string, recursive bool) error
	touch(p string) error
}

var (
	_ containerFS = (*memFS)(nil)
	_ containerFS = (*mountedFS)(nil)
	_ containerFS = hostDir{}
	_ containerFS = hostFile{}
)

// mountedFS dispatches each path to the mount holding it (the deepest
// whose container path is a prefix of it) or to the root.
type mountedFS struct {
	root   *memFS
	mounts []mountPoint // deepest first
}

type mountPoint struct {
	at string      // the container path, cleaned
	fs containerFS // a hostDir or a hostFile
}

// newMountedFS lays mounts over root. The mount points are made in root
// first (so listings show them), before root may turn read-only: a
// directory for a mounted directory, an empty file for a mounted regular
// file. A mount of anything else (or of a host path that does not exist)
// is left out.
func newMountedFS(root *memFS, mounts []*runtimeapi.Mount) *mountedFS {
	m := &mountedFS{root: root}
	for _, mnt := range mounts {
		if mnt.GetHostPath() == "" || mnt.GetContainerPath() == "" {
			continue
		}
		info, err := os.Stat(mnt.GetHostPath())
		if err != nil {
			continue
		}
		at := resolve("/", mnt.GetContainerPath())
		switch {
		case info.IsDir():
			_ = root.mkdir(at, true)
			m.mounts = append(m.mounts, mountPoint{at: at, fs: hostDir{path: mnt.GetHostPath(), readOnly: mnt.GetReadonly()}})
		case info.Mode().IsRegular() && at != "/":
			_ = root.mkdir(path.Dir(at), true)
			if f, err := root.open(at, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
				_ = f.Close()
			}
			m.mounts = append(m.mounts, mountPoint{at: at, fs: hostFile{path: mnt.GetHostPath(), name: path.Base(at), readOnly: mnt.GetReadonly()}})
		}
	}
	// Deepest first: a mount inside another one wins for its paths.
	for i := 1; i < len(m.mounts); i++ {
		for j := i; j > 0 && len(m.mounts[j].at) > len(m.mounts[j-1].at); j-- {
			m.mounts[j], m.mounts[j-1] = m.mounts[j-1], m.mounts[j]
		}
	}
	return m
}

// route finds where p lives and its path there.
func (m *mountedFS) route(p string) (containerFS, string) {
	for _, mp := range m.mounts {
		if p == mp.at {
			return mp.fs, "."
		}
		if strings.HasPrefix(p, mp.at+"/") || mp.at == "/" {
			return mp.fs, strings.TrimPrefix(strings.TrimPrefix(p, mp.at), "/")
		}
	}
	return m.root, p
}

func (m *mountedFS) open(p string, flag int, perm fs.FileMode) (io.ReadWriteCloser, error) {
	f, rel := m.route(p)
	return f.open(rel, flag, perm)
}

func (m *mountedFS) stat(p string) (fs.FileInfo, error) {
	f, rel := m.route(p)
	return f.stat(rel)
}

func (m *mountedFS) readDir(p string) ([]fs.DirEntry, error) {
	f, rel := m.route(p)
	return f.readDir(rel)
}

func (m *mountedFS) mkdir(p string, parents bool) error {
	f, rel := m.route(p)
	return f.mkdir(rel, parents)
}

func (m *mountedFS) remove(p string, recursive bool) error {
	f, rel := m.route(p)
	if rel == "." {
		return pathErr("remove", p, syscall.EBUSY) // a mount point
	}
	return f.remove(rel, recursive)
}

func (m *mountedFS) touch(p string) error {
	f, rel := m.route(p)
	return f.touch(rel)
}

// hostDir is one mount's host directory; paths are relative to it.
type hostDir struct {
	path     string
	readOnly bool
}

// do opens the directory as an os.Root for one operation (a container
// holds no descriptor between them).
func (h hostDir) do(op, rel string, write bool, f func(r *os.Root) error) error {
	if write && h.readOnly {
		return pathErr(op, rel, syscall.EROFS)
	}
	r, err := os.OpenRoot(h.path)
	if err != nil {
		return pathErr(op, rel, fs.ErrNotExist)
	}
	defer r.Close()
	return f(r)
}

func (h hostDir) open(rel string, flag int, perm fs.FileMode) (io.ReadWriteCloser, error) {
	var file *os.File
	write := flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC) != 0
	err := h.do("open", rel, write, func(r *os.Root) error {
		var err error
		file, err = r.OpenFile(rel, flag, perm)
		return err
	})
	if err != nil {
		return nil, err
	}
	return file, nil
}

func (h hostDir) stat(rel string) (fs.FileInfo, error) {
	var info fs.FileInfo
	err := h.do("stat", rel, false, func(r *os.Root) error {
		var err error
		info, err = r.Stat(rel)
		return err
	})
	return info, err
}

func (h hostDir) readDir(rel string) ([]fs.DirEntry, error) {
	var out []fs.DirEntry
	err := h.do("open", rel, false, func(r *os.Root) error {
		d, err := r.Open(rel)
		if err != nil {
			return err
		}
		defer d.Close()
		out, err = d.ReadDir(-1)
		return err
	})
	return out, err
}

func (h hostDir) mkdir(rel string, parents bool) error {
	return h.do("mkdir", rel, true, func(r *os.Root) error {
		if parents {
			return r.MkdirAll(rel, 0o755)
		}
		return r.Mkdir(rel, 0o755)
	})
}

func (h hostDir) remove(rel string, recursive bool) error {
	return h.do("remove", rel, true, func(r *os.Root) error {
		if recursive {
			if _, err := r.Lstat(rel); err != nil {
				return err
			}
			return r.RemoveAll(rel)
		}
		return r.Remove(rel)
	})
}

func (h hostDir) touch(rel string) error {
	return h.do("touch", rel, true, func(r *os.Root) error {
		f, err := r.OpenFile(rel, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		now := time.Now()
		return r.Chtimes(rel, now, now)
	})
}

// hostFile is a mount of one host file; the only path in it is "." (the
// file itself): anything below it is not a directory. It is opened by its
// host path, which the node agent made (not the container), without
// following a symbolic link.
type hostFile struct {
	path     string
	name     string // the mount point's base name, what stat shows
	readOnly bool
}

func (h hostFile) check(op, rel string, write bool) error {
	if rel != "." {
		return pathErr(op, rel, syscall.ENOTDIR)
	}
	if write && h.readOnly {
		return pathErr(op, h.name, syscall.EROFS)
	}
	return nil
}

func (h hostFile) open(rel string, flag int, perm fs.FileMode) (io.ReadWriteCloser, error) {
	write := flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC) != 0
	if err := h.check("open", rel, write); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(h.path, flag|syscall.O_NOFOLLOW, perm)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, pathErr("open", h.name, err)
	}
	return f, nil
}

func (h hostFile) stat(rel string) (fs.FileInfo, error) {
	if err := h.check("stat", rel, false); err != nil {
		return nil, err
	}
	info, err := os.Lstat(h.path)
	if err != nil {
		return nil, pathErr("stat", h.name, fs.ErrNotExist)
	}
	return memInfo{name: h.name, size: info.Size(), mode: info.Mode(), mtime: info.ModTime()}, nil
}

func (h hostFile) readDir(rel string) ([]fs.DirEntry, error) {
	return nil, pathErr("open", rel, syscall.ENOTDIR)
}

func (h hostFile) mkdir(rel string, _ bool) error {
	if err := h.check("mkdir", rel, false); err != nil {
		return err
	}
	return pathErr("mkdir", h.name, fs.ErrExist)
}

func (h hostFile) remove(rel string, _ bool) error {
	if err := h.check("remove", rel, true); err != nil {
		return err
	}
	return pathErr("remove", h.name, syscall.EBUSY)
}

func (h hostFile) touch(rel string) error {
	if err := h.check("touch", rel, true); err != nil {
		return err
	}
	now := time.Now()
	return os.Chtimes(h.path, now, now)
}
