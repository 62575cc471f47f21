// Unit tests of the volume building blocks: the atomic writer's layout and
// updates, subPath resolution, hostPath type checks, the token renewal
// point and the downwardAPI map format.

package nodeagent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		_ = filepath.WalkDir(filepath.Join(dir, e.Name()), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(p) // through the links
			if err != nil {
				t.Fatal(err)
			}
			if st.IsDir() {
				if d.Type()&os.ModeSymlink != 0 {
					sub := readTree(t, p)
					for k, v := range sub {
						rel, _ := filepath.Rel(dir, filepath.Join(p, k))
						out[rel] = v
					}
				}
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(dir, p)
			out[rel] = string(b) + "|" + st.Mode().Perm().String()
			return nil
		})
	}
	return out
}

func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	changed, err := writeAtomic(dir, map[string]fileProjection{
		"a":     {data: []byte("one"), mode: 0o644},
		"sub/b": {data: []byte("two"), mode: 0o400},
	})
	if err != nil || !changed {
		t.Fatalf("first write: changed %v, err %v", changed, err)
	}
	want := map[string]string{"a": "one|-rw-r--r--", "sub/b": "two|-r--------"}
	if got := readTree(t, dir); !mapsEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// The user-visible names are links through ..data.
	for name, target := range map[string]string{"a": "..data/a", "sub": "..data/sub"} {
		if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || got != target {
			t.Errorf("link %s: got %q (%v), want %q", name, got, err, target)
		}
	}
	first, _ := os.Readlink(filepath.Join(dir, dataDirName))
	if !strings.HasPrefix(first, "..20") {
		t.Errorf("..data points at %q, want a timestamped directory", first)
	}

	// The same payload again writes nothing.
	changed, err = writeAtomic(dir, map[string]fileProjection{
		"a":     {data: []byte("one"), mode: 0o644},
		"sub/b": {data: []byte("two"), mode: 0o400},
	})
	if err != nil || changed {
		t.Fatalf("same payload: changed %v, err %v; want no change", changed, err)
	}

	// An update: new content, a name gone, a name added; the old
	// timestamped directory is removed.
	changed, err = writeAtomic(dir, map[string]fileProjection{
		"a": {data: []byte("uno"), mode: 0o644},
		"c": {data: []byte("tres"), mode: 0o644},
	})
	if err != nil || !changed {
		t.Fatalf("update: changed %v, err %v", changed, err)
	}
	want = map[string]string{"a": "uno|-rw-r--r--", "c": "tres|-rw-r--r--"}
	if got := readTree(t, dir); !mapsEqual(got, want) {
		t.Fatalf("after update got %v, want %v", got, want)
	}
	if _, err := os.Lstat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("old directory %s still there (%v)", first, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("link sub of a removed key still there (%v)", err)
	}

	// Paths that would leave the volume are refused.
	for _, p := range []string{"../x", "/etc/x", "a/../../x", "..data/x", ""} {
		if _, err := writeAtomic(dir, map[string]fileProjection{p: {data: nil, mode: 0o644}}); err == nil {
			t.Errorf("path %q: got no error, want a refusal", p)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestResolveSubPath(t *testing.T) {
	root := filepath.Join(t.TempDir(), "vol")
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "conf"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "conf", "app.yaml"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("conf/app.yaml", filepath.Join(root, "inside")); err != nil {
		t.Fatal(err)
	}
	realRoot, _ := filepath.EvalSymlinks(root)
	tests := []struct {
		name    string
		sub     string
		want    string // relative to the volume; "" with wantErr
		wantErr string
	}{
		{name: "a file", sub: "conf/app.yaml", want: "conf/app.yaml"},
		{name: "a directory", sub: "conf", want: "conf"},
		{name: "a symlink inside", sub: "inside", want: "conf/app.yaml"},
		{name: "missing is made", sub: "new/dir", want: "new/dir"},
		{name: "dot-dot", sub: "../x", wantErr: "must not contain '..'"},
		{name: "dot-dot inside", sub: "conf/../../x", wantErr: "must not contain '..'"},
		{name: "absolute", sub: "/etc", wantErr: "must not be an absolute path"},
		{name: "symlink out", sub: "escape", wantErr: "outside the volume"},
		{name: "made through a symlink out", sub: "escape/new", wantErr: "outside the volume"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveSubPath(root, tt.sub)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != filepath.Join(realRoot, tt.want) {
				t.Fatalf("got %q, %v; want %q", got, err, filepath.Join(realRoot, tt.want))
			}
		})
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("something was made outside the volume: %v", entries)
	}
}

func TestContainerMountsSubPathExpr(t *testing.T) {
	root := t.TempDir()
	c := &corev1.Container{Name: "app", VolumeMounts: []*corev1.VolumeMount{
		{Name: "data", MountPath: "/data", SubPathExpr: "$(POD_NAME)/logs", MountPropagation: ptr("HostToContainer")},
		{Name: "cfg", MountPath: "/etc/cfg", ReadOnly: false},
	}}
	env := []*runtimeapi.KeyValue{{Key: "POD_NAME", Value: "web-1"}}
	got, err := containerMounts(c, map[string]volumePath{"data": {path: root}, "cfg": {path: root, readOnly: true}}, env)
	if err != nil {
		t.Fatal(err)
	}
	realRoot, _ := filepath.EvalSymlinks(root)
	if got[0].GetHostPath() != filepath.Join(realRoot, "web-1", "logs") || got[0].GetPropagation() != runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER || got[0].GetReadonly() {
		t.Errorf("data mount: got %v", got[0])
	}
	if !got[1].GetReadonly() {
		t.Errorf("cfg mount: got %v, want read-only (a configMap-like volume)", got[1])
	}
	if _, err := containerMounts(&corev1.Container{Name: "app", VolumeMounts: []*corev1.VolumeMount{{Name: "nope", MountPath: "/x"}}}, nil, nil); err == nil {
		t.Error("a mount of an unknown volume: got no error")
	}
	if got := expandSubPath("$$(A)/$(A)/$(B)", env[:0]); got != "$(A)/$(A)/$(B)" {
		t.Errorf("expand: got %q", got)
	}
}

func TestCheckHostPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tests := []struct {
		name, path, typ, wantErr string
		wantDir, wantFile        bool
	}{
		{name: "unset type", path: filepath.Join(dir, "missing"), typ: ""},
		{name: "DirectoryOrCreate makes it", path: filepath.Join(dir, "made"), typ: "DirectoryOrCreate", wantDir: true},
		{name: "DirectoryOrCreate on a file", path: file, typ: "DirectoryOrCreate", wantErr: "is not a directory"},
		{name: "Directory", path: dir, typ: "Directory"},
		{name: "Directory missing", path: filepath.Join(dir, "nodir"), typ: "Directory", wantErr: "hostPath type check failed: " + filepath.Join(dir, "nodir") + " is not a directory"},
		{name: "FileOrCreate makes it", path: filepath.Join(dir, "newfile"), typ: "FileOrCreate", wantFile: true},
		{name: "File on a directory", path: dir, typ: "File", wantErr: "is not a file"},
		{name: "File", path: file, typ: "File"},
		{name: "Socket", path: sock, typ: "Socket"},
		{name: "Socket on a file", path: file, typ: "Socket", wantErr: "is not a socket file"},
		{name: "CharDevice", path: "/dev/null", typ: "CharDevice"},
		{name: "BlockDevice on a char device", path: "/dev/null", typ: "BlockDevice", wantErr: "is not a block device"},
		{name: "unknown type", path: dir, typ: "Weird", wantErr: "Weird is an invalid volume type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkHostPath(tt.path, tt.typ)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(tt.path)
			if (tt.wantDir && (err != nil || !st.IsDir())) || (tt.wantFile && (err != nil || !st.Mode().IsRegular())) {
				t.Errorf("after the check: %v, %v", st, err)
			}
		})
	}
}

func TestTokenRenewal(t *testing.T) {
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := cachedToken{token: "t", issued: issued, expires: issued.Add(3607 * time.Second)}
	if c.due(issued.Add(2885 * time.Second)) {
		t.Error("due before 80 % of the lifetime")
	}
	if !c.due(issued.Add(2886 * time.Second)) {
		t.Error("not due at 80 % of the lifetime")
	}
	long := cachedToken{token: "t", issued: issued, expires: issued.Add(48 * time.Hour)}
	if !long.due(issued.Add(24*time.Hour + time.Second)) {
		t.Error("a token older than 24h is not due")
	}
}

func TestFormatMap(t *testing.T) {
	got := formatMap(map[string]string{"b": "two \"q\"", "a": "1\n2"})
	if want := "a=\"1\\n2\"\nb=\"two \\\"q\\\"\""; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := formatMap(nil); got != "" {
		t.Errorf("empty map: got %q", got)
	}
}

// countingObjects is an envObjects that counts its gets.
type countingObjects struct{ gets int }

func (c *countingObjects) ConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	c.gets++
	if name == "missing" {
		return nil, apierrors.NewNotFound("", "configmaps", name)
	}
	return &corev1.ConfigMap{Data: map[string]string{"n": strconv.Itoa(c.gets)}}, nil
}

func (c *countingObjects) Secret(context.Context, string, string) (*corev1.Secret, error) {
	c.gets++
	return &corev1.Secret{}, nil
}

func TestTTLObjects(t *testing.T) {
	src := &countingObjects{}
	ctx := context.Background()
	c := newTTLObjects(src, time.Hour)
	for range 3 {
		if cm, err := c.ConfigMap(ctx, "ns", "shared"); err != nil || cm.Data["n"] != "1" {
			t.Fatalf("got %v, %v; want the first answer, cached", cm, err)
		}
	}
	for range 2 {
		if _, err := c.ConfigMap(ctx, "ns", "missing"); !apierrors.IsNotFound(err) {
			t.Fatalf("missing: got %v, want NotFound", err)
		}
	}
	if src.gets != 3 {
		t.Errorf("gets: got %d, want 3 (one cached object, errors not cached)", src.gets)
	}
	expired := newTTLObjects(src, 0)
	_, _ = expired.Secret(ctx, "ns", "s")
	_, _ = expired.Secret(ctx, "ns", "s")
	if src.gets != 5 {
		t.Errorf("gets with a zero TTL: got %d, want 5", src.gets)
	}
}
