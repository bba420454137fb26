package rls_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
	"github.com/funnelrl/funnel/storetest"
)

// fuzzDescriptors builds descriptors from spec: descriptors are separated by
// '|', their entries by ',', and an entry's key from its value by '='. A
// descriptor that starts with '!' asks for negative hits, one that starts
// with '+' carries hits_addend descHits, and one that starts with '@' a
// limit override of descHits requests per unit descHits%8.
func fuzzDescriptors(spec string, descHits uint64) []*ratelimit.RateLimitDescriptor {
	var descs []*ratelimit.RateLimitDescriptor
	for _, ds := range strings.Split(spec, "|") {
		d := &ratelimit.RateLimitDescriptor{}
	flags:
		for len(ds) > 0 {
			switch ds[0] {
			case '!':
				d.IsNegativeHits = true
			case '+':
				d.HitsAddend = wrapperspb.UInt64(descHits)
			case '@':
				d.Limit = &ratelimit.RateLimitDescriptor_RateLimitOverride{
					RequestsPerUnit: uint32(descHits),
					Unit:            typev3.RateLimitUnit(descHits % 8),
				}
			default:
				break flags
			}
			ds = ds[1:]
		}
		if ds != "" {
			for _, es := range strings.Split(ds, ",") {
				k, v, _ := strings.Cut(es, "=")
				d.Entries = append(d.Entries, &ratelimit.RateLimitDescriptor_Entry{Key: k, Value: v})
			}
		}
		descs = append(descs, d)
	}
	return descs
}

// FuzzShouldRateLimit runs requests built from the fuzz input through a
// server over a memory store and the rules of extRules, and through one with
// the rules of quotaRules, its dynamic metadata on, and (for domain ext and
// an odd request hits_addend) through one that charges every hit into debt
// (Options.ChargeOverLimit), on a fake clock that
// advances between requests. The server must not panic, and must answer
// either a response whose overall code and every descriptor's code is OK or
// OVER_LIMIT, one status per descriptor, or a client's error
// (InvalidArgument) or the rules' (FailedPrecondition): with a memory store
// nothing is unavailable, and Internal is a bug.
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("ext", uint32(1), "a=1", uint64(0), int64(0))
	f.Add("ext", uint32(0), "b=x|gcra=y", uint64(3), int64(time.Second))
	f.Add("ext", uint32(5), "blocked=z|shadow=s|quiet_block=q", uint64(0), int64(0))
	f.Add("ext", uint32(1), "@a=1", uint64(10), int64(time.Minute))
	f.Add("ext", uint32(1), "@a=1", uint64(9), int64(0)) // unit 1: second
	f.Add("ext", uint32(1), "!a=1|+b=2", uint64(2), int64(-time.Hour))
	f.Add("ext", uint32(4294967295), "tiny=1,x=2|slow=3", uint64(1<<63), int64(250*time.Millisecond))
	f.Add("ext", uint32(1), "+a="+strings.Repeat("k", 600), uint64(1<<32), int64(0))
	f.Add("ext", uint32(1), "", uint64(0), int64(0))
	f.Add("ext", uint32(1), "a=1|a=1|a=1|a=1|a=1|b=1", uint64(0), int64(0))
	f.Add("", uint32(0), "a=1", uint64(0), int64(0))
	f.Add("other", uint32(1), "k=v,k2=v2", uint64(0), int64(0))
	f.Add("ext", uint32(1), "=|,|==", uint64(0), int64(0))
	f.Add("q", uint32(1), "quota1=x|quota2=x|regular=y", uint64(0), int64(0))
	f.Add("q", uint32(1), "quota_block=x|+shadow_quota=1|unlimited=u|@other=z", uint64(2), int64(0))

	set, err := rules.Parse(strings.NewReader(extRules), "ext.yaml", rules.Options{})
	if err != nil {
		f.Fatal(err)
	}
	clock := storetest.NewClock(t0.UnixNano())
	store := memstore.New(memstore.Options{Now: clock.Now})
	f.Cleanup(func() { store.Close() })
	srv := rls.New(funnel.New(store), rls.Static(set), rls.Options{
		Now:    func() time.Time { return time.Unix(0, clock.Now()) },
		Logger: slog.New(slog.DiscardHandler),
	})
	qset, err := rules.Parse(strings.NewReader(quotaRules), "q.yaml", rules.Options{})
	if err != nil {
		f.Fatal(err)
	}
	qsrv := rls.New(funnel.New(store), rls.Static(qset), rls.Options{
		Now:             func() time.Time { return time.Unix(0, clock.Now()) },
		Logger:          slog.New(slog.DiscardHandler),
		DynamicMetadata: true,
	})

	csrv := rls.New(funnel.New(store), rls.Static(set), rls.Options{
		Now:             func() time.Time { return time.Unix(0, clock.Now()) },
		Logger:          slog.New(slog.DiscardHandler),
		ChargeOverLimit: true,
	})
	f.Add("ext", uint32(3), "+a=1|b=2|+gcra=3", uint64(1<<40), int64(0))
	f.Add("ext", uint32(1), "+a=1|+a=1|shadow=s", uint64(0), int64(0))

	f.Fuzz(func(t *testing.T, domain string, hits uint32, spec string, descHits uint64, advance int64) {
		// Time only moves forward, by at most a day a request.
		if advance < 0 {
			advance = -advance
		}
		clock.Add(time.Duration(advance % int64(24*time.Hour)))
		req := &rlsv3.RateLimitRequest{
			Domain:      domain,
			Descriptors: fuzzDescriptors(spec, descHits),
			HitsAddend:  hits,
		}
		if domain == "q" {
			checkResponse(t, qsrv, req)
			return
		}
		if hits%2 == 1 {
			checkResponse(t, csrv, req)
			return
		}
		checkResponse(t, srv, req)
	})
}

// checkResponse asks srv and checks the answer's invariants: see
// FuzzShouldRateLimit.
func checkResponse(t *testing.T, srv *rls.Server, req *rlsv3.RateLimitRequest) {
	t.Helper()
	resp, err := srv.ShouldRateLimit(context.Background(), req)
	if err != nil {
		switch c := status.Code(err); c {
		case codes.InvalidArgument, codes.FailedPrecondition:
		default:
			t.Fatalf("%v: code %v (%v), want InvalidArgument or FailedPrecondition", req, c, err)
		}
		return
	}
	if resp == nil {
		t.Fatalf("%v: no response and no error", req)
	}
	if len(resp.Statuses) != len(req.Descriptors) {
		t.Fatalf("%v: %d statuses for %d descriptors", req, len(resp.Statuses), len(req.Descriptors))
	}
	over := false
	for i, st := range resp.Statuses {
		switch st.GetCode() {
		case rlsv3.RateLimitResponse_OK:
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			over = true
		default:
			t.Fatalf("%v: descriptor %d has code %v", req, i, st.GetCode())
		}
	}
	switch resp.OverallCode {
	case rlsv3.RateLimitResponse_OK:
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		if !over {
			t.Fatalf("%v: OVER_LIMIT overall with no descriptor over its limit", req)
		}
	default:
		t.Fatalf("%v: overall code %v", req, resp.OverallCode)
	}
}
