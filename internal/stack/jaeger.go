package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const jaegerMissing = "jaeger not found: run `make jaeger` or `make deps` (builds Jaeger v2, pinned at v1.76.0 in tools/jaeger/go.mod, into bin/jaeger) or set SLUICE_JAEGER_BIN"

// FindJaeger returns the Jaeger v2 binary to run: $SLUICE_JAEGER_BIN if set,
// else bin/jaeger under the module root, else a jaeger beside the running
// executable, else jaeger from PATH (the order FindConsul follows).
func FindJaeger() (string, error) {
	if bin := os.Getenv("SLUICE_JAEGER_BIN"); bin != "" {
		path, err := exec.LookPath(bin)
		if err != nil {
			return "", fmt.Errorf("SLUICE_JAEGER_BIN=%s: %v; %s", bin, err, jaegerMissing)
		}
		return path, nil
	}
	if root, err := ModuleRoot(); err == nil {
		if path, err := exec.LookPath(filepath.Join(root, "bin", "jaeger")); err == nil {
			return path, nil
		}
	}
	if exe, err := os.Executable(); err == nil {
		if path, err := exec.LookPath(filepath.Join(filepath.Dir(exe), "jaeger")); err == nil {
			return path, nil
		}
	}
	if path, err := exec.LookPath("jaeger"); err == nil {
		return path, nil
	}
	return "", errors.New(jaegerMissing)
}

// JaegerConfig configures a Jaeger v2 child process: an OTLP receiver, the
// query service (API and UI) and in-memory storage, nothing else.
type JaegerConfig struct {
	// Bin is the jaeger binary, overriding FindJaeger.
	Bin string
	// OTLPHTTPAddr and OTLPGRPCAddr are the "127.0.0.1:PORT" addresses of
	// the OTLP receiver (HTTP/protobuf and gRPC). Required.
	OTLPHTTPAddr, OTLPGRPCAddr string
	// QueryAddr is the "127.0.0.1:PORT" address of the query service's
	// HTTP API and UI. Required. Its gRPC API gets a free port.
	QueryAddr string
	// Dir is the working directory, holding jaeger.yaml and jaeger.log
	// (unless Stdout is set). Required; created if missing.
	Dir string
	// Stdout receives the process's log, overriding Dir/jaeger.log.
	Stdout io.Writer
	// MaxTraces bounds the traces kept in memory; 0 means 100,000.
	MaxTraces int
}

// jaegerYAML is the whole configuration: no metrics, health or sampling
// ports, so the process listens only where the caller said (and on one
// free port for the query's gRPC API), and sends nothing anywhere.
const jaegerYAML = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    # Jaeger's own tracing would export to localhost:4317 and hold its
    # exit for 10 s when nothing listens there.
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: "%s"
    grpc:
      endpoint: "%s"
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: %d
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: "%s"
      http:
        endpoint: "%s"
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// Jaeger is a running (or stopped) Jaeger v2 child process.
type Jaeger struct {
	cfg JaegerConfig
	mu  sync.Mutex
	p   *proc
}

// StartJaeger writes the configuration, starts the process and waits until
// its query API answers.
func StartJaeger(ctx context.Context, cfg JaegerConfig) (*Jaeger, error) {
	if cfg.OTLPHTTPAddr == "" || cfg.OTLPGRPCAddr == "" || cfg.QueryAddr == "" || cfg.Dir == "" {
		return nil, errors.New("stack: JaegerConfig.OTLPHTTPAddr, OTLPGRPCAddr, QueryAddr and Dir are required")
	}
	bin := cfg.Bin
	if bin == "" {
		var err error
		if bin, err = FindJaeger(); err != nil {
			return nil, err
		}
	} else if _, err := exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("%s (%v)", jaegerMissing, err)
	}
	if cfg.MaxTraces == 0 {
		cfg.MaxTraces = 100000
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating jaeger dir: %w", err)
	}
	queryGRPC, err := FreePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(cfg.Dir, "jaeger.yaml")
	host := cfg.QueryAddr[:strings.LastIndexByte(cfg.QueryAddr, ':')]
	yaml := fmt.Sprintf(jaegerYAML, cfg.QueryAddr, fmt.Sprintf("%s:%d", host, queryGRPC), cfg.MaxTraces, cfg.OTLPGRPCAddr, cfg.OTLPHTTPAddr)
	if err := os.WriteFile(conf, []byte(yaml), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", conf, err)
	}
	p, err := startProc("jaeger", bin, []string{"--config", "file:" + conf}, cfg.Dir, "jaeger.log", cfg.Stdout)
	if err != nil {
		return nil, err
	}
	j := &Jaeger{cfg: cfg, p: p}
	client := &http.Client{Timeout: 2 * time.Second}
	if err := p.waitReady(ctx, func(ctx context.Context) error {
		for _, u := range []string{"http://" + cfg.QueryAddr + "/api/services", "http://" + cfg.OTLPHTTPAddr + "/v1/traces"} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			// The receiver answers a GET with 405: it is listening.
			if resp.StatusCode >= 500 {
				return fmt.Errorf("GET %s: %s", u, resp.Status)
			}
		}
		return nil
	}); err != nil {
		p.kill()
		return nil, err
	}
	return j, nil
}

// OTLPEndpoint is the base URL for OTEL_EXPORTER_OTLP_ENDPOINT (OTLP/HTTP).
func (j *Jaeger) OTLPEndpoint() string { return "http://" + j.cfg.OTLPHTTPAddr }

// QueryURL is the base URL of the query API and the UI.
func (j *Jaeger) QueryURL() string { return "http://" + j.cfg.QueryAddr }

// Stop sends SIGTERM and waits; if ctx ends first the process is killed.
func (j *Jaeger) Stop(ctx context.Context) error {
	j.mu.Lock()
	p := j.p
	j.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop(ctx)
}
