// Command containerd-env starts the same containerd the tests use (see
// package containerdtest), with the pause and hello images imported, prints
// its CRI socket, and removes everything when interrupted. For trying the
// node agent or a benchmark against a real runtime by hand, as root:
//
//	go run ./nodeagent/internal/containerdtest/containerd-env
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/kplane/kplane/nodeagent/internal/containerdtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	e, err := containerdtest.Start(ctx, containerdtest.Options{Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "containerd-env:", err)
		os.Exit(1)
	}
	cni := filepath.Join(e.Dir, "cni", "net.d")
	fmt.Printf("CRI socket: %s\ncgroup parent: %s\nCNI conf dir: %s\nimages: %s %s\n"+
		"kplane up --runtime containerd --cri-socket %[1]s --cgroup-parent %[2]s --cni-conf-dir %[3]s\n"+
		"(the node agent writes the pod network there; with --host-network pods use the host's)\nCtrl-C to stop and clean up\n",
		e.Socket, e.CgroupParent, cni, containerdtest.PauseImage, containerdtest.HelloImage)
	<-ctx.Done()
	if err := e.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "containerd-env:", err)
		os.Exit(1)
	}
}
