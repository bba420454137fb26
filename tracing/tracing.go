// Package tracing traces decisions with OpenTelemetry: WrapStore returns a
// funnel.Store that makes a span of each call of its store, a child of the
// span in the caller's context (the edge's: an HTTP request's, a gRPC
// call's), with the decision's outcome, and the time the store took as the
// span's duration.
//
// A program that does not trace does not wrap its store, and pays
// nothing. funnel serve wraps its store when --trace-endpoint (or the
// standard OTEL_EXPORTER_OTLP_ENDPOINT) is set.
package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/funnelrl/funnel"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/funnelrl/funnel/tracing"

// Attribute keys of a decision's span.
const (
	// AttrRule is the rule that asked for the decision, when the edge
	// names one (WithRule): an Envoy rule's name or key, an HTTP policy.
	AttrRule = attribute.Key("funnel.rule")
	// AttrOps is the number of limits decided together.
	AttrOps = attribute.Key("funnel.ops")
	// AttrAlgorithm is the first limit's algorithm.
	AttrAlgorithm = attribute.Key("funnel.algorithm")
	// AttrOutcome is "allowed", "refused", "fallback" or "error".
	AttrOutcome = attribute.Key("funnel.outcome")
	// AttrRemaining is the first result's Remaining.
	AttrRemaining = attribute.Key("funnel.remaining")
	// AttrRetryAfter is the first refused result's RetryAfter, in seconds.
	AttrRetryAfter = attribute.Key("funnel.retry_after_s")
	// AttrErrorClass is the error's class (funnel.ClassOf).
	AttrErrorClass = attribute.Key("funnel.error_class")
)

type ruleKey struct{}

// WithRule returns ctx naming rule as the reason of the decisions made
// under it, for their spans.
func WithRule(ctx context.Context, rule string) context.Context {
	return context.WithValue(ctx, ruleKey{}, rule)
}

// Store is a funnel.Store that traces each call of the store it wraps.
type Store struct {
	inner  funnel.Store
	tracer trace.Tracer
}

var (
	_ funnel.Store   = (*Store)(nil)
	_ funnel.Grouper = (*Store)(nil)
)

// WrapStore returns inner with a span for each call, made by tp's tracer.
func WrapStore(inner funnel.Store, tp trace.TracerProvider) *Store {
	return &Store{inner: inner, tracer: tp.Tracer(ScopeName)}
}

// Do makes a span around the wrapped store's Do, named by what its ops
// do: "funnel.decide" (takes), "funnel.refund", "funnel.charge" (a cost
// recorded afterwards, OpCharge) or "funnel.peek" (OpPeek, which charges
// nothing).
func (s *Store) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	name := "funnel.decide"
	if len(ops) > 0 {
		switch ops[0].Kind {
		case funnel.OpRefund:
			name = "funnel.refund"
		case funnel.OpCharge:
			name = "funnel.charge"
		case funnel.OpPeek:
			name = "funnel.peek"
		}
	}
	ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	err := s.inner.Do(ctx, ops, res)
	if !span.IsRecording() {
		return err
	}
	attrs := ruleAttrs(ctx, 6)
	attrs = append(attrs, AttrOps.Int(len(ops)))
	if len(ops) > 0 {
		attrs = append(attrs, AttrAlgorithm.String(ops[0].Limit.Algorithm.String()))
	}
	switch {
	case err != nil:
		attrs = errorAttrs(span, attrs, err)
	case len(ops) == 0 || len(res) == 0:
	case res[0].Fallback:
		attrs = append(attrs, AttrOutcome.String("fallback"))
	default:
		outcome := "allowed"
		for i := range ops {
			if i < len(res) && !res[i].Allowed {
				outcome = "refused"
				attrs = append(attrs, AttrRetryAfter.Float64(retrySeconds(res[i].RetryAfter)))
				break
			}
		}
		attrs = append(attrs, AttrOutcome.String(outcome), AttrRemaining.Int64(res[0].Remaining))
	}
	span.SetAttributes(attrs...)
	return err
}

// ruleAttrs returns a span's attributes, with room for n of them: the rule
// of ctx (WithRule) when it has one.
func ruleAttrs(ctx context.Context, n int) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, n)
	if rule, ok := ctx.Value(ruleKey{}).(string); ok {
		attrs = append(attrs, AttrRule.String(rule))
	}
	return attrs
}

// retrySeconds is d in seconds, -1 for funnel.Never.
func retrySeconds(d time.Duration) float64 {
	if d == funnel.Never {
		return -1
	}
	return d.Seconds()
}

// Group returns the wrapped store's group of key when it has groups
// (funnel.Grouper), else 0: keys of one call go together.
func (s *Store) Group(key string) int {
	return funnel.GroupOf(s.inner, key)
}

// NonBlocking reports whether the wrapped store's calls never wait
// (funnel.NonBlocker); making spans does not wait, so that the RESP server
// serves a traced memory store from its event loops as it serves the store.
func (s *Store) NonBlocking() bool { return funnel.NonBlockingOf(s.inner) }

// Keys returns the keys the wrapped store holds, when it counts them
// (funnel.KeyCounter).
func (s *Store) Keys() (int, bool) { return funnel.KeysOf(s.inner) }

// Evictions returns the keys the wrapped store evicted
// (funnel.EvictionCounter).
func (s *Store) Evictions() uint64 { return funnel.EvictionsOf(s.inner) }

// Reset makes a span "funnel.reset".
func (s *Store) Reset(ctx context.Context, key string) (bool, error) {
	ctx, span := s.tracer.Start(ctx, "funnel.reset")
	defer span.End()
	ok, err := s.inner.Reset(ctx, key)
	record(span, err)
	return ok, err
}

// TTL makes a span "funnel.ttl".
func (s *Store) TTL(ctx context.Context, key string) (time.Duration, bool, error) {
	ctx, span := s.tracer.Start(ctx, "funnel.ttl")
	defer span.End()
	d, ok, err := s.inner.TTL(ctx, key)
	record(span, err)
	return d, ok, err
}

// Bans makes a span "funnel.bans".
func (s *Store) Bans(ctx context.Context) ([]funnel.Ban, error) {
	ctx, span := s.tracer.Start(ctx, "funnel.bans")
	defer span.End()
	b, err := s.inner.Bans(ctx)
	record(span, err)
	return b, err
}

// Unban makes a span "funnel.unban".
func (s *Store) Unban(ctx context.Context, key string) (bool, error) {
	ctx, span := s.tracer.Start(ctx, "funnel.unban")
	defer span.End()
	ok, err := s.inner.Unban(ctx, key)
	record(span, err)
	return ok, err
}

func record(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetAttributes(AttrErrorClass.String(funnel.ClassOf(err).String()))
		span.SetStatus(codes.Error, funnel.ClassOf(err).String())
	}
}
