// This file holds a scripted container's filesystem: directories and
// regular files kept in memory, bounded in bytes, which the shell
// interpreter and the applets of script.go read and write instead of the
// host's.

package simruntime

import (
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// memFSLimit is how many bytes of file content one container may hold.
const memFSLimit = 4 << 20

// errNoSpace is what a write past memFSLimit gets, as a full disk answers.
var errNoSpace = syscall.ENOSPC

// memFS is one container's filesystem. Paths are absolute and cleaned by
// the caller (see resolve); nothing outside it is reachable.
type memFS struct {
	mu    sync.Mutex
	nodes map[string]*memNode
	used  int64
	now   func() time.Time
	// readOnly refuses every change (a read-only root filesystem).
	readOnly bool
}

type memNode struct {
	dir   bool
	data  []byte
	mode  fs.FileMode
	mtime time.Time
}

// newMemFS returns a filesystem with the directories a container image
// usually has.
func newMemFS(now func() time.Time) *memFS {
	m := &memFS{nodes: map[string]*memNode{}, now: now}
	for _, d := range []string{"/", "/bin", "/dev", "/etc", "/home", "/root", "/tmp", "/usr", "/usr/bin", "/var", "/var/run"} {
		m.nodes[d] = &memNode{dir: true, mode: fs.ModeDir | 0o755, mtime: now()}
	}
	m.nodes["/tmp"].mode = fs.ModeDir | fs.ModeSticky | 0o777
	return m
}

// resolve makes name absolute against dir and cleans it; ".." cannot
// leave the root.
func resolve(dir, name string) string {
	if !path.IsAbs(name) {
		name = path.Join(dir, name)
	}
	return path.Clean("/" + name)
}

func pathErr(op, name string, err error) error { return &os.PathError{Op: op, Path: name, Err: err} }

// parentDirLocked checks that p's parent exists and is a directory.
func (m *memFS) parentDirLocked(op, p string) error {
	parent, ok := m.nodes[path.Dir(p)]
	switch {
	case !ok:
		return pathErr(op, p, fs.ErrNotExist)
	case !parent.dir:
		return pathErr(op, p, syscall.ENOTDIR)
	}
	return nil
}

// open opens p as os.OpenFile would.
func (m *memFS) open(p string, flag int, perm fs.FileMode) (io.ReadWriteCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.nodes[p]
	write := flag&(os.O_WRONLY|os.O_RDWR) != 0
	if m.readOnly && (write || flag&os.O_CREATE != 0) {
		return nil, pathErr("open", p, syscall.EROFS)
	}
	switch {
	case ok && n.dir:
		if write {
			return nil, pathErr("open", p, syscall.EISDIR)
		}
		return &memFile{fs: m, path: p, node: n}, nil
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", p, fs.ErrExist)
	case !ok && flag&os.O_CREATE == 0:
		return nil, pathErr("open", p, fs.ErrNotExist)
	case !ok:
		if err := m.parentDirLocked("open", p); err != nil {
			return nil, err
		}
		n = &memNode{mode: perm.Perm(), mtime: m.now()}
		m.nodes[p] = n
	}
	f := &memFile{fs: m, path: p, node: n, write: write, read: flag&os.O_WRONLY == 0}
	if write && flag&os.O_TRUNC != 0 {
		m.used -= int64(len(n.data))
		n.data = nil
		n.mtime = m.now()
	}
	if flag&os.O_APPEND != 0 {
		f.append = true
	}
	return f, nil
}

// stat describes p.
func (m *memFS) stat(p string) (fs.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.nodes[p]
	if !ok {
		return nil, pathErr("stat", p, fs.ErrNotExist)
	}
	return memInfo{name: path.Base(p), size: int64(len(n.data)), mode: n.mode, mtime: n.mtime}, nil
}

// readDir lists p's entries by name.
func (m *memFS) readDir(p string) ([]fs.DirEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.nodes[p]
	if !ok {
		return nil, pathErr("open", p, fs.ErrNotExist)
	}
	if !n.dir {
		return nil, pathErr("readdirent", p, syscall.ENOTDIR)
	}
	prefix := strings.TrimSuffix(p, "/") + "/"
	var out []fs.DirEntry
	for q, c := range m.nodes {
		if q == p || !strings.HasPrefix(q, prefix) || strings.Contains(q[len(prefix):], "/") {
			continue
		}
		out = append(out, fs.FileInfoToDirEntry(memInfo{name: path.Base(q), size: int64(len(c.data)), mode: c.mode, mtime: c.mtime}))
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// mkdir makes p; with parents, also its missing parents and no error if
// it exists.
func (m *memFS) mkdir(p string, parents bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n, ok := m.nodes[p]; ok {
		if parents && n.dir {
			return nil
		}
		return pathErr("mkdir", p, fs.ErrExist)
	}
	if m.readOnly {
		return pathErr("mkdir", p, syscall.EROFS)
	}
	if parents && p != "/" {
		if _, ok := m.nodes[path.Dir(p)]; !ok {
			m.mu.Unlock()
			err := m.mkdir(path.Dir(p), true)
			m.mu.Lock()
			if err != nil {
				return err
			}
		}
	}
	if err := m.parentDirLocked("mkdir", p); err != nil {
		return err
	}
	m.nodes[p] = &memNode{dir: true, mode: fs.ModeDir | 0o755, mtime: m.now()}
	return nil
}

// remove removes p; a directory only when recursive (or empty).
func (m *memFS) remove(p string, recursive bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.nodes[p]
	if !ok {
		return pathErr("remove", p, fs.ErrNotExist)
	}
	if p == "/" {
		return pathErr("remove", p, syscall.EBUSY)
	}
	if m.readOnly {
		return pathErr("remove", p, syscall.EROFS)
	}
	prefix := p + "/"
	if n.dir {
		for q := range m.nodes {
			if strings.HasPrefix(q, prefix) && !recursive {
				return pathErr("remove", p, syscall.ENOTEMPTY)
			}
		}
		for q, c := range m.nodes {
			if strings.HasPrefix(q, prefix) {
				m.used -= int64(len(c.data))
				delete(m.nodes, q)
			}
		}
	}
	m.used -= int64(len(n.data))
	delete(m.nodes, p)
	return nil
}

// touch creates p empty if absent and sets its time to now.
func (m *memFS) touch(p string) error {
	f, err := m.open(p, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	m.mu.Lock()
	f.(*memFile).node.mtime = m.now()
	m.mu.Unlock()
	return f.Close()
}

// memFile is an open file of a memFS.
type memFile struct {
	fs                  *memFS
	path                string
	node                *memNode
	off                 int64
	read, write, append bool
	closed              bool
}

func (f *memFile) Read(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return 0, fs.ErrClosed
	case !f.read:
		return 0, pathErr("read", f.path, syscall.EBADF)
	case f.node.dir:
		return 0, pathErr("read", f.path, syscall.EISDIR)
	case f.off >= int64(len(f.node.data)):
		return 0, io.EOF
	}
	n := copy(p, f.node.data[f.off:])
	f.off += int64(n)
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, fs.ErrClosed
	}
	if !f.write {
		return 0, pathErr("write", f.path, syscall.EBADF)
	}
	if f.append {
		f.off = int64(len(f.node.data))
	}
	end := f.off + int64(len(p))
	grow := max(0, end-int64(len(f.node.data)))
	if f.fs.used+grow > memFSLimit {
		return 0, pathErr("write", f.path, errNoSpace)
	}
	if grow > 0 {
		f.node.data = append(f.node.data, make([]byte, grow)...)
		f.fs.used += grow
	}
	copy(f.node.data[f.off:], p)
	f.off = end
	f.node.mtime = f.fs.now()
	return len(p), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return fs.ErrClosed
	}
	f.closed = true
	return nil
}

// memInfo is a memNode's fs.FileInfo.
type memInfo struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() fs.FileMode  { return i.mode }
func (i memInfo) ModTime() time.Time { return i.mtime }
func (i memInfo) IsDir() bool        { return i.mode.IsDir() }
func (i memInfo) Sys() any           { return nil }
