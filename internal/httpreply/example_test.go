package httpreply_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/httpreply"
)

// SetHeaders writes the fields of several limits, for a handler that calls
// the Limiter itself.
func ExampleSetHeaders() {
	h := http.Header{}
	httpreply.SetHeaders(h,
		httpreply.Policy{Name: "burst", Limit: funnel.PerMinute(100), Result: funnel.Result{Allowed: true, Remaining: 37, ResetAfter: 37800 * time.Millisecond}},
		httpreply.Policy{Name: "daily", Limit: funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1000, Calendar: funnel.Daily},
			Result: funnel.Result{Allowed: false, RetryAfter: 5 * time.Hour, ResetAfter: 5 * time.Hour}},
	)
	fmt.Println("RateLimit-Policy:", h.Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", h.Get("RateLimit"))
	fmt.Println("Retry-After:", h.Get("Retry-After"))
	// Output:
	// RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400
	// RateLimit: "burst";r=37;t=38, "daily";r=0;t=18000
	// Retry-After: 18000
}
