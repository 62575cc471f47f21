// Command hello is a tiny HTTP server for kplane's container tests: it
// listens on $HELLO_ADDR (default 127.0.0.1:8080), answers every request
// with "hello from kplane", logs a line on start and on stop, and exits 0
// on SIGTERM or SIGINT after shutting the server down.
//
// With $HELLO_EXIT_CODE set it prints a line and exits with that code at
// once instead (a crashing container). `hello probe` is an exec probe: it
// exits 0 when the server on $HELLO_ADDR answers, 1 otherwise. `hello get
// URL` prints the body of a GET of URL (exit 1 if it fails), and the path
// /remote answers with the client's address as the server sees it: a pod
// asks another through them to see whether its address reached it
// unchanged. /local answers with the server's own address of the
// connection: which pod behind a Service answered.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	addr := os.Getenv("HELLO_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(probe(addr))
	}
	if len(os.Args) > 2 && os.Args[1] == "get" {
		os.Exit(get(os.Args[2]))
	}
	if v := os.Getenv("HELLO_EXIT_CODE"); v != "" {
		code, err := strconv.Atoi(v)
		if err != nil {
			code = 2
		}
		fmt.Printf("hello: exiting with %d as told\n", code)
		os.Exit(code)
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
			if r.URL.Path == "/remote" {
				fmt.Fprintln(w, r.RemoteAddr)
				return
			}
			if r.URL.Path == "/local" {
				fmt.Fprintln(w, r.Context().Value(http.LocalAddrContextKey))
				return
			}
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

// probe asks the server on addr once and returns an exit code.
func probe(addr string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe: %v\n", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "probe: %s\n", resp.Status)
		return 1
	}
	return 0
}

// get prints the body of a GET of url and returns an exit code.
func get(url string) int {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "get: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	if _, err := io.Copy(os.Stdout, resp.Body); err != nil {
		fmt.Fprintf(os.Stderr, "get: %v\n", err)
		return 1
	}
	return 0
}
