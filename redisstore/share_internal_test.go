package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
)

// shareRecordSeeds are node records, good and bad, for the decoder's
// fuzzing and for TestShareScriptReadsAsDecoder.
var shareRecordSeeds = []string{
	"-1 1790000000000000",
	"5 1790000000250000 1790000000000000 1790000000210000 1048576 11",
	"0 0 0 0 1 1 1 2 3 4",
	"1073741824 9007199254740991",
	"",
	" ",
	"1",
	"1 2 3",
	"1 2 3 4 5",
	"-2 0",
	"1073741825 0",
	"1 -1",
	"1 2 3 2 1 1",            // a hold before its start
	"1 2 3 4 0 1",            // no rate
	"1 2 3 4 1048577 1",      // over the rate
	"1 2 3 4 1 0",            // no capacity
	"1 9007199254740992",     // 2^53
	"1 9007199254740993",     // read as 2^53 in a double
	"1 99999999999999999999", // beyond int64
	"1 2 3 4 5 6",
	"1  2",
	" 1 2 ",
	"1\t2",
	"1 2\n",
	"0x10 2",
	"1e3 2",
	"1.0 2",
	"+1 2",
	"1 - 2",
	"1- 2",
	"--1 2",
	"-0 2",
	"1 -0",
	"1 2 3 4 5 -0",
	"-",
	"- 1",
	"007 2",
	"1 2 ",
	"1 2  3 4 5 6",
	"nan 2",
	"inf 2",
}

// FuzzDecodeShareNode checks that the decoder of a node's record never
// panics, and that what it accepts it writes back in a form it reads the
// same.
func FuzzDecodeShareNode(f *testing.F) {
	for _, s := range shareRecordSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		nd, err := decodeShareNode(v)
		if err != nil {
			if nd != nil {
				t.Fatalf("%q: a record and an error", v)
			}
			return
		}
		w := encodeShareNode(nd)
		again, err := decodeShareNode(w)
		if err != nil || encodeShareNode(again) != w {
			t.Fatalf("%q decodes to %+v, written %q, which decodes to %+v, %v", v, nd, w, again, err)
		}
		if len(strings.Fields(v)) != 2+4*len(nd.Res) {
			t.Fatalf("%q: %d reservations", v, len(nd.Res))
		}
	})
}

// FuzzDecodeShareState checks that the decoder of a whole hash, as the
// state script answers it, never panics, and reads back what it accepts.
func FuzzDecodeShareState(f *testing.F) {
	f.Add("1:a3:0 0", int64(1))
	f.Add("1:a3:0 01:b19:-1 1 2 3 1048576 1", int64(2))
	f.Add("", int64(0))
	f.Add("", int64(1))
	f.Add("1:a", int64(1))
	f.Add("1:a3:0 0x", int64(1))
	f.Add("-1:a3:0 0", int64(1))
	f.Add("99999999999999999999:a", int64(1))
	f.Add("1:a3:0 0", int64(-1))
	f.Fuzz(func(t *testing.T, blob string, n int64) {
		st, err := decodeShareState(blob, n)
		if err != nil {
			return
		}
		if int64(len(st)) > n {
			t.Fatalf("%q: %d nodes of %d", blob, len(st), n)
		}
		var b strings.Builder
		for name, nd := range st {
			v := encodeShareNode(nd)
			b.WriteString(strconv.Itoa(len(name)) + ":" + name + strconv.Itoa(len(v)) + ":" + v)
		}
		again, err := decodeShareState(b.String(), int64(len(st)))
		if err != nil || len(again) != len(st) {
			t.Fatalf("%q read back as %v, %v", b.String(), again, err)
		}
		for name, nd := range st {
			if encodeShareNode(again[name]) != encodeShareNode(nd) {
				t.Fatalf("node %q read back as %+v, was %+v", name, again[name], nd)
			}
		}
	})
}

// TestEncodeShareNode checks the record's format on one node.
func TestEncodeShareNode(t *testing.T) {
	nd := &gcra.ShareNode{Demand: -1, Seen: 7, Res: []gcra.ShareReservation{{Start: 1, Hold: 2, K: 3, C: 4}, {Start: 5, Hold: 6, K: 7, C: 8}}}
	if got := encodeShareNode(nd); got != "-1 7 1 2 3 4 5 6 7 8" {
		t.Fatalf("%q", got)
	}
}

// TestShareScriptReadsAsDecoder writes each seed record into a shares hash
// and checks that share.lua refuses it (ErrWrongType, nothing changed)
// exactly when decodeShareNode does.
func TestShareScriptReadsAsDecoder(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	st := New(c, Options{Timeout: 10 * time.Second})
	p, err := gcra.NewParams(9, 10, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range shareRecordSeeds {
		key := "k" + strconv.Itoa(i)
		if err := c.HSet(ctx, sharesKey(key), "other", v).Err(); err != nil {
			t.Fatal(err)
		}
		_, derr := decodeShareNode(v)
		_, err := st.Share(ctx, key, p, gcra.ShareRequest{Node: "me", Demand: 5, Lifetime: 200_000})
		if (err != nil) != (derr != nil) || (err != nil && !errors.Is(err, ErrWrongType)) {
			t.Fatalf("record %q: Share %v, decodeShareNode %v", v, err, derr)
		}
		if n, _ := c.HLen(ctx, sharesKey(key)).Result(); err != nil && n != 1 {
			t.Fatalf("record %q: Share refused it but wrote %d fields", v, n)
		}
	}
}
