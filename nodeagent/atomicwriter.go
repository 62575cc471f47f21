// This file holds the atomic writer: how the files of a configMap, secret,
// downwardAPI or projected volume are laid out so that an update reaches a
// running container all at once, as the kubelet's layout does.

package nodeagent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// fileProjection is one file of a volume's payload: its content and mode.
type fileProjection struct {
	data []byte
	mode os.FileMode
}

// dataDirName is the symlink every user-visible name goes through; it
// points at the current timestamped directory, and swapping it (a rename
// over it) is what makes an update atomic.
const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
)

// validatePayloadPath refuses a payload path that is empty, absolute,
// climbs out with "..", or starts with ".." (names the writer uses).
func validatePayloadPath(p string) error {
	switch {
	case p == "":
		return errors.New("invalid path: must not be empty")
	case filepath.IsAbs(p):
		return fmt.Errorf("invalid path: must be relative path: %s", p)
	case strings.HasPrefix(p, ".."):
		return fmt.Errorf("invalid path: must not start with '..': %s", p)
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return fmt.Errorf("invalid path: must not contain '..': %s", p)
	}
	return nil
}

// writeAtomic makes dir hold exactly payload (paths relative to dir):
//
//	dir/..2026_11_27_08_00_00.123456/<files>   the current content
//	dir/..data -> ..2026_11_27_08_00_00.123456
//	dir/<first path element> -> ..data/<first path element>
//
// When the payload equals what ..data already holds nothing is written
// (changed is false). Otherwise a new timestamped directory is filled, the
// ..data link is replaced by a rename (readers see the old files or the new
// ones, never a mix), user-visible links are added for new names and
// removed for names that left the payload, and the old directory is
// removed.
func writeAtomic(dir string, payload map[string]fileProjection) (changed bool, err error) {
	clean := make(map[string]fileProjection, len(payload))
	for p, f := range payload {
		if err := validatePayloadPath(p); err != nil {
			return false, err
		}
		clean[path.Clean(p)] = f
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("atomic writer: %w", err)
	}
	dataLink := filepath.Join(dir, dataDirName)
	oldTS, err := os.Readlink(dataLink)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("atomic writer: %w", err)
	}
	if oldTS != "" && sameContent(filepath.Join(dir, oldTS), clean) && linksMatch(dir, clean) {
		return false, nil
	}

	tsDir, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return false, fmt.Errorf("atomic writer: %w", err)
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return false, fmt.Errorf("atomic writer: %w", err)
	}
	for p, f := range clean {
		full := filepath.Join(tsDir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return false, fmt.Errorf("atomic writer: %w", err)
		}
		if err := os.WriteFile(full, f.data, f.mode); err != nil {
			return false, fmt.Errorf("atomic writer: %w", err)
		}
		// WriteFile's mode passes through the umask: set it as asked.
		if err := os.Chmod(full, f.mode); err != nil {
			return false, fmt.Errorf("atomic writer: %w", err)
		}
	}
	tmpLink := filepath.Join(dir, newDataDirName)
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(tsDir), tmpLink); err != nil {
		return false, fmt.Errorf("atomic writer: %w", err)
	}
	if err := os.Rename(tmpLink, dataLink); err != nil {
		return false, fmt.Errorf("atomic writer: swap %s: %w", dataDirName, err)
	}

	// User-visible names: one link per first path element.
	want := map[string]bool{}
	for p := range clean {
		want[strings.SplitN(p, "/", 2)[0]] = true
	}
	for name := range want {
		link := filepath.Join(dir, name)
		target := filepath.Join(dataDirName, name)
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return true, fmt.Errorf("atomic writer: %w", err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true, fmt.Errorf("atomic writer: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "..") || want[n] {
			continue
		}
		if e.Type()&fs.ModeSymlink != 0 {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return true, fmt.Errorf("atomic writer: %w", err)
			}
		}
	}
	if oldTS != "" && oldTS != filepath.Base(tsDir) {
		if err := os.RemoveAll(filepath.Join(dir, oldTS)); err != nil {
			return true, fmt.Errorf("atomic writer: %w", err)
		}
	}
	return true, nil
}

// sameContent reports whether tsDir holds exactly payload, modes included.
func sameContent(tsDir string, payload map[string]fileProjection) bool {
	n := 0
	same := true
	err := filepath.WalkDir(tsDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(tsDir, p)
		f, ok := payload[filepath.ToSlash(rel)]
		if !ok {
			same = false
			return fs.SkipAll
		}
		n++
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if info.Mode().Perm() != f.mode.Perm() || !bytes.Equal(b, f.data) {
			same = false
			return fs.SkipAll
		}
		return nil
	})
	return err == nil && same && n == len(payload)
}

// linksMatch reports whether every first path element of payload has its
// user-visible link.
func linksMatch(dir string, payload map[string]fileProjection) bool {
	for p := range payload {
		name := strings.SplitN(p, "/", 2)[0]
		if cur, err := os.Readlink(filepath.Join(dir, name)); err != nil || cur != filepath.Join(dataDirName, name) {
			return false
		}
	}
	return true
}
