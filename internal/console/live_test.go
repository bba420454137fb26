package console

import (
	"fmt"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/metrics"
)

// BenchmarkSample is the live view's work each second: one read of a
// registry like the daemon's (Go runtime and process collectors included)
// with 20 rules' decisions.
func BenchmarkSample(b *testing.B) {
	m := metrics.New(metrics.Options{})
	for i := range 20 {
		m.ObserveDecision(fmt.Sprintf("rule-%d", i), funnel.Result{Allowed: true})
	}
	s := newSampler(m.Registry(), NewTop(nil), nil, time.Now)
	b.ReportAllocs()
	for b.Loop() {
		s.sample()
	}
}
