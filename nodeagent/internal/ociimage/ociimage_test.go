// This file holds the test of the OCI image writer: the same bytes every
// time, and a layout, index, manifest, config and layer containerd can read.

package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"testing"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestWrite(t *testing.T) {
	img := Image{Name: "kplane.test/hello:1", Files: map[string][]byte{"hello": []byte("#!binary")}, Entrypoint: []string{"/hello"}}
	var a, b bytes.Buffer
	if err := Write(&a, img); err != nil {
		t.Fatal(err)
	}
	if err := Write(&b, img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two writes of one image differ; want the same bytes")
	}
	files := map[string][]byte{}
	tr := tar.NewReader(&a)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = data
	}
	// Every blob is stored under its own digest.
	for name, data := range files {
		if len(name) > len("blobs/sha256/") && name[:len("blobs/sha256/")] == "blobs/sha256/" {
			if got := digest.FromBytes(data).Encoded(); got != name[len("blobs/sha256/"):] {
				t.Errorf("blob %s: content digest %s", name, got)
			}
		}
	}
	var layout v1.ImageLayout
	if err := json.Unmarshal(files["oci-layout"], &layout); err != nil || layout.Version != "1.0.0" {
		t.Fatalf("oci-layout: got %+v, %v", layout, err)
	}
	var index v1.Index
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: got %+v, %v", index, err)
	}
	md := index.Manifests[0]
	if got := md.Annotations["io.containerd.image.name"]; got != img.Name {
		t.Errorf("image name annotation: got %q, want %q", got, img.Name)
	}
	var m v1.Manifest
	if err := json.Unmarshal(files["blobs/sha256/"+md.Digest.Encoded()], &m); err != nil || len(m.Layers) != 1 {
		t.Fatalf("manifest: got %+v, %v", m, err)
	}
	var cfg v1.Image
	if err := json.Unmarshal(files["blobs/sha256/"+m.Config.Digest.Encoded()], &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/hello" || cfg.RootFS.DiffIDs[0] != m.Layers[0].Digest {
		t.Errorf("config: got %+v", cfg)
	}
	lr := tar.NewReader(bytes.NewReader(files["blobs/sha256/"+m.Layers[0].Digest.Encoded()]))
	h, err := lr.Next()
	if err != nil || h.Name != "hello" || h.Mode&0o111 == 0 {
		t.Fatalf("layer: got %+v, %v; want an executable hello", h, err)
	}
}
