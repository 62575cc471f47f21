// This file holds the tests of the image-locality score: images present and
// their spread, the size threshold, and normalized image names.

package imagelocality_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/imagelocality"
)

// lister is a fixed snapshot.
type lister struct{ nodes []*framework.NodeInfo }

func (l lister) List() []*framework.NodeInfo { return l.nodes }
func (l lister) Get(name string) (*framework.NodeInfo, bool) {
	for _, n := range l.nodes {
		if n.Name == name {
			return n, true
		}
	}
	return nil, false
}
func (l lister) NumNodesWithImage(img string) int {
	c := 0
	for _, n := range l.nodes {
		if _, ok := n.ImageSizes[img]; ok {
			c++
		}
	}
	return c
}
func (lister) HavePodsWithAffinity() []*framework.NodeInfo             { return nil }
func (lister) HavePodsWithRequiredAntiAffinity() []*framework.NodeInfo { return nil }

type handle struct{ l lister }

func (h handle) Snapshot() framework.NodeLister     { return h.l }
func (handle) ClientConn() grpc.ClientConnInterface { return nil }
func (handle) RunFilterPlugins(context.Context, *framework.CycleState, *framework.PodInfo, *framework.NodeInfo) *framework.Status {
	return nil
}
func (handle) EventRecorder() *client.Recorder { return nil }

const mb = 1024 * 1024

func withImages(name string, imgs map[string]int64) *framework.NodeInfo {
	return fixture.Node(name, "4", "8Gi", func(n *corev1.Node) {
		for ref, size := range imgs {
			n.Status.Images = append(n.Status.Images, &corev1.ContainerImage{Names: []string{ref}, SizeBytes: size})
		}
	})
}

func TestScore(t *testing.T) {
	nodes := []*framework.NodeInfo{
		withImages("big", map[string]int64{"docker.io/library/nginx:latest": 523 * mb}),
		withImages("also-big", map[string]int64{"nginx": 523 * mb}),
		withImages("small-image", map[string]int64{"docker.io/library/nginx:latest": 10 * mb}),
		withImages("none", nil),
	}
	h := handle{lister{nodes}}
	p, _ := imagelocality.New(nil, h)
	pod := fixture.Pod("p", "", "", nil) // image "nginx"
	tests := []struct {
		name string
		node *framework.NodeInfo
		want int64
	}{
		// 523 MB × 3/4 of the nodes = 392.25 MB; (392-23)/(1000-23) × 100 = 37.
		{name: "large image present, spread over 3 of 4 nodes", node: nodes[0], want: 37},
		{name: "short reference normalized", node: nodes[1], want: 37},
		{name: "image under the threshold", node: nodes[2], want: 0},
		{name: "image absent", node: nodes[3], want: 0},
	}
	state := framework.NewCycleState()
	if s := p.(framework.PreScorePlugin).PreScore(context.Background(), state, pod, nodes); !s.IsSuccess() {
		t.Fatalf("PreScore: got %v, want success", s.Code())
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := p.(framework.ScorePlugin).Score(context.Background(), state, pod, tc.node)
			if got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPreScoreSkipsAbsentImages(t *testing.T) {
	p, _ := imagelocality.New(nil, handle{lister{[]*framework.NodeInfo{withImages("a", nil)}}})
	if s := p.(framework.PreScorePlugin).PreScore(context.Background(), framework.NewCycleState(), fixture.Pod("p", "", "", nil), nil); !s.IsSkip() {
		t.Errorf("got %v, want Skip", s.Code())
	}
}

func TestNormalizeImage(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "bare name", in: "nginx", want: "docker.io/library/nginx:latest"},
		{name: "tag kept", in: "nginx:1.27", want: "docker.io/library/nginx:1.27"},
		{name: "user repo", in: "bitnami/redis", want: "docker.io/bitnami/redis:latest"},
		{name: "registry with port", in: "localhost:5000/app", want: "localhost:5000/app:latest"},
		{name: "digest", in: "quay.io/x/y@sha256:ab", want: "quay.io/x/y@sha256:ab"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := framework.NormalizeImage(tc.in); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
