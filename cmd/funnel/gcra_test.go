package main

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/funnelrl/funnel/internal/redistest"
)

// rueidis's own GCRA builder (B().Gcra(), as a client of Redis 8.8 sends
// the command), and redis-cli, against `funnel serve`, on the memory store,
// on Redis, and on Redis with leases; on Redis the key is the command's own.
func TestServeGCRARueidis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"Memory", nil},
		{"Redis", []string{"--store", "redis://" + srv.Addr + "/0", "--key-prefix", "r:"}},
		{"RedisLease", []string{"--store", "redis://" + srv.Addr + "/0", "--key-prefix", "l:", "--lease", "200ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startServe(t, tc.flags...)
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.rdb.Options().Addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			// 10 per minute, a burst of 5 more: T = 6 s. The calls take
			// less than a second of the real clock, so the seconds of the
			// replies are exact.
			wants := [][]int64{{0, 6, 5, -1, 6}, {0, 6, 4, -1, 12}, {1, 6, 4, 6, 12}, {0, 6, 0, -1, 36}}
			if tc.name == "RedisLease" {
				// Leased under the variance less the lease's 200 ms (see
				// package leasestore): 5 tokens wait 200 ms more, and the
				// last 4 tokens of the burst no longer fit.
				wants[2], wants[3] = []int64{1, 6, 4, 7, 12}, []int64{1, 6, 4, 1, 12}
			}
			for i, want := range wants {
				b := c.B().Gcra().Key("user123").MaxBurst(5).TokensPerPeriod(10).Period(60)
				var cmd rueidis.Completed
				switch i {
				case 2:
					cmd = b.Count(5).Build()
				case 3:
					cmd = b.Count(4).Build()
				default:
					cmd = b.Build()
				}
				if got, err := c.Do(ctx, cmd).AsIntSlice(); err != nil || !slices.Equal(got, want) {
					t.Fatalf("call %d: %v, %v; want %v\n%s", i, got, err, want, p.log())
				}
			}
			// redis-cli, as a user types it.
			host, port, _ := net.SplitHostPort(p.rdb.Options().Addr)
			out, code := redistest.RunTool(t, "redis-cli", "", time.Minute, nil, "-h", host, "-p", port, "--no-raw", "GCRA", "cli", "0", "1", "60")
			if want := "1) (integer) 0\n2) (integer) 1\n3) (integer) 0\n4) (integer) -1\n5) (integer) 60\n"; out != want || code != 0 {
				t.Fatalf("redis-cli: exit %d\n%s\nwant\n%s", code, out, want)
			}
			if len(tc.flags) == 0 {
				return
			}
			prefix := tc.flags[3]
			v, err := srv.Client().Get(ctx, prefix+"user123").Result()
			tat, perr := strconv.ParseInt(v, 10, 64)
			if err != nil || perr != nil {
				t.Fatalf("the key in Redis: %q, %v", v, err)
			}
			at, err := srv.Client().Do(ctx, "PEXPIRETIME", prefix+"user123").Int64()
			if err != nil || at != tat/1000 {
				t.Fatalf("PEXPIRETIME %d, %v; want the TAT's ms %d", at, err, tat/1000)
			}
		})
	}
}
