package tracing_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/tracing"
)

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestSpansOfDecisions(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	lim := funnel.New(tracing.WrapStore(ms, tp))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "edge")
	ctx = tracing.WithRule(ctx, "per-user")
	limit := funnel.PerSecond(1)
	if r, err := lim.Allow(ctx, "k", limit); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	if r, err := lim.Allow(ctx, "k", limit); err != nil || r.Allowed {
		t.Fatal(r, err)
	}
	if _, err := lim.Allow(ctx, "k", funnel.Limit{}); err == nil {
		t.Fatal("an invalid limit was decided")
	}
	if _, err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Charge(ctx, "c", limit, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.PeekN(ctx, "c", limit, 1); err != nil {
		t.Fatal(err)
	}
	parent.End()
	spans := rec.Ended()
	// The invalid limit never reaches the store: two decisions, a reset,
	// a charge into debt, a peek, and the edge's span.
	if len(spans) != 6 {
		t.Fatalf("%d spans", len(spans))
	}
	for i, want := range []struct {
		name, outcome string
	}{{"funnel.decide", "allowed"}, {"funnel.decide", "refused"}, {"funnel.reset", ""}, {"funnel.charge", "refused"}, {"funnel.peek", "refused"}} {
		s := spans[i]
		a := attrs(s)
		if s.Name() != want.name || a[tracing.AttrOutcome].AsString() != want.outcome {
			t.Errorf("span %d: %s %v", i, s.Name(), a)
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("span %d is not the edge's child", i)
		}
		if want.name == "funnel.decide" {
			if a[tracing.AttrRule].AsString() != "per-user" || a[tracing.AttrAlgorithm].AsString() != "gcra" || a[tracing.AttrOps].AsInt64() != 1 {
				t.Errorf("span %d: %v", i, a)
			}
		}
	}
	if a := attrs(spans[1]); a[tracing.AttrRetryAfter].AsFloat64() <= 0 || a[tracing.AttrRetryAfter].AsFloat64() > 1 {
		t.Errorf("refusal's retry after: %v", a[tracing.AttrRetryAfter])
	}
	if d := spans[0].EndTime().Sub(spans[0].StartTime()); d <= 0 || d > time.Second {
		t.Errorf("store time %v", d)
	}
}

// Not sampled, a span records nothing and costs no attributes.
func TestNotSampled(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.NeverSample()))
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	lim := funnel.New(tracing.WrapStore(ms, tp))
	if _, err := lim.Allow(context.Background(), "k", funnel.PerSecond(1)); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans recorded, none sampled", n)
	}
}
