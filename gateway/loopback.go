// This file sends a request through the grpc-gateway mux in-process and
// records its response, for handlers that build on another method's answer.

package gateway

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
)

// recorded is a response the grpc-gateway mux wrote for a request the
// gateway made to it in-process.
type recorded struct {
	code   int
	header http.Header
	body   bytes.Buffer
}

func (r *recorded) Header() http.Header { return r.header }

func (r *recorded) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *recorded) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

// copyTo writes the recorded response to w.
func (r *recorded) copyTo(w http.ResponseWriter) {
	for _, k := range []string{"Content-Type", "Warning"} {
		for _, v := range r.header.Values(k) {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(r.code)
	_, _ = w.Write(r.body.Bytes())
}

// loopback sends a request to the grpc-gateway mux in-process: method on
// path with rawQuery, the Authorization header of from (forwarding mode),
// body JSON (if any). ctx carries the caller's requestInfo (identity in
// impersonation mode, fieldValidation, Tables).
func (g *Gateway) loopback(ctx context.Context, from *http.Request, method, path, rawQuery string, body []byte) *recorded {
	u := &url.URL{Path: path, RawQuery: rawQuery}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	rec := &recorded{header: http.Header{}}
	if err != nil {
		writeError(rec, badRequest(err.Error()))
		return rec
	}
	if a := from.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	if body != nil {
		req.Body = &requestBody{Reader: bytes.NewReader(body), data: body, info: infoFrom(ctx)}
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
	}
	g.rest.ServeHTTP(rec, req)
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	return rec
}
