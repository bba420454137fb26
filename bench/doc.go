// Package bench compares Funnel's stores with other Go rate limiters. It is a module of its own, so that the limiters it compares
// against never enter Funnel's go.mod.
//
// The package has no API: everything is in its benchmarks. One run of
//
//	go test -run '^$' -bench . -benchmem -cpu 1,2 -count 1 | tee bench.txt
//	go run ./cmd/benchtable < bench.txt
//
// measures, with the same limit for every limiter:
//
//   - BenchmarkAllow/hot/<limiter>: every request is for one key;
//   - BenchmarkAllow/keys100k/<limiter>: requests for 100,000 keys in a
//     precomputed random order;
//   - BenchmarkMemoryPerKey/<limiter>: the heap a limiter keeps for each of
//     1,000,000 distinct keys (metric B/key, next to key-B, the length of
//     one key);
//   - BenchmarkRedis/{serial,par32}/{hot,keys100k}/<limiter>: Funnel's
//     redisstore (go-redis and rueidis through the script, and go-redis
//     through Funnel's Redis module) against go-redis/redis_rate on one
//     redis-server the benchmark starts with the module loaded, with
//     decisions/s, decisions/call and Redis's CPU per decision
//     (redis-µs/op from INFO commandstats, redis-cpu-µs/op from INFO cpu);
//   - BenchmarkSnapshot/{funnel-1M,all-1.5M}/{write,restore}: a snapshot of
//     the memory store holding 1,000,000 funnel keys (and, in all-1.5M,
//     100,000 keys of each other algorithm) written to a file and fsynced,
//     then restored from it (ms/op, and the file's B/key next to key-B);
//
// and cmd/benchtable turns that output into markdown tables.
//
// The limiters are Funnel's memstore (through Limiter.AllowChecked with a
// limit checked once, and through Limiter.Allow), sethvargo/go-limiter's
// memorystore, throttled's GCRA limiter over its memstore, ulule/limiter's
// memory store, and golang.org/x/time/rate: a single *rate.Limiter for the
// hot key (a reference that keeps no per-key state), and a naive
// map[string]*rate.Limiter behind a sync.Mutex for the keyed runs.
package bench
