// This file turns a container's volumeMounts into CRI Mounts: the host
// path of each volume, its subPath or subPathExpr resolved as the kubelet
// resolves it (never outside the volume), read-only and propagation.

package nodeagent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// containerMounts is the CRI mounts of container c given where the pod's
// volumes are (vols) and c's environment (for subPathExpr). An error is
// the kubelet's CreateContainerConfigError message.
func containerMounts(c *corev1.Container, vols map[string]volumePath, env []*runtimeapi.KeyValue) ([]*runtimeapi.Mount, error) {
	var out []*runtimeapi.Mount
	for _, m := range c.GetVolumeMounts() {
		v, ok := vols[m.GetName()]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to mount into container %q", m.GetName(), c.GetName())
		}
		host := v.path
		sub := m.GetSubPath()
		if expr := m.GetSubPathExpr(); expr != "" {
			sub = expandSubPath(expr, env)
		}
		if sub != "" {
			p, err := resolveSubPath(v.path, sub)
			if err != nil {
				return nil, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q: %w", m.GetName(), c.GetName(), err)
			}
			host = p
		}
		out = append(out, &runtimeapi.Mount{
			ContainerPath: m.GetMountPath(),
			HostPath:      host,
			Readonly:      m.GetReadOnly() || v.readOnly,
			Propagation:   propagation(m.GetMountPropagation()),
		})
	}
	return out, nil
}

// propagation maps a volumeMount's mountPropagation to CRI's.
func propagation(p string) runtimeapi.MountPropagation {
	switch p {
	case "HostToContainer":
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
	case "Bidirectional":
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
	}
	return runtimeapi.MountPropagation_PROPAGATION_PRIVATE
}

// expandSubPath replaces $(VAR) in a subPathExpr with the container's
// environment: $$ is a literal $, and a reference to an unknown variable
// stays as written, as Kubernetes expands.
func expandSubPath(expr string, env []*runtimeapi.KeyValue) string {
	vals := map[string]string{}
	for _, kv := range env {
		vals[kv.GetKey()] = kv.GetValue()
	}
	var b strings.Builder
	for i := 0; i < len(expr); i++ {
		if expr[i] != '$' || i+1 >= len(expr) {
			b.WriteByte(expr[i])
			continue
		}
		switch expr[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(expr[i+2:], ')')
			if end < 0 {
				b.WriteString(expr[i:])
				return b.String()
			}
			name := expr[i+2 : i+2+end]
			if v, ok := vals[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(expr[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// resolveSubPath is the host path of sub inside the volume at root: sub
// must be relative without "..", and the path it names — after following
// every symlink — must stay inside the volume. A missing subPath is made
// as a directory with the volume's mode, as the kubelet does.
func resolveSubPath(root, sub string) (string, error) {
	if filepath.IsAbs(sub) {
		return "", fmt.Errorf("subPath %q must not be an absolute path", sub)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(sub), "/"), "..") {
		return "", fmt.Errorf("subPath %q must not contain '..'", sub)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	full := filepath.Join(root, sub)
	if _, err := os.Lstat(full); errors.Is(err, os.ErrNotExist) {
		st, err := os.Stat(realRoot)
		if err != nil {
			return "", err
		}
		// Make it one element at a time, each checked, so a symlink
		// planted on the way cannot lead the creation outside.
		cur := realRoot
		for _, el := range strings.Split(filepath.Clean(sub), string(filepath.Separator)) {
			next := filepath.Join(cur, el)
			if err := os.Mkdir(next, st.Mode().Perm()); err != nil && !errors.Is(err, os.ErrExist) {
				return "", err
			}
			if cur, err = filepath.EvalSymlinks(next); err != nil {
				return "", err
			}
			if !within(realRoot, cur) {
				return "", fmt.Errorf("subPath %q is outside the volume", sub)
			}
		}
	}
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		return "", err
	}
	if !within(realRoot, real) {
		return "", fmt.Errorf("subPath %q resolves to %s, outside the volume", sub, real)
	}
	return real, nil
}

// within reports whether p is root or below it.
func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}
