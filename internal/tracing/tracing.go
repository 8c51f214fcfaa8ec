// Package tracing sets up OpenTelemetry for a sluice process and holds what the
// parts share to trace one job from the gate's POST to the worker's handler
// (docs/tracing.md): the W3C traceparent carried in the job's envelope, the
// span names and attribute keys, and a slog handler that adds a job's trace
// and span ids to its log lines.
//
// Tracing is off by default. Off, no exporter exists, the global tracer
// provider is OpenTelemetry's no-op one, and the parts check Enabled (one
// atomic load) before doing any tracing work, so the hot path pays nothing
// more.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every sluice span.
const ScopeName = "github.com/sluicehq/sluice"

// Span names, one per hop of a job (docs/tracing.md).
const (
	SpanGateProduce   = "sluice.gate.produce"
	SpanKafkaWait     = "sluice.kafka.wait"
	SpanRelayWrite    = "sluice.relay.write"
	SpanRedisWait     = "sluice.redis.wait"
	SpanWorkerAttempt = "sluice.worker.attempt"
)

// Attribute keys. The messaging.* ones follow OpenTelemetry's messaging
// semantic conventions; the sluice.* ones are ours.
const (
	AttrSystem         = attribute.Key("messaging.system")
	AttrTopic          = attribute.Key("messaging.destination.name")
	AttrKafkaPartition = attribute.Key("messaging.destination.partition.id")
	AttrKafkaOffset    = attribute.Key("messaging.kafka.offset")
	AttrJobID          = attribute.Key("messaging.message.id")
	AttrJobType        = attribute.Key("sluice.job.type")
	AttrGroup          = attribute.Key("sluice.job.group")
	AttrRedisPartition = attribute.Key("sluice.redis.partition")
	AttrAttempt        = attribute.Key("sluice.attempt")
	AttrMaxAttempts    = attribute.Key("sluice.max_attempts")
	AttrOutcome        = attribute.Key("sluice.outcome")
	AttrWaitReason     = attribute.Key("sluice.wait.reason")
	AttrResource       = attribute.Key("sluice.job.resource")
	AttrBatchJobs      = attribute.Key("sluice.batch.jobs")
	// AttrKeep asks the sampler to record the span whatever the head
	// decision: a failed attempt of an unsampled trace starts a new root
	// span with it, linked to the job's trace (docs/tracing.md, Sampling).
	AttrKeep = attribute.Key("sluice.keep")
)

var on atomic.Bool

// Enabled reports whether this process exports traces: Setup turned it on.
func Enabled() bool { return on.Load() }

// Tracer is sluice's tracer from the global provider.
func Tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(ScopeName) }

// Setup turns tracing on for this process: an OTLP/HTTP exporter configured
// by the standard OTEL_EXPORTER_OTLP_* variables (endpoint
// http://localhost:4318 unless set), the sampler OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG name (default parentbased_always_on), the
// resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (service.name
// defaults to service), and the batch span processor's OTEL_BSP_*
// variables. OpenTelemetry's own errors (an export that failed) go to log.
// OTEL_SDK_DISABLED=true leaves tracing off. The returned function flushes
// and stops the exporter.
func Setup(ctx context.Context, service string, log *slog.Logger) (shutdown func(context.Context) error, err error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		log.Info("tracing requested but OTEL_SDK_DISABLED=true: tracing stays off")
		return func(context.Context) error { return nil }, nil
	}
	sampler, err := SamplerFromEnv()
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter (OTEL_EXPORTER_OTLP_*): %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", service)),
		resource.Environment(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(res),
	)
	// The SDK's own messages: errors (an export that failed) through the
	// error handler, its diagnostics through its logr logger, both into
	// the part's slog logger.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry", "err", err)
	}))
	otel.SetLogger(logr.FromSlogHandler(log.With("from", "opentelemetry").Handler()))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	on.Store(true)
	log.Info("tracing on: OpenTelemetry spans export over OTLP/HTTP", "endpoint", endpoint(), "sampler", samplerName())
	return func(ctx context.Context) error {
		on.Store(false)
		otel.SetTracerProvider(noop.NewTracerProvider())
		return tp.Shutdown(ctx)
	}, nil
}

// Use installs tp as the process's provider and turns tracing on: for tests
// that bring their own provider (an in-memory recorder, say). The returned
// function turns it off again.
func Use(tp trace.TracerProvider) (restore func()) {
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	on.Store(true)
	return func() { on.Store(false); otel.SetTracerProvider(prev) }
}

// endpoint is where spans go, for the start's log line: a password in
// the URL is redacted.
func endpoint() string {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := os.Getenv(k); v != "" {
			if u, err := url.Parse(v); err == nil {
				return u.Redacted()
			}
			return "(unparsable " + k + ")"
		}
	}
	return "http://localhost:4318"
}

func samplerName() string {
	s := os.Getenv("OTEL_TRACES_SAMPLER")
	if s == "" {
		s = "parentbased_always_on"
	}
	if a := os.Getenv("OTEL_TRACES_SAMPLER_ARG"); a != "" {
		s += ":" + a
	}
	return s
}

// SamplerFromEnv is the head sampler OTEL_TRACES_SAMPLER (always_on,
// always_off, traceidratio, parentbased_always_on, parentbased_always_off,
// parentbased_traceidratio; default parentbased_always_on) and
// OTEL_TRACES_SAMPLER_ARG (the ratio, default 1) name, wrapped so a span
// with sluice.keep=true is always recorded.
func SamplerFromEnv() (sdktrace.Sampler, error) {
	ratio := 1.0
	if a := os.Getenv("OTEL_TRACES_SAMPLER_ARG"); a != "" {
		v, err := strconv.ParseFloat(a, 64)
		if err != nil || v < 0 || v > 1 {
			return nil, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER_ARG=%q: want a ratio between 0 and 1", a)
		}
		ratio = v
	}
	var s sdktrace.Sampler
	switch name := os.Getenv("OTEL_TRACES_SAMPLER"); name {
	case "always_on":
		s = sdktrace.AlwaysSample()
	case "always_off":
		s = sdktrace.NeverSample()
	case "traceidratio":
		s = sdktrace.TraceIDRatioBased(ratio)
	case "", "parentbased_always_on":
		s = sdktrace.ParentBased(sdktrace.AlwaysSample())
	case "parentbased_always_off":
		s = sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		s = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	default:
		return nil, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
	}
	return keepSampler{s}, nil
}

// keepSampler records every span started with sluice.keep=true and leaves
// the rest to the head sampler.
type keepSampler struct{ sdktrace.Sampler }

func (k keepSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	for _, a := range p.Attributes {
		if a.Key == AttrKeep && a.Value.AsBool() {
			return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
		}
	}
	return k.Sampler.ShouldSample(p)
}

func (k keepSampler) Description() string { return "SluiceKeep{" + k.Sampler.Description() + "}" }

// Traceparent is sc as a W3C traceparent value, "" when sc is not valid.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendHex(b, tid[:])
	b = append(b, '-')
	b = appendHex(b, sid[:])
	if sc.IsSampled() {
		return string(append(b, "-01"...))
	}
	return string(append(b, "-00"...))
}

func appendHex(b, v []byte) []byte {
	const digits = "0123456789abcdef"
	for _, c := range v {
		b = append(b, digits[c>>4], digits[c&0xf])
	}
	return b
}

// Parse reads a W3C traceparent value into a remote span context; the
// second result is false when s is empty or malformed (then there is no
// parent: a malformed value is ignored, as the W3C spec asks).
//
// Only version 00's form is read ("00-<32 hex>-<16 hex>-<2 hex>"): what the
// gate writes. Hand-written, as the worker reads one per job.
func Parse(s string) (trace.SpanContext, bool) {
	if len(s) != 55 || s[0] != '0' || s[1] != '0' || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	tid, err := trace.TraceIDFromHex(s[3:35])
	if err != nil {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(s[36:52])
	if err != nil {
		return trace.SpanContext{}, false
	}
	flags, ok := hexByte(s[53], s[54])
	if !ok {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

func hexByte(hi, lo byte) (byte, bool) {
	h, ok1 := unhex(hi)
	l, ok2 := unhex(lo)
	return h<<4 | l, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// ContextWith returns ctx with the remote parent s (a traceparent), or ctx
// unchanged when s is not one.
func ContextWith(ctx context.Context, s string) context.Context {
	sc, ok := Parse(s)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// RecordError marks span failed with err.
func RecordError(span trace.Span, err error) {
	if err == nil {
		return
	}
	span.RecordError(err)
	span.SetStatus(codesError, err.Error())
}
