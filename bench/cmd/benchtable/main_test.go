package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/funnelrl/funnel/bench
cpu: Test CPU
BenchmarkAllow/hot/funnel-memstore           	 3491431	        50.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/hot/funnel-memstore-2         	 3001707	        80.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/hot/sethvargo                 	 2950875	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/hot/sethvargo-2               	 3121066	        40.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/hot/throttled-2               	 1000000	       228.5 ns/op	         0.01864 errors/op	       2 B/op	       0 allocs/op
BenchmarkAllow/hot/xrate-single              	 2687208	        10.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/keys100k/funnel-memstore      	  342748	       600.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/keys100k/funnel-memstore      	  342748	       700.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/keys100k/funnel-memstore      	  342748	       900.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/keys100k/ulule                	  169939	      1200 ns/op	      32 B/op	       2 allocs/op
BenchmarkMemoryPerKey/funnel-memstore         	       2	 824863188 ns/op	        80.16 B/key	         2.011 allocs/key	        12.00 key-B	       824.9 ns/key	174783424 B/op	 2010608 allocs/op
BenchmarkMemoryPerKey/ulule                   	       1	1228170052 ns/op	       193.6 B/key	         6.360 allocs/key	        12.00 key-B	      1228 ns/key	217565384 B/op	 6359791 allocs/op
BenchmarkRedis/par32/hot/funnel-redis-2         	  100000	      5000 ns/op	        10.00 decisions/call	    200000 decisions/s	         4.000 redis-cpu-µs/op	         3.000 redis-µs/op	     728 B/op	      13 allocs/op
BenchmarkRedis/par32/hot/redis_rate-2           	   50000	     20000 ns/op	         1.000 decisions/call	     50000 decisions/s	        16.00 redis-cpu-µs/op	         8.000 redis-µs/op	     709 B/op	      23 allocs/op
BenchmarkRedis/serial/hot/redis_rate-2          	   50000	     20000 ns/op	         1.000 decisions/call	      9000 decisions/s	        16.00 redis-cpu-µs/op	         8.000 redis-µs/op	     709 B/op	      23 allocs/op
PASS
ok  	github.com/funnelrl/funnel/bench	4.719s
`

func TestSplitName(t *testing.T) {
	for name, want := range map[string]id{
		"Allow/hot/funnel-memstore":    {"Allow/hot/funnel-memstore", 1},
		"Allow/hot/funnel-memstore-2":  {"Allow/hot/funnel-memstore", 2},
		"MemoryPerKey/xrate-map-16":    {"MemoryPerKey/xrate-map", 16},
		"Allow/keys100k/throttled":     {"Allow/keys100k/throttled", 1},
		"Allow/keys100k/throttled-128": {"Allow/keys100k/throttled", 128},
	} {
		if got := splitName(name); got != want {
			t.Errorf("splitName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestRender(t *testing.T) {
	r, cpu, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if cpu != "Test CPU" {
		t.Errorf("cpu = %q", cpu)
	}
	var out strings.Builder
	render(&out, r, cpu)
	got := out.String()
	for _, want := range []string{
		"| scenario | cpu | Funnel AllowChecked | sethvargo/go-limiter | throttled GCRA | ulule/limiter | x/time/rate single (ref) | Funnel AllowChecked ÷ fastest other keyed |",
		// hot, cpu 1: 50 vs sethvargo's 100; x/time/rate (10) is not counted.
		"| hot | 1 | 50.0 (0; 0 B) | 100.0 (0; 0 B) | — | — | 10.0 (0; 0 B) | 0.50× (vs sethvargo/go-limiter) |",
		// hot, cpu 2: sethvargo (40) beats throttled (228.5), whose errors are flagged.
		"| hot | 2 | 80.0 (0; 0 B) | 40.0 (0; 0 B) | 228.5 (0; 2 B) ‡ | — | — | 2.00× (vs sethvargo/go-limiter) |",
		"‡ throttled GCRA, hot, cpu 2: 1.86% of requests returned an error.",
		// keys100k: the median of three runs is 700.
		"| keys100k | 1 | 700.0 (0; 0 B) | — | — | 1200 (2; 32 B) | — | 0.58× (vs ulule/limiter) |",
		"| Funnel AllowChecked | 1 | 80.16 | 12 | 68.2 | no | 2.01 | 824.9 |",
		"| ulule/limiter | 1 | 193.6 | 12 | 181.6 | no | 6.36 | 1228 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q; output:\n%s", want, got)
		}
	}
}

func TestRedisTable(t *testing.T) {
	r, cpu, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	render(&out, r, cpu)
	got := out.String()
	for _, want := range []string{
		"| scenario | cpu | Funnel redisstore (go-redis) | go-redis/redis_rate | Funnel redisstore (go-redis) ÷ go-redis/redis_rate: decisions/s, script µs |",
		"| par32/hot | 2 | 200.0k/s (13); 3.00 / 4 | 50.0k/s (23); 8.00 / 16 | 4.00×, 0.38× |",
		"| serial/hot | 2 | — | 9000/s (23); 8.00 / 16 | — |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

func TestParseSkipsNoise(t *testing.T) {
	r, _, err := parse(strings.NewReader("BenchmarkX logs something\n--- FAIL: BenchmarkY\nok x 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.order) != 0 {
		t.Errorf("parsed %v from noise", r.order)
	}
	if !r.failed {
		t.Error("the FAIL line went unnoticed")
	}
}
