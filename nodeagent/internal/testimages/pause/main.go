// Command pause is the pod sandbox's "pause" process in kplane's test
// images: it holds the sandbox's namespaces and waits for SIGTERM or SIGINT,
// then exits 0. It is built statically and imported into a test containerd
// as an OCI image, since no registry is reachable.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
