// This file holds the simulated image store and the CRI ImageService.

package simruntime

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"

	"github.com/distribution/reference"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// image is one image in the store. Its ID, digest and size are derived
// from its normalised name, so they are the same in every run.
type image struct {
	id     string   // "sha256:<hex>"
	tags   []string // normalised references
	digest string   // "<repository>@sha256:<hex>"
	size   uint64
}

func (im *image) toCRI() *runtimeapi.Image {
	return &runtimeapi.Image{
		Id:          im.id,
		RepoTags:    slices.Clone(im.tags),
		RepoDigests: []string{im.digest},
		Size_:       im.size,
		Spec:        &runtimeapi.ImageSpec{Image: im.id},
	}
}

// addImageLocked records named as present and returns its image.
func (r *Runtime) addImageLocked(named reference.Named) *image {
	ref := named.String()
	if id, ok := r.tags[ref]; ok {
		return r.images[id]
	}
	sum := sha256.Sum256([]byte("kplane-sim image " + ref))
	id := "sha256:" + hex.EncodeToString(sum[:])
	manifest := sha256.Sum256([]byte("kplane-sim manifest " + ref))
	const mib = 1 << 20
	im := &image{
		id:     id,
		tags:   []string{ref},
		digest: named.Name() + "@sha256:" + hex.EncodeToString(manifest[:]),
		size:   5*mib + binary.BigEndian.Uint64(sum[:8])%(45*mib),
	}
	r.images[id] = im
	r.tags[ref] = id
	return im
}

// lookupImageLocked finds an image by reference, image ID or repo digest.
func (r *Runtime) lookupImageLocked(ref string) *image {
	if im, ok := r.images[ref]; ok {
		return im
	}
	if named, _, err := parseImage(ref); err == nil {
		if id, ok := r.tags[named.String()]; ok {
			return r.images[id]
		}
	}
	for _, im := range r.images {
		if im.digest == ref {
			return im
		}
	}
	return nil
}

// PullImage makes the image present after its pull latency, or fails with
// NotFound for an image whose repository names "notfound".
func (r *Runtime) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref := req.GetImage().GetImage()
	named, rules, err := parseImage(ref)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	latency := r.pullLatency
	if rules.hasLatency {
		latency = rules.latency
	}
	if latency > 0 {
		t := r.clock.NewTimer(latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-t.C():
		}
	}
	if rules.notFound {
		r.log.Debug("pull: image not found", "image", named.String())
		return nil, status.Errorf(codes.NotFound,
			"failed to pull and unpack image %q: failed to resolve reference %q: %s: not found (kplane-sim: repositories naming %q do not exist)",
			named.String(), named.String(), named.String(), NotFoundMarker)
	}
	r.mu.Lock()
	im := r.addImageLocked(named)
	r.mu.Unlock()
	r.log.Debug("pulled image", "image", named.String(), "id", im.id)
	return &runtimeapi.PullImageResponse{ImageRef: im.id}, nil
}

// ImageStatus returns the image, or a nil Image when it is not present (the
// CRI contract: not an error).
func (r *Runtime) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	im := r.lookupImageLocked(req.GetImage().GetImage())
	if im == nil {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: im.toCRI()}, nil
}

// ListImages lists present images, all of them or the one the filter names.
func (r *Runtime) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	resp := &runtimeapi.ListImagesResponse{}
	if want := req.GetFilter().GetImage().GetImage(); want != "" {
		if im := r.lookupImageLocked(want); im != nil {
			resp.Images = append(resp.Images, im.toCRI())
		}
		return resp, nil
	}
	for _, id := range slices.Sorted(maps.Keys(r.images)) {
		resp.Images = append(resp.Images, r.images[id].toCRI())
	}
	return resp, nil
}

// RemoveImage removes the image; removing an absent image succeeds (the
// CRI contract: idempotent).
func (r *Runtime) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	im := r.lookupImageLocked(req.GetImage().GetImage())
	if im == nil {
		return &runtimeapi.RemoveImageResponse{}, nil
	}
	for _, t := range im.tags {
		delete(r.tags, t)
	}
	delete(r.images, im.id)
	return &runtimeapi.RemoveImageResponse{}, nil
}

// ImageFsInfo reports the images' synthetic sizes as the image filesystem's
// usage.
func (r *Runtime) ImageFsInfo(ctx context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	r.mu.Lock()
	var used uint64
	for _, im := range r.images {
		used += im.size
	}
	n := uint64(len(r.images))
	r.mu.Unlock()
	fs := &runtimeapi.FilesystemUsage{
		Timestamp:  r.clock.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: "kplane-sim://" + r.name + "/images"},
		UsedBytes:  &runtimeapi.UInt64Value{Value: used},
		InodesUsed: &runtimeapi.UInt64Value{Value: n},
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{fs}}, nil
}
