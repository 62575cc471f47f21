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
	fmt.Printf("CRI socket: %s\ncgroup parent: %s\nimages: %s %s\nhost network only (Network NODE, empty hostname); Ctrl-C to stop and clean up\n",
		e.Socket, e.CgroupParent, containerdtest.PauseImage, containerdtest.HelloImage)
	<-ctx.Done()
	if err := e.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "containerd-env:", err)
		os.Exit(1)
	}
}
