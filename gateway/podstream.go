// This file holds pods/{name}/exec, attach and portforward: HTTP upgrades
// (SPDY for kubectl up to 1.29, WebSocket after) that the gateway carries
// to the API service's StreamPod RPC as they are. It takes over the
// client's connection once the API service has answered (an error before
// that is a Status), then copies bytes both ways until either side closes;
// the protocol is spoken end to end by kubectl and the node agent.

package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// streamChunk is the largest piece of a stream read from the client at
// once; gRPC's flow control bounds what is in flight beyond it.
const streamChunk = 32 << 10

// streamHeaders are the request headers the node agent needs to negotiate
// the upgrade and its protocol version.
var streamHeaders = []string{
	"Connection", "Upgrade", "X-Stream-Protocol-Version",
	"Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Protocol",
}

// podStreamTarget tells whether the API path parts (after /api/v1) name a
// pod's streaming subresource, and which.
func podStreamTarget(group, version string, parts []string) (ns, name, sub string, ok bool) {
	if group != "" || version != "v1" || len(parts) != 5 || parts[0] != "namespaces" || parts[2] != "pods" {
		return "", "", "", false
	}
	switch parts[4] {
	case "exec", "attach", "portforward":
		return parts[1], parts[3], parts[4], true
	}
	return "", "", "", false
}

// servePodStream carries one streaming request to the API service.
func (g *Gateway) servePodStream(w http.ResponseWriter, r *http.Request, md metadata.MD, ns, name, sub string) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		writeError(w, methodNotAllowed())
		return
	}
	if !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") || r.Header.Get("Upgrade") == "" {
		writeError(w, badRequest("Upgrade request required"))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	md = md.Copy()
	if auth := r.Header.Get("Authorization"); auth != "" {
		md = metadata.Join(md, metadata.Pairs("authorization", auth))
	}
	stream, err := g.pods.StreamPod(metadata.NewOutgoingContext(ctx, md))
	if err != nil {
		writeError(w, err)
		return
	}
	start := &corev1.StreamPodStart{Subresource: sub, Namespace: ns, Name: name, Method: r.Method, Query: r.URL.RawQuery}
	for _, h := range streamHeaders {
		if v := r.Header.Values(h); len(v) > 0 {
			start.Headers = append(start.Headers, &corev1.StreamPodHeader{Name: textproto.CanonicalMIMEHeaderKey(h), Values: v})
		}
	}
	if err := stream.Send(&corev1.StreamPodRequest{Start: start}); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, err)
		return
	}
	// The first answer decides between a Status and the agent's response.
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("the node agent closed the connection without an answer")
		}
		writeError(w, err)
		return
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		g.log.Error("gateway: cannot take over the connection for "+sub, "err", err)
		writeError(w, err)
		return
	}
	defer conn.Close()
	// The server's read and write deadlines are for requests, not for a
	// session that may last hours.
	_ = conn.SetDeadline(time.Time{})
	// Client to API service: what the server already buffered, then the
	// connection, until the client closes it (or it is closed below).
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		p := make([]byte, streamChunk)
		for {
			n, rerr := buf.Reader.Read(p)
			if n > 0 {
				if err := stream.Send(&corev1.StreamPodRequest{Data: append([]byte(nil), p[:n]...)}); err != nil {
					cancel()
					return
				}
			}
			if rerr != nil {
				if errors.Is(rerr, io.EOF) {
					_ = stream.CloseSend()
				} else {
					cancel()
				}
				return
			}
		}
	}()
	// API service to client, until the agent or the API service ends it.
	for msg := first; ; {
		if _, err := conn.Write(msg.GetData()); err != nil {
			break
		}
		if msg, err = stream.Recv(); err != nil {
			break
		}
	}
	_ = conn.Close()
	cancel()
	<-sent
}
