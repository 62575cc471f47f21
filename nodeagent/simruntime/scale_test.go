// This file holds the built-in runtime's scale tests: the memory one pod
// holds, many runtimes in one process, concurrent calls on one runtime, and
// a benchmark of a pod start over CRI.

package simruntime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/simruntime"
)

// podConfigs returns what a kubelet would send for pod i: a sandbox config
// with the usual labels and annotations, and one container config.
func podConfigs(node string, i int) (*runtimeapi.PodSandboxConfig, *runtimeapi.ContainerConfig) {
	name := fmt.Sprintf("pod-%d", i)
	uid := fmt.Sprintf("%s-uid-%06d", node, i)
	sb := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: uid},
		LogDirectory: "", // no log files: the scale tests measure the runtime, not the disk
		Labels: map[string]string{
			"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": uid, "app": "web",
		},
		Annotations: map[string]string{"kubernetes.io/config.source": "api"},
	}
	c := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "web"},
		Image:    &runtimeapi.ImageSpec{Image: "example.com/web:1"},
		Envs:     []*runtimeapi.KeyValue{{Key: "PORT", Value: "8080"}, {Key: simruntime.EnvReadyAfterSeconds, Value: "1"}},
		Labels: map[string]string{
			"io.kubernetes.container.name": "web", "io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": uid,
		},
		Annotations: map[string]string{"io.kubernetes.container.restartCount": "0", "io.kubernetes.container.terminationMessagePath": "/dev/termination-log"},
		LogPath:     "web/0.log",
	}
	return sb, c
}

// runPod makes pod i run on rt, calling the handlers directly.
func runPod(ctx context.Context, rt *simruntime.Runtime, node string, i int) error {
	sbCfg, cCfg := podConfigs(node, i)
	sb, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
	if err != nil {
		return err
	}
	c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.GetPodSandboxId(), Config: cCfg, SandboxConfig: sbCfg})
	if err != nil {
		return err
	}
	_, err = rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.GetContainerId()})
	return err
}

// TestMemoryPerPod measures the heap one simulated pod (sandbox and one
// container, as the kubelet would describe them) holds, and bounds it so a
// regression that makes 100 nodes × 30 pods expensive shows up. The request
// messages are part of what is kept (labels, metadata), so they count.
func TestMemoryPerPod(t *testing.T) {
	const pods = 3000
	ctx := context.Background()
	rt, err := simruntime.New(simruntime.Config{Name: "mem", Images: []string{"example.com/web:1"}, PodCIDR: "10.0.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range pods {
		if err := runPod(ctx, rt, "mem", i); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perPod := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / pods
	t.Logf("heap per simulated pod (sandbox + 1 container, kubelet-like labels): %d bytes", perPod)
	if perPod > 16<<10 {
		t.Errorf("heap per pod: got %d bytes, want at most 16 KiB", perPod)
	}
	runtime.KeepAlive(rt)
}

// TestManyRuntimesInOneProcess serves one runtime per simulated node on its
// own socket and runs pods on all of them concurrently through the CRI
// client, as a node agent carrying many nodes will. KPLANE_SIM_SCALE=1 runs
// the full 100 nodes × 30 pods.
func TestManyRuntimesInOneProcess(t *testing.T) {
	nodes, podsPerNode := 20, 5
	if os.Getenv("KPLANE_SIM_SCALE") != "" {
		nodes, podsPerNode = 100, 30
	}
	dir, err := os.MkdirTemp("", "simscale")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var servers sync.WaitGroup
	defer servers.Wait()
	defer cancel()
	clients := make([]*cri.Client, nodes)
	for n := range nodes {
		rt, err := simruntime.New(simruntime.Config{
			Name: fmt.Sprintf("node-%d", n), PodCIDR: fmt.Sprintf("10.%d.%d.0/24", n/250, n%250), Images: []string{"example.com/web:1"},
		})
		if err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, fmt.Sprintf("n%d.sock", n))
		servers.Add(1)
		go func() {
			defer servers.Done()
			if err := rt.Serve(ctx, sock); err != nil {
				t.Errorf("Serve: %v", err)
			}
		}()
		c, err := cri.New(cri.Config{Socket: sock, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[n] = c
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for n, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			defer wcancel()
			if err := c.WaitReady(wctx, 10*time.Millisecond); err != nil {
				errs <- err
				return
			}
			node := fmt.Sprintf("node-%d", n)
			for i := range podsPerNode {
				sbCfg, cCfg := podConfigs(node, i)
				sb, err := c.RunPodSandbox(ctx, sbCfg, "")
				if err != nil {
					errs <- err
					return
				}
				id, err := c.CreateContainer(ctx, sb, cCfg, sbCfg)
				if err != nil {
					errs <- err
					return
				}
				if err := c.StartContainer(ctx, id); err != nil {
					errs <- err
					return
				}
			}
			list, err := c.ListContainers(ctx, &runtimeapi.ContainerFilter{
				State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			})
			if err != nil {
				errs <- err
				return
			}
			if len(list) != podsPerNode {
				errs <- fmt.Errorf("%s: got %d running containers, want %d", node, len(list), podsPerNode)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d runtimes × %d pods running through CRI gRPC in %v", nodes, podsPerNode, time.Since(start).Round(time.Millisecond))
}

// BenchmarkRunPodOverCRI measures one pod start (RunPodSandbox,
// CreateContainer, StartContainer) through the CRI client and gRPC on a
// unix socket.
func BenchmarkRunPodOverCRI(b *testing.B) {
	dir, err := os.MkdirTemp("", "simbench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	rt, err := simruntime.New(simruntime.Config{Name: "bench", Images: []string{"example.com/web:1"}, PodCIDR: "10.0.0.0/8"})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sock := filepath.Join(dir, "cri.sock")
	done := make(chan error, 1)
	go func() { done <- rt.Serve(ctx, sock) }()
	defer func() { cancel(); <-done }()
	c, err := cri.New(cri.Config{Socket: sock})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitReady(ctx, 10*time.Millisecond); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		sbCfg, cCfg := podConfigs("bench", i)
		sb, err := c.RunPodSandbox(ctx, sbCfg, "")
		if err != nil {
			b.Fatal(err)
		}
		id, err := c.CreateContainer(ctx, sb, cCfg, sbCfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.StartContainer(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

// TestConcurrentCallsOnOneRuntime runs whole pod lifecycles from several
// goroutines at once on one runtime (meaningful under -race).
func TestConcurrentCallsOnOneRuntime(t *testing.T) {
	e := start(t, simruntime.Config{Images: []string{"example.com/web:1"}, PodCIDR: "10.1.0.0/16"})
	ctx := context.Background()
	const workers, podsEach = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("w%d", w)
			for i := range podsEach {
				sbCfg, cCfg := podConfigs(node, i)
				sb, err := e.client.RunPodSandbox(ctx, sbCfg, "")
				if err == nil {
					var id string
					if id, err = e.client.CreateContainer(ctx, sb, cCfg, sbCfg); err == nil {
						if err = e.client.StartContainer(ctx, id); err == nil {
							_, err = e.client.ExecSync(ctx, id, []string{"true"}, time.Second)
						}
						if err == nil {
							err = e.client.StopContainer(ctx, id, time.Second)
						}
					}
					if _, lerr := e.client.ListContainers(ctx, nil); err == nil {
						err = lerr
					}
					if err == nil && i%2 == 0 {
						if err = e.client.StopPodSandbox(ctx, sb); err == nil {
							err = e.client.RemovePodSandbox(ctx, sb)
						}
					}
				}
				if err != nil {
					errs <- fmt.Errorf("%s pod %d: %w", node, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	sbs, err := e.client.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := workers * podsEach / 2; len(sbs) != want {
		t.Errorf("sandboxes left: got %d, want %d", len(sbs), want)
	}
}
