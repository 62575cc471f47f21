// Command hello is a tiny HTTP server for kplane's container tests: it
// listens on $HELLO_ADDR (default 127.0.0.1:8080), answers every request
// with "hello from kplane", logs a line on start and on stop, and exits 0
// on SIGTERM or SIGINT after shutting the server down.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := os.Getenv("HELLO_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hello: listen: %v\n", err)
		os.Exit(1)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, "hello from kplane")
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	fmt.Printf("hello: listening on %s\n", lis.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		fmt.Fprintf(os.Stderr, "hello: serve: %v\n", err)
		os.Exit(1)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	fmt.Println("hello: stopping")
}
