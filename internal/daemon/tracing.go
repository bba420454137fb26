package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"

	"github.com/funnelrl/funnel/internal/config"
	"github.com/funnelrl/funnel/internal/lograte"
	"github.com/funnelrl/funnel/tracing"
)

// traces is the daemon's tracing, when on; a nil *traces traces nothing
// and costs nothing.
type traces struct {
	tp   *sdktrace.TracerProvider
	prop propagation.TextMapPropagator
}

// traceSettings resolves the tracing settings: the configuration's, then
// OpenTelemetry's standard environment variables, then envoyproxy/ratelimit's
// TRACING_* ones. It reports false when nothing asks for traces.
func traceSettings(cfg config.Config, getenv func(string) string) (config.Config, bool) {
	on := cfg.TraceEndpoint != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
		getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if v, err := strconv.ParseBool(getenv("TRACING_ENABLED")); err == nil && v {
		on = true
	}
	if !on {
		return cfg, false
	}
	first := func(vs ...string) string {
		for _, v := range vs {
			if v != "" {
				return v
			}
		}
		return ""
	}
	cfg.TraceProtocol = first(cfg.TraceProtocol, getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
		getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), getenv("TRACING_EXPORTER_PROTOCOL"), "http")
	cfg.TraceServiceName = first(cfg.TraceServiceName, getenv("OTEL_SERVICE_NAME"), getenv("TRACING_SERVICE_NAME"), "funnel")
	if cfg.TraceSampleRate == 0 {
		cfg.TraceSampleRate = 1
		if v, err := strconv.ParseFloat(getenv("TRACING_SAMPLING_RATE"), 64); err == nil && v >= 0 && v <= 1 {
			cfg.TraceSampleRate = v
		}
	}
	return cfg, true
}

// openTracing starts the exporter and the tracer provider when tracing is
// asked for, and wraps the store so that each decision is a span.
func (d *Daemon) openTracing() error {
	cfg, on := traceSettings(d.cfg, os.Getenv)
	if !on {
		return nil
	}
	exp, err := traceExporter(cfg)
	if err != nil {
		return fmt.Errorf("daemon: tracing: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.TraceServiceName)}
	for _, kv := range []struct{ env, key string }{
		{"TRACING_SERVICE_NAMESPACE", "service.namespace"}, {"TRACING_SERVICE_INSTANCE_ID", "service.instance.id"},
	} {
		if v := os.Getenv(kv.env); v != "" {
			attrs = append(attrs, attribute.String(kv.key, v))
		}
	}
	// The environment's OTEL_RESOURCE_ATTRIBUTES, then the settings, which
	// win.
	res, err := resource.Merge(resource.Environment(), resource.NewSchemaless(attrs...))
	if err != nil {
		return fmt.Errorf("daemon: tracing: %w", err)
	}
	t := &traces{
		tp: sdktrace.NewTracerProvider(
			sdktrace.WithBatcher(exp),
			sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.TraceSampleRate))),
		),
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
	d.traces = t
	// The exporter's errors (a collector down) go to the daemon's log, at
	// most once a minute with the count of those held back, instead of to
	// the standard logger on every batch.
	errLog := lograte.New(time.Minute)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		errLog.Do(func(held int64) { d.log.Warn("tracing: spans not exported", "err", err, "suppressed", held) })
	}))
	d.store = tracing.WrapStore(d.store, t.tp)
	d.log.Info("tracing decisions", "protocol", cfg.TraceProtocol, "endpoint", cfg.TraceEndpoint,
		"sample_rate", cfg.TraceSampleRate, "service", cfg.TraceServiceName)
	return nil
}

// traceExporter builds the OTLP exporter of cfg.
func traceExporter(cfg config.Config) (*otlptrace.Exporter, error) {
	ep := cfg.TraceEndpoint
	url := strings.Contains(ep, "://")
	ctx := context.Background()
	if cfg.TraceProtocol == "grpc" {
		var opts []otlptracegrpc.Option
		switch {
		case url:
			opts = append(opts, otlptracegrpc.WithEndpointURL(ep))
		case ep != "":
			opts = append(opts, otlptracegrpc.WithEndpoint(ep))
		}
		if cfg.TraceInsecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	switch {
	case url:
		opts = append(opts, otlptracehttp.WithEndpointURL(ep))
	case ep != "":
		opts = append(opts, otlptracehttp.WithEndpoint(ep))
	}
	if cfg.TraceInsecure {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	return otlptracehttp.New(ctx, opts...)
}

// grpcOptions returns the gRPC server's options that take the caller's
// trace from its metadata and make a span of each call.
func (t *traces) grpcOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.tp), otelgrpc.WithPropagators(t.prop)))}
}

// httpHandler wraps h so that it takes the caller's trace from its
// traceparent header and makes a span of each request.
func (t *traces) httpHandler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return otelhttp.NewHandler(h, "funnel.http", otelhttp.WithTracerProvider(t.tp), otelhttp.WithPropagators(t.prop))
}

// shutdown sends the spans still buffered, until ctx ends: a collector
// that does not answer holds the process no longer than that.
func (t *traces) shutdown(ctx context.Context) {
	if t != nil {
		t.tp.Shutdown(ctx)
	}
}
