package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/stack"
)

// JaegerServer is a Jaeger v2 process for tests: an OTLP receiver and the
// query API, traces in memory.
type JaegerServer struct {
	j     *stack.Jaeger // nil for JaegerAt's
	query string
}

// JaegerAt is a query client of a Jaeger that runs already (sluice dev's),
// its query API at queryURL ("http://127.0.0.1:16686").
func JaegerAt(queryURL string) *JaegerServer { return &JaegerServer{query: queryURL} }

// QueryURL is the base URL of the query API and the UI.
func (j *JaegerServer) QueryURL() string { return j.query }

// OTLPEndpoint is the value for OTEL_EXPORTER_OTLP_ENDPOINT.
func (j *JaegerServer) OTLPEndpoint() string { return j.j.OTLPEndpoint() }

// Jaeger starts Jaeger v2 (bin/jaeger, built by `make deps`) for the test, its
// OTLP receiver and query API on free loopback ports. t.Cleanup stops it. A
// missing binary fails the test saying how to build it.
func Jaeger(t testing.TB) *JaegerServer {
	t.Helper()
	// `make test` builds bin/jaeger in the background and runs the tests
	// named *InJaeger after it; any other name would run before the build.
	if top, _, _ := strings.Cut(t.Name(), "/"); !strings.HasSuffix(top, "InJaeger") {
		t.Fatalf("testenv: %s starts Jaeger: end its name with InJaeger so that make test runs it once bin/jaeger is built (Makefile, JAEGER_TESTS)", top)
	}
	addr := func() string {
		p, err := stack.FreePort()
		if err != nil {
			t.Fatalf("testenv: jaeger: %v", err)
		}
		return fmt.Sprintf("127.0.0.1:%d", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := stack.StartJaeger(ctx, stack.JaegerConfig{
		OTLPHTTPAddr: addr(), OTLPGRPCAddr: addr(), QueryAddr: addr(), Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatalf("testenv: starting jaeger: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := stopCtx()
		defer cancel()
		if err := j.Stop(ctx); err != nil {
			t.Logf("testenv: stopping jaeger: %v", err)
		}
	})
	return &JaegerServer{j: j, query: j.QueryURL()}
}

// JaegerTrace is one trace as the query API returns it.
type JaegerTrace struct {
	TraceID string       `json:"traceID"`
	Spans   []JaegerSpan `json:"spans"`
}

// JaegerSpan is one span of a JaegerTrace.
type JaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // microseconds since the epoch
	Duration  int64 `json:"duration"`  // microseconds
	Tags      []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
}

// Tag is the span's tag key as a string ("" when absent).
func (s JaegerSpan) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Trace fetches one trace by its id; (nil, nil) while Jaeger has not got it.
func (j *JaegerServer) Trace(ctx context.Context, traceID string) (*JaegerTrace, error) {
	var out struct {
		Data []JaegerTrace `json:"data"`
	}
	found, err := j.get(ctx, "/api/traces/"+url.PathEscape(traceID), &out)
	if err != nil || !found || len(out.Data) == 0 {
		return nil, err
	}
	return &out.Data[0], nil
}

// Traces searches the traces of a service (the query API's /api/traces).
func (j *JaegerServer) Traces(ctx context.Context, service string) ([]JaegerTrace, error) {
	var out struct {
		Data []JaegerTrace `json:"data"`
	}
	_, err := j.get(ctx, "/api/traces?limit=100&service="+url.QueryEscape(service), &out)
	return out.Data, err
}

func (j *JaegerServer) get(ctx context.Context, path string, v any) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.QueryURL()+path, nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return true, json.Unmarshal(b, v)
}
