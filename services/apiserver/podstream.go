// This file holds the streaming subresources pods/exec, pods/attach and
// pods/portforward: the API service authorizes the request as
// kube-apiserver does (the verb of its HTTP method: create for POST, get
// for GET), checks the pod and the container as its ExecLocation,
// AttachLocation and PortForwardLocation do, then dials the node agent's
// HTTPS server with its kubelet-client certificate, replays the upgrade
// request there, and carries the connection's raw bytes both ways over
// the StreamPod RPC until either side closes.

package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1api "k8s.io/api/core/v1"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// streamChunk is the largest piece of a stream sent in one message.
const streamChunk = 32 << 10

// podStreamRPC is the server side of StreamPod.
type podStreamRPC interface {
	Context() context.Context
	Send(*corev1.StreamPodResponse) error
	Recv() (*corev1.StreamPodRequest, error)
}

// streamSubresources are the subresources StreamPod carries.
var streamSubresources = map[string]bool{"exec": true, "attach": true, "portforward": true}

// podStream serves StreamPod.
func (s *Server) podStream(ctx context.Context, r *resourceInfo, stream podStreamRPC) (err error) {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return apierrors.NewBadRequest("the first message of a pod stream must hold the request")
	}
	sub, ns, name := start.GetSubresource(), start.GetNamespace(), start.GetName()
	if !streamSubresources[sub] {
		return apierrors.NewNotFound("", "pods/"+sub, name)
	}
	verb := "create"
	switch start.GetMethod() {
	case http.MethodPost:
	case http.MethodGet:
		verb = "get"
	default:
		return apierrors.NewMethodNotSupported("", "pods/"+sub, start.GetMethod())
	}
	c := s.begin(ctx, verb, r, sub, ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return err
	}
	q, err := url.ParseQuery(start.GetQuery())
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the query: %v", err))
	}
	obj, err := s.store.get(ctx, r, ns, name)
	if err != nil {
		return err
	}
	pod := obj.(*corev1.Pod)
	path, params, err := streamTarget(pod, sub, q)
	if err != nil {
		return err
	}
	if s.kubelet == nil {
		return apierrors.NewServiceUnavailable("pods/" + sub + ": the API service has no client for node agents (--kubelet-client-certificate)")
	}
	nodeObj, err := s.store.get(ctx, s.resources["nodes"], "", pod.GetSpec().GetNodeName())
	if err != nil {
		return err
	}
	node := nodeObj.(*corev1.Node)
	host := nodeAddress(node)
	if host == "" {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("node %s has no address to reach its node agent", node.GetMetadata().GetName()))
	}
	port := int(node.GetStatus().GetDaemonEndpoints().GetKubeletEndpoint().GetPort())
	if port == 0 {
		port = DefaultKubeletPort
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	conn, err := s.dialKubelet(ctx, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	hreq := &http.Request{
		Method:     start.GetMethod(),
		URL:        &url.URL{Scheme: "https", Host: addr, Path: path, RawQuery: params.Encode()},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{},
		Host:       addr,
	}
	for _, h := range start.GetHeaders() {
		for _, v := range h.GetValues() {
			hreq.Header.Add(h.GetName(), v)
		}
	}
	if err := hreq.Write(conn); err != nil {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("unable to reach the node agent at %s: %v", addr, err))
	}
	return pipePodStream(ctx, conn, stream)
}

// dialKubelet opens a TLS connection to the node agent at addr with the
// kubelet-client certificate.
func (s *Server) dialKubelet(ctx context.Context, addr string) (*tls.Conn, error) {
	var cfg *tls.Config
	if t, ok := s.kubelet.Transport.(*http.Transport); ok && t.TLSClientConfig != nil {
		cfg = t.TLSClientConfig.Clone()
	}
	if cfg == nil {
		return nil, apierrors.NewServiceUnavailable("the API service has no TLS configuration for node agents")
	}
	// One HTTP/1.1 connection that is upgraded: no ALPN for HTTP/2.
	cfg.NextProtos = nil
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: cfg}
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// kube-apiserver's answer when its proxy cannot dial the kubelet.
		return nil, &apierrors.StatusError{Code: http.StatusInternalServerError, Message: fmt.Sprintf("error dialing backend: %v", err)}
	}
	return c.(*tls.Conn), nil
}

// pipePodStream copies conn to the stream and the stream to conn until
// the agent closes the connection, the client ends the stream, or ctx
// ends. It returns when the agent's side is done; the client's end of the
// stream (its CloseSend) only closes the connection's write side.
func pipePodStream(ctx context.Context, conn *tls.Conn, stream podStreamRPC) error {
	// The receiving goroutine ends at the client's CloseSend or when the
	// RPC does (its Recv fails once this handler returns); it touches
	// only conn, which is closed by then.
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					_ = conn.CloseWrite()
				} else {
					_ = conn.Close()
				}
				return
			}
			if _, err := conn.Write(msg.GetData()); err != nil {
				_ = conn.Close()
				return
			}
		}
	}()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	buf := make([]byte, streamChunk)
	var serr error
	for {
		n, rerr := conn.Read(buf)
		if n > 0 {
			if serr = stream.Send(&corev1.StreamPodResponse{Data: append([]byte(nil), buf[:n]...)}); serr != nil {
				break
			}
		}
		if rerr != nil {
			break
		}
	}
	_ = conn.Close()
	if ctx.Err() != nil {
		return nil
	}
	return serr
}

// streamTarget checks the request as kube-apiserver's ExecLocation,
// AttachLocation and PortForwardLocation do, and returns the node agent's
// path and query (the kubelet's: booleans as "1").
func streamTarget(pod *corev1.Pod, sub string, q url.Values) (string, url.Values, error) {
	name := pod.GetMetadata().GetName()
	ns := pod.GetMetadata().GetNamespace()
	params := url.Values{}
	if sub == "portforward" {
		for _, p := range q["ports"] {
			for _, one := range strings.Split(p, ",") {
				n, err := strconv.ParseUint(one, 10, 16)
				if err != nil || n == 0 {
					return "", nil, apierrors.NewBadRequest(fmt.Sprintf("invalid port %q", one))
				}
				params.Add(corev1api.PortHeader, one)
			}
		}
		if pod.GetSpec().GetNodeName() == "" {
			return "", nil, apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", name))
		}
		return "/portForward/" + url.PathEscape(ns) + "/" + url.PathEscape(name), params, nil
	}
	container, err := logContainer(pod, q.Get("container"))
	if err != nil {
		return "", nil, err
	}
	if pod.GetSpec().GetNodeName() == "" {
		return "", nil, apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", name))
	}
	// PodExecOptions' and PodAttachOptions' booleans, and the kubelet's
	// names for them.
	for _, b := range []struct{ opt, param string }{
		{"stdin", corev1api.ExecStdinParam}, {"stdout", corev1api.ExecStdoutParam},
		{"stderr", corev1api.ExecStderrParam}, {"tty", corev1api.ExecTTYParam},
	} {
		v := q.Get(b.opt)
		if v == "" {
			continue
		}
		on, err := strconv.ParseBool(v)
		if err != nil {
			return "", nil, apierrors.NewBadRequest(fmt.Sprintf("%s: invalid boolean %q", b.opt, v))
		}
		if on {
			params.Set(b.param, "1")
		}
	}
	if sub == "exec" {
		for _, c := range q["command"] {
			params.Add(corev1api.ExecCommandParam, c)
		}
	}
	return "/" + sub + "/" + url.PathEscape(ns) + "/" + url.PathEscape(name) + "/" + url.PathEscape(container), params, nil
}
