// Package ociimage writes a single-layer OCI image layout as a tar, the
// form `ctr images import` accepts, so tests can give a real containerd
// images without a registry. The layer holds the given files (typically one
// static binary); the config sets its entrypoint and environment.
package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// Image describes the image to write.
type Image struct {
	// Name is the full reference containerd records (the
	// io.containerd.image.name annotation), e.g. "kplane.test/hello:1".
	Name string
	// Files maps a path in the image (e.g. "hello") to its content; each is
	// written executable.
	Files map[string][]byte
	// Dirs are directories created in the image (mode 0755; 1777 for
	// "tmp"), e.g. "bin", "tmp".
	Dirs []string
	// Symlinks maps a path in the image to its target, e.g. "bin/sh" to
	// "busybox" (a multi-call binary's applets).
	Symlinks map[string]string
	// Entrypoint and Env go into the image config.
	Entrypoint []string
	Env        []string
}

// epoch stamps every tar entry so the same input gives the same digests.
var epoch = time.Unix(0, 0).UTC()

// Write writes img as an OCI image layout tar to w.
func Write(w io.Writer, img Image) error {
	layer, err := layerTar(img)
	if err != nil {
		return fmt.Errorf("ociimage: layer: %w", err)
	}
	layerDesc := v1.Descriptor{MediaType: v1.MediaTypeImageLayer, Digest: digest.FromBytes(layer), Size: int64(len(layer))}
	platform := v1.Platform{Architecture: runtime.GOARCH, OS: "linux"}
	config, err := json.Marshal(v1.Image{
		Created:  &epoch,
		Platform: platform,
		Config:   v1.ImageConfig{Entrypoint: img.Entrypoint, Env: img.Env},
		RootFS:   v1.RootFS{Type: "layers", DiffIDs: []digest.Digest{layerDesc.Digest}},
	})
	if err != nil {
		return fmt.Errorf("ociimage: config: %w", err)
	}
	configDesc := v1.Descriptor{MediaType: v1.MediaTypeImageConfig, Digest: digest.FromBytes(config), Size: int64(len(config))}
	manifest, err := json.Marshal(v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    []v1.Descriptor{layerDesc},
	})
	if err != nil {
		return fmt.Errorf("ociimage: manifest: %w", err)
	}
	manifestDesc := v1.Descriptor{
		MediaType: v1.MediaTypeImageManifest,
		Digest:    digest.FromBytes(manifest),
		Size:      int64(len(manifest)),
		Platform:  &platform,
		Annotations: map[string]string{
			"io.containerd.image.name": img.Name,
			v1.AnnotationRefName:       img.Name,
		},
	}
	index, err := json.Marshal(v1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageIndex,
		Manifests: []v1.Descriptor{manifestDesc},
	})
	if err != nil {
		return fmt.Errorf("ociimage: index: %w", err)
	}
	layout, err := json.Marshal(v1.ImageLayout{Version: v1.ImageLayoutVersion})
	if err != nil {
		return fmt.Errorf("ociimage: layout: %w", err)
	}
	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{v1.ImageLayoutFile, layout},
		{v1.ImageIndexFile, index},
		{blobPath(layerDesc.Digest), layer},
		{blobPath(configDesc.Digest), config},
		{blobPath(manifestDesc.Digest), manifest},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch}); err != nil {
			return fmt.Errorf("ociimage: %w", err)
		}
	}
	for _, e := range entries {
		if err := writeFile(tw, e.name, e.data, 0o644); err != nil {
			return fmt.Errorf("ociimage: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	return nil
}

func blobPath(d digest.Digest) string { return "blobs/" + d.Algorithm().String() + "/" + d.Encoded() }

func layerTar(img Image) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range img.Dirs {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(img.Files)) {
		if err := writeFile(tw, name, img.Files[name], 0o755); err != nil {
			return nil, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(img.Symlinks)) {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: img.Symlinks[name], Mode: 0o777, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeFile(tw *tar.Writer, name string, data []byte, mode int64) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}
