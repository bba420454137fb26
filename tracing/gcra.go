package tracing

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

var _ funnel.GCRAStore = (*Store)(nil)

// GCRA makes a span "funnel.gcra" around the wrapped store's GCRA
// (funnel.GCRAStore), with the outcome ("allowed", "refused", "fallback" or
// "error"), the remaining tokens and, when refused, the retry after in
// seconds (-1 for never), as the command replies them. It fails with
// funnel.ErrNoGCRA when the wrapped store does not run the command.
func (s *Store) GCRA(ctx context.Context, key string, p gcra.CommandParams) (funnel.GCRAResult, error) {
	ctx, span := s.tracer.Start(ctx, "funnel.gcra", trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	r, err := funnel.ForwardGCRA(ctx, s.inner, key, p)
	if !span.IsRecording() {
		return r, err
	}
	attrs := ruleAttrs(ctx, 4)
	switch {
	case err != nil:
		attrs = errorAttrs(span, attrs, err)
	case r.Fallback:
		attrs = append(attrs, AttrOutcome.String("fallback"))
	case r.Reply.Limited:
		attrs = append(attrs, AttrOutcome.String("refused"), AttrRetryAfter.Float64(float64(r.Reply.RetryAfter)), AttrRemaining.Int64(r.Reply.Remaining))
	default:
		attrs = append(attrs, AttrOutcome.String("allowed"), AttrRemaining.Int64(r.Reply.Remaining))
	}
	span.SetAttributes(attrs...)
	return r, err
}
