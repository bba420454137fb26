package tracing_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/tracing"
)

// A reserve and a settle each make a span, with the outcome of the key
// after them; an unknown reservation is the caller's error.
func TestSpansOfReservations(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	lim := funnel.New(tracing.WrapStore(ms, tp))
	ctx := context.Background()
	limit := funnel.PerMinute(10)
	r, _, err := lim.Reserve(ctx, "k", limit, 4, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Settle(ctx, "k", r.ID, 30); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Settle(ctx, "k", "nope", 1); err == nil {
		t.Fatal("no error for an unknown reservation")
	}
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	for i, want := range [][2]string{{"funnel.reserve", "allowed"}, {"funnel.settle", "refused"}, {"funnel.settle", "error"}} {
		a := attrs(spans[i])
		if spans[i].Name() != want[0] || a[tracing.AttrOutcome].AsString() != want[1] {
			t.Errorf("span %d: %s %v; want %v", i, spans[i].Name(), a, want)
		}
	}
	if a := attrs(spans[2]); a[tracing.AttrErrorClass].AsString() != "invalid" || spans[2].Status().Code != 0 {
		t.Errorf("an unknown reservation, the caller's mistake: %v %v", a, spans[2].Status())
	}
}
