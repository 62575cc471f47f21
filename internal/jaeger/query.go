// This file reads a trace back through Jaeger's HTTP query API
// (GET /api/traces/<trace id>, the JSON the Jaeger UI reads).

package jaeger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// ErrNotFound: Jaeger has no trace with that id (yet).
var ErrNotFound = errors.New("jaeger: trace not found")

// Span is one span of a trace, as the query API returns it, with its
// service resolved.
type Span struct {
	TraceID, SpanID, ParentID string // ParentID is "" for a root
	Name, Service             string
	Start                     time.Time
	Duration                  time.Duration
	Tags                      map[string]any
}

// Trace is a trace's spans, sorted by start time.
type Trace struct {
	ID    string
	Spans []Span
}

type apiTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		TraceID       string `json:"traceID"`
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		References    []struct {
			RefType string `json:"refType"`
			TraceID string `json:"traceID"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		StartTime int64  `json:"startTime"` // µs since the epoch
		Duration  int64  `json:"duration"`  // µs
		ProcessID string `json:"processID"`
		Tags      []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// GetTrace fetches trace id (32 hex digits) from the query API at
// queryURL; ErrNotFound if Jaeger does not have it.
func GetTrace(ctx context.Context, hc *http.Client, queryURL, id string) (*Trace, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(queryURL, "/")+"/api/traces/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, fmt.Errorf("jaeger: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jaeger: query API: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("jaeger: query API: %w", err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, ErrNotFound
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jaeger: query API: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var r struct {
		Data []apiTrace `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("jaeger: query API answer: %w", err)
	}
	if len(r.Data) == 0 || len(r.Data[0].Spans) == 0 {
		return nil, ErrNotFound
	}
	at := r.Data[0]
	t := &Trace{ID: at.TraceID}
	for _, s := range at.Spans {
		sp := Span{
			TraceID: s.TraceID, SpanID: s.SpanID, Name: s.OperationName,
			Service:  at.Processes[s.ProcessID].ServiceName,
			Start:    time.UnixMicro(s.StartTime),
			Duration: time.Duration(s.Duration) * time.Microsecond,
			Tags:     map[string]any{},
		}
		for _, ref := range s.References {
			if ref.RefType == "CHILD_OF" && ref.TraceID == s.TraceID {
				sp.ParentID = ref.SpanID
				break
			}
		}
		for _, tag := range s.Tags {
			sp.Tags[tag.Key] = tag.Value
		}
		t.Spans = append(t.Spans, sp)
	}
	sort.SliceStable(t.Spans, func(i, j int) bool { return t.Spans[i].Start.Before(t.Spans[j].Start) })
	return t, nil
}
