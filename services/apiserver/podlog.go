// This file holds the pods/log subresource: the API service authorizes the
// request, checks the pod and the container as Kubernetes' LogLocation does,
// finds the node agent from the Node's status, and proxies the log stream
// from the agent's log server over HTTPS with its own client certificate
// (as kube-apiserver's kubelet client does).

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

	"google.golang.org/genproto/googleapis/api/httpbody"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// DefaultKubeletPort is the node agent's log port when a Node does not
// publish status.daemonEndpoints.kubeletEndpoint (the kubelet's default).
const DefaultKubeletPort = 10250

// logChunk is the largest piece of log sent in one stream message.
const logChunk = 32 << 10

// newKubeletClient is the HTTP client pods/log reaches node agents with;
// nil when the service has no TLS configuration for them.
func newKubeletClient(t *tls.Config) *http.Client {
	if t == nil {
		return nil
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:     t.Clone(),
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		// Every node agent is one host; a few idle connections each.
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// podLog serves GetPodLog: it authorizes `get` on pods/log, validates the
// options, and streams the container's log from the node agent through
// send, one chunk at a time, until the agent ends the stream (the
// container stopped, for follow) or ctx ends (the client went away).
func (s *Server) podLog(ctx context.Context, r *resourceInfo, req *corev1.GetPodLogRequest, send func(*httpbody.HttpBody) error) (err error) {
	ns, name := req.GetNamespace(), req.GetName()
	c := s.begin(ctx, "get", r, "log", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return err
	}
	if err := validatePodLogOptions(name, req); err != nil {
		return err
	}
	obj, err := s.store.get(ctx, r, ns, name)
	if err != nil {
		return err
	}
	pod := obj.(*corev1.Pod)
	container, err := logContainer(pod, req.GetContainer())
	if err != nil {
		return err
	}
	nodeName := pod.GetSpec().GetNodeName()
	if nodeName == "" {
		// Not scheduled yet: no log, as Kubernetes answers (an empty body).
		return nil
	}
	if s.kubelet == nil {
		return apierrors.NewServiceUnavailable("pods/log: the API service has no client for node agents (--kubelet-client-certificate)")
	}
	nodeObj, err := s.store.get(ctx, s.resources["nodes"], "", nodeName)
	if err != nil {
		return err
	}
	u, err := containerLogURL(nodeObj.(*corev1.Node), ns, name, container, req)
	if err != nil {
		return err
	}
	body, err := s.fetchLog(ctx, u, name)
	if err != nil {
		return err
	}
	defer body.Close()
	var src io.Reader = body
	if req.LimitBytes != nil {
		src = io.LimitReader(body, req.GetLimitBytes())
	}
	buf := make([]byte, logChunk)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if err := send(&httpbody.HttpBody{ContentType: "text/plain", Data: append([]byte(nil), buf[:n]...)}); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return nil // the client went away
			}
			return apierrors.NewInternalError(fmt.Errorf("reading the log from node %s: %w", nodeName, rerr))
		}
	}
}

// validatePodLogOptions checks PodLogOptions as Kubernetes' validation does.
func validatePodLogOptions(name string, req *corev1.GetPodLogRequest) error {
	var causes []apierrors.Cause
	bad := func(field string, v int64, msg string) {
		causes = append(causes, apierrors.Cause{Type: "FieldValueInvalid", Field: field,
			Message: fmt.Sprintf("Invalid value: %d: %s", v, msg)})
	}
	if req.TailLines != nil && req.GetTailLines() < 0 {
		bad("tailLines", req.GetTailLines(), "must be greater than or equal to 0")
	}
	if req.LimitBytes != nil && req.GetLimitBytes() < 1 {
		bad("limitBytes", req.GetLimitBytes(), "must be greater than 0")
	}
	if req.SinceSeconds != nil && req.GetSinceSeconds() < 1 {
		bad("sinceSeconds", req.GetSinceSeconds(), "must be greater than 0")
	}
	if len(causes) > 0 {
		return apierrors.NewInvalid("", "PodLogOptions", name, causes)
	}
	return nil
}

// logContainer picks the container whose log is asked for, with
// Kubernetes' rules and messages: a pod with one container needs no name.
func logContainer(pod *corev1.Pod, want string) (string, error) {
	spec := pod.GetSpec()
	podName := pod.GetMetadata().GetName()
	if want == "" {
		switch len(spec.GetContainers()) {
		case 1:
			return spec.GetContainers()[0].GetName(), nil
		case 0:
			return "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s", podName))
		}
		names := func(cs []*corev1.Container) string {
			var out []string
			for _, c := range cs {
				out = append(out, c.GetName())
			}
			return "[" + strings.Join(out, " ") + "]"
		}
		msg := fmt.Sprintf("a container name must be specified for pod %s, choose one of: %s", podName, names(spec.GetContainers()))
		if len(spec.GetInitContainers()) > 0 {
			msg += " or one of the init containers: " + names(spec.GetInitContainers())
		}
		if ecs := spec.GetEphemeralContainers(); len(ecs) > 0 {
			var out []string
			for _, ec := range ecs {
				out = append(out, ec.GetEphemeralContainerCommon().GetName())
			}
			msg += " or one of the ephemeral containers: [" + strings.Join(out, " ") + "]"
		}
		return "", apierrors.NewBadRequest(msg)
	}
	for _, c := range append(append([]*corev1.Container{}, spec.GetInitContainers()...), spec.GetContainers()...) {
		if c.GetName() == want {
			return want, nil
		}
	}
	for _, ec := range spec.GetEphemeralContainers() {
		if ec.GetEphemeralContainerCommon().GetName() == want {
			return want, nil
		}
	}
	return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", want, podName))
}

// nodeAddress picks the address the node agent is reached at: InternalIP,
// then ExternalIP, then Hostname (simulated nodes' hostnames do not
// resolve, so IPs come first).
func nodeAddress(node *corev1.Node) string {
	for _, t := range []string{"InternalIP", "ExternalIP", "Hostname"} {
		for _, a := range node.GetStatus().GetAddresses() {
			if a.GetType() == t && a.GetAddress() != "" {
				return a.GetAddress()
			}
		}
	}
	return ""
}

// containerLogURL is the node agent's URL for the log:
// https://<address>:<kubeletEndpoint port>/containerLogs/<ns>/<pod>/<container>.
func containerLogURL(node *corev1.Node, ns, pod, container string, req *corev1.GetPodLogRequest) (*url.URL, error) {
	host := nodeAddress(node)
	if host == "" {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("node %s has no address to reach its node agent", node.GetMetadata().GetName()))
	}
	port := int(node.GetStatus().GetDaemonEndpoints().GetKubeletEndpoint().GetPort())
	if port == 0 {
		port = DefaultKubeletPort
	}
	q := url.Values{}
	if req.GetFollow() {
		q.Set("follow", "true")
	}
	if req.GetPrevious() {
		q.Set("previous", "true")
	}
	if req.GetTimestamps() {
		q.Set("timestamps", "true")
	}
	if req.TailLines != nil {
		q.Set("tailLines", strconv.FormatInt(req.GetTailLines(), 10))
	}
	if req.SinceSeconds != nil {
		q.Set("sinceSeconds", strconv.FormatInt(req.GetSinceSeconds(), 10))
	}
	if req.LimitBytes != nil {
		q.Set("limitBytes", strconv.FormatInt(req.GetLimitBytes(), 10))
	}
	return &url.URL{
		Scheme:   "https",
		Host:     net.JoinHostPort(host, strconv.Itoa(port)),
		Path:     "/containerLogs/" + url.PathEscape(ns) + "/" + url.PathEscape(pod) + "/" + url.PathEscape(container),
		RawQuery: q.Encode(),
	}, nil
}

// fetchLog opens the log stream at the node agent. An error answer
// becomes the API error Kubernetes gives for it: the agent's message with
// 400 (e.g. `container "web" in pod "p" is waiting to start:
// ContainerCreating`) or 404.
func (s *Server) fetchLog(ctx context.Context, u *url.URL, pod string) (io.ReadCloser, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	resp, err := s.kubelet.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("unable to reach the node agent at %s: %v", u.Host, err))
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	msg := strings.TrimSpace(string(b))
	switch resp.StatusCode {
	case http.StatusBadRequest:
		return nil, apierrors.NewBadRequest(msg)
	case http.StatusNotFound:
		e := apierrors.NewNotFound("", "pods/log", pod)
		if msg != "" {
			e.Message = msg
		}
		return nil, e
	case http.StatusUnauthorized, http.StatusForbidden:
		return nil, apierrors.NewInternalError(fmt.Errorf("the node agent at %s refused the API service (%s): %s", u.Host, resp.Status, msg))
	}
	return nil, apierrors.NewInternalError(fmt.Errorf("the node agent at %s answered %s: %s", u.Host, resp.Status, msg))
}
