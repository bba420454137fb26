package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/funnelrl/funnel"
)

var _ funnel.ReserveStore = (*Store)(nil)

// Reserve makes a span "funnel.reserve" around the wrapped store's Reserve
// (funnel.ReserveStore), with the attributes of a decision's span. It
// fails with funnel.ErrNoReserve when the wrapped store keeps no
// reservations.
func (s *Store) Reserve(ctx context.Context, key string, limit funnel.Checked, estimate int64, id string, ttl time.Duration) (funnel.Result, error) {
	ctx, span := s.tracer.Start(ctx, "funnel.reserve", trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	r, err := funnel.ForwardReserve(ctx, s.inner, key, limit, estimate, id, ttl)
	if span.IsRecording() {
		attrs := []attribute.KeyValue{AttrAlgorithm.String(limit.Algorithm.String())}
		span.SetAttributes(append(attrs, s.outcome(ctx, span, r, err)...)...)
	}
	return r, err
}

// Settle makes a span "funnel.settle" around the wrapped store's Settle:
// the outcome is that of the key after the settle ("allowed" while it is
// within its limit, "refused" when in debt).
func (s *Store) Settle(ctx context.Context, key, id string, actual int64) (funnel.Settlement, error) {
	ctx, span := s.tracer.Start(ctx, "funnel.settle", trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	st, err := funnel.ForwardSettle(ctx, s.inner, key, id, actual)
	if span.IsRecording() {
		span.SetAttributes(s.outcome(ctx, span, st.Result, err)...)
	}
	return st, err
}

// errorAttrs appends to attrs the outcome "error" and the class of err,
// which it records on span, with an error status when the class is the
// store's failure.
func errorAttrs(span trace.Span, attrs []attribute.KeyValue, err error) []attribute.KeyValue {
	class := funnel.ClassOf(err)
	span.RecordError(err)
	if class == funnel.ClassUnavailable || class == funnel.ClassInternal {
		span.SetStatus(codes.Error, class.String())
	}
	return append(attrs, AttrOutcome.String("error"), AttrErrorClass.String(class.String()))
}

// outcome returns the rule, outcome, remaining and retry attributes of a
// call that answered r or err, and records err on span.
func (s *Store) outcome(ctx context.Context, span trace.Span, r funnel.Result, err error) []attribute.KeyValue {
	attrs := ruleAttrs(ctx, 4)
	switch {
	case err != nil:
		attrs = errorAttrs(span, attrs, err)
	case r.Fallback:
		attrs = append(attrs, AttrOutcome.String("fallback"))
	case !r.Allowed:
		attrs = append(attrs, AttrOutcome.String("refused"), AttrRetryAfter.Float64(retrySeconds(r.RetryAfter)), AttrRemaining.Int64(r.Remaining))
	default:
		attrs = append(attrs, AttrOutcome.String("allowed"), AttrRemaining.Int64(r.Remaining))
	}
	return attrs
}
