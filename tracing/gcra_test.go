package tracing_test

import (
	"context"
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/tracing"
)

// The tracing store passes Redis's GCRA command through, a span per call.
func TestSpansOfGCRA(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	g, ok := funnel.GCRAOf(tracing.WrapStore(ms, tp))
	if !ok {
		t.Fatal("the tracing store does not pass GCRA through")
	}
	ctx := context.Background()
	p, err := gcra.NewCommandParams(0, 1, 60, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range [][5]int64{{0, 1, 0, -1, 60}, {1, 1, 0, 60, 60}} {
		r, err := g.GCRA(ctx, "k", p)
		if err != nil || r.Reply.Ints() != want {
			t.Fatal(r, err)
		}
	}
	over, _ := gcra.NewCommandParams(9223372036854775807, 1, 1, 1)
	if _, err := g.GCRA(ctx, "k", over); !errors.Is(err, gcra.ErrCommandBurstOverflow) {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	for i, want := range []string{"allowed", "refused", "error"} {
		a := attrs(spans[i])
		if spans[i].Name() != "funnel.gcra" || a[tracing.AttrOutcome].AsString() != want {
			t.Errorf("span %d: %s %v", i, spans[i].Name(), a)
		}
	}
	if a := attrs(spans[1]); a[tracing.AttrRetryAfter].AsFloat64() != 60 {
		t.Errorf("refusal's retry after: %v", a[tracing.AttrRetryAfter])
	}
	if a := attrs(spans[2]); a[tracing.AttrErrorClass].AsString() != "invalid" || spans[2].Status().Code != 0 {
		t.Errorf("an overflow, the caller's mistake: %v %v", a, spans[2].Status())
	}
}
