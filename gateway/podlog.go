// This file holds pods/{name}/log: the API service's GetPodLog stream
// written as the raw text/plain body kubectl expects, flushed per chunk so
// that `kubectl logs -f` sees lines as they come.

package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/metadata"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// podLogPath is the path podLogHandler is mounted on in the REST mux.
const podLogPath = "/api/v1/namespaces/{namespace}/pods/{name}/log"

// podLogHandler serves GET /api/v1/namespaces/{ns}/pods/{name}/log with
// Kubernetes' PodLogOptions in the query, mounted on the REST mux in place
// of the generated GetPodLog handler: that one would end every chunk with
// the watch delimiter and label it JSON. The caller's identity is the one
// ServeHTTP established (impersonation metadata, or the forwarded
// Authorization header). An error before the first chunk is a Status; once
// the body has started the stream just ends.
func podLogHandler(pods corev1.PodServiceClient) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		req, err := podLogRequest(params["namespace"], params["name"], r.URL.Query())
		if err != nil {
			writeError(w, err)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		md := infoFrom(ctx).md.Copy()
		if auth := r.Header.Get("Authorization"); auth != "" {
			md = metadata.Join(md, metadata.Pairs("authorization", auth))
		}
		stream, err := pods.GetPodLog(metadata.NewOutgoingContext(ctx, md), req)
		if err != nil {
			writeError(w, err)
			return
		}
		// The first message (or error) decides between a Status and a body.
		first, err := stream.Recv()
		if err != nil && !errors.Is(err, io.EOF) {
			writeError(w, err)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		for msg := first; msg != nil; {
			if _, err := w.Write(msg.GetData()); err != nil {
				return // the client went away
			}
			_ = rc.Flush()
			if msg, err = stream.Recv(); err != nil {
				return // the end of the log, or of the stream
			}
		}
	}
}

// podLogRequest reads PodLogOptions from the query.
func podLogRequest(namespace, name string, q url.Values) (*corev1.GetPodLogRequest, error) {
	req := &corev1.GetPodLogRequest{Namespace: namespace, Name: name, Container: q.Get("container")}
	for _, b := range []struct {
		key string
		dst *bool
	}{{"follow", &req.Follow}, {"previous", &req.Previous}, {"timestamps", &req.Timestamps}} {
		if v := q.Get(b.key); v != "" {
			x, err := strconv.ParseBool(v)
			if err != nil {
				return nil, badRequest(fmt.Sprintf("%s: invalid boolean %q", b.key, v))
			}
			*b.dst = x
		}
	}
	for _, n := range []struct {
		key string
		dst **int64
	}{{"tailLines", &req.TailLines}, {"sinceSeconds", &req.SinceSeconds}, {"limitBytes", &req.LimitBytes}} {
		if v := q.Get(n.key); v != "" {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, badRequest(fmt.Sprintf("%s: invalid integer %q", n.key, v))
			}
			*n.dst = &x
		}
	}
	return req, nil
}
