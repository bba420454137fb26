package daemon

import (
	"testing"

	"github.com/funnelrl/funnel/internal/config"
)

func TestTraceSettings(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	if _, on := traceSettings(config.Default(), env(nil)); on {
		t.Fatal("tracing on with nothing set")
	}
	if _, on := traceSettings(config.Default(), env(map[string]string{"TRACING_ENABLED": "false"})); on {
		t.Fatal("TRACING_ENABLED=false turned tracing on")
	}
	// envoyproxy/ratelimit's settings alone.
	got, on := traceSettings(config.Default(), env(map[string]string{
		"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SAMPLING_RATE": "0.25", "TRACING_SERVICE_NAME": "RateLimit",
	}))
	if !on || got.TraceProtocol != "grpc" || got.TraceSampleRate != 0.25 || got.TraceServiceName != "RateLimit" {
		t.Fatalf("upstream's settings: %v %+v", on, got)
	}
	// OpenTelemetry's standard variables win over upstream's; the
	// configuration wins over both.
	e := env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"TRACING_EXPORTER_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "edge", "TRACING_SERVICE_NAME": "RateLimit",
	})
	if got, on := traceSettings(config.Default(), e); !on || got.TraceProtocol != "http/protobuf" || got.TraceServiceName != "edge" || got.TraceSampleRate != 1 {
		t.Fatalf("OTEL_*: %v %+v", on, got)
	}
	cfg := config.Default()
	cfg.TraceProtocol, cfg.TraceServiceName, cfg.TraceSampleRate = "grpc", "funnel-a", 0.5
	if got, on := traceSettings(cfg, e); !on || got.TraceProtocol != "grpc" || got.TraceServiceName != "funnel-a" || got.TraceSampleRate != 0.5 {
		t.Fatalf("configuration: %v %+v", on, got)
	}
	if got, _ := traceSettings(config.Config{TraceEndpoint: "c:4317"}, env(nil)); got.TraceProtocol != "http" || got.TraceServiceName != "funnel" {
		t.Fatalf("defaults: %+v", got)
	}
}
