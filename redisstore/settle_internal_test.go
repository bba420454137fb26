package redisstore

import (
	"context"
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
)

// TestSettleMul runs settle.lua's mul in Redis on products of every
// magnitude, those around 2^63 among them, and checks each against
// math/big: the product on two limbs when it is at most 2^63 - 1, false
// beyond.
func TestSettleMul(t *testing.T) {
	t.Parallel()
	src, err := scriptFiles.ReadFile("settle.lua")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	i := strings.Index(body, "  mul = function(")
	j := strings.Index(body[i:], "\n  end\n")
	if i < 0 || j < 0 {
		t.Fatal("no mul in settle.lua")
	}
	script := newScript("local E9 = 1000000000\nlocal mul\n" + body[i:i+j+len("\n  end\n")] + `
local out = {}
for k = 1, #ARGV, 4 do
  local h, l = mul(ARGV[k] + 0, ARGV[k + 1] + 0, ARGV[k + 2] + 0, ARGV[k + 3] + 0)
  if h then
    out[#out + 1] = h
    out[#out + 1] = l
  else
    out[#out + 1] = -1
    out[#out + 1] = -1
  end
end
return out
`)
	srv := redistest.StartServer(t)
	r := rand.New(rand.NewPCG(1, 2))
	logUniform := func() int64 {
		if f := math.Exp(r.Float64() * math.Log(math.MaxInt64)); f < 9e18 {
			return int64(f)
		}
		return math.MaxInt64 - r.Int64N(1e6)
	}
	var pairs [][2]int64
	for range 2000 {
		pairs = append(pairs, [2]int64{logUniform(), logUniform()})
	}
	for range 2000 { // near 2^63: b = MaxInt64/a, give or take one
		a := max(logUniform(), 1)
		if b := math.MaxInt64/a + r.Int64N(3) - 1; b >= 0 {
			pairs = append(pairs, [2]int64{a, b})
		}
	}
	pairs = append(pairs, [2]int64{0, math.MaxInt64}, [2]int64{1, math.MaxInt64}, [2]int64{math.MaxInt64, 1},
		[2]int64{3037000499, 3037000499}, [2]int64{3037000500, 3037000500}, [2]int64{math.MaxInt64, math.MaxInt64},
		[2]int64{1e9, 9223372036}, [2]int64{1e9 - 1, 1e9 + 1}, [2]int64{7, 1317624576693539401}, [2]int64{5e12, 5e12})
	ctx := context.Background()
	max63 := big.NewInt(math.MaxInt64)
	for start := 0; start < len(pairs); start += 500 {
		batch := pairs[start:min(start+500, len(pairs))]
		var args []string
		for _, p := range batch {
			args = append(args, limb(p[0]/1e9), limb(p[0]%1e9), limb(p[1]/1e9), limb(p[1]%1e9))
		}
		v, err := goRedisRunner{srv.Client()}.eval(ctx, script, nil, args)
		if err != nil || len(v) != 2*len(batch) {
			t.Fatalf("mul: %v, %v", v, err)
		}
		for k, p := range batch {
			want := new(big.Int).Mul(big.NewInt(p[0]), big.NewInt(p[1]))
			got := "false"
			if v[2*k] >= 0 {
				got = strconv.FormatInt(v[2*k]*1e9+v[2*k+1], 10)
			}
			if want.Cmp(max63) > 0 {
				if got != "false" {
					t.Errorf("%d × %d = %s, want false (beyond 2^63 - 1)", p[0], p[1], got)
				}
			} else if got != want.String() || v[2*k+1] >= 1e9 {
				t.Errorf("%d × %d = %s (%d, %d), want %s", p[0], p[1], got, v[2*k], v[2*k+1], want)
			}
		}
	}
}

// FuzzDecodeSettle decodes any reply as a settle's: it never panics, and
// a reply it takes is one whose limit decodes and whose numbers are in
// range.
func FuzzDecodeSettle(f *testing.F) {
	limit := []byte(funnel.EncodeLimit(funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Second}))
	reply := func(v ...int64) []byte {
		var b []byte
		for _, n := range v {
			b = binary.AppendVarint(b, n)
		}
		for _, c := range limit {
			b = binary.AppendVarint(b, int64(c))
		}
		return b
	}
	f.Add(reply(1795392000, 5, 1, 0, 0, 1795392000000, 1795392001000, 3, 0, 0, 4, 0, 5))
	f.Add(reply(1795392000, 5, 3, 2, 0, 1795392000000, 1795392001000, 3, 1, 0, 4, 0, 5))
	f.Add(reply(1795392000, 5, -1))
	f.Add(reply(-1, 5, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		var v []int64
		for len(b) > 0 {
			n, k := binary.Varint(b)
			if k <= 0 {
				return
			}
			v, b = append(v, n), b[k:]
		}
		st, err := decodeSettle(v, "k", "id", 7)
		if err != nil {
			return
		}
		if len(v) < 13 || st.Estimate < 0 || st.Actual < 0 || st.Result.Limit <= 0 {
			t.Fatalf("decodeSettle(%v) = %+v", v, st)
		}
	})
}
