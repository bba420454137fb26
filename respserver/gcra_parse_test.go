package respserver

import (
	"bytes"
	"testing"

	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/gcraref"
)

// FuzzGCRAArgs: GCRA's parser answers every argument list as the model of
// Redis's command (internal/gcraref, its own parsers) does: the same error
// text, or parameters whose decision on a fresh key is the model's reply.
func FuzzGCRAArgs(f *testing.F) {
	for _, seed := range []string{
		"k 5 10 60",
		"k 5 10 60 TOKENS 3",
		"k 5 10 60 tokens 3",
		"k 5 10 60 TOKENS\x00x 3",
		"k 0 1 0.001",
		"k 0 1 +1.5e-3",
		"k 0 1 .5",
		"k 0 1 5.",
		"k 0 1 1e",
		"k 0 1 0x10",
		"k 0 1 1_0",
		"k 0 1 inf",
		"k 0 1 -Infinity",
		"k 0 1 nan",
		"k 0 1 1e400",
		"k 0 1 1e-400",
		"k 0 1 999999999999.9999",
		"k 0 1 1000000000000",
		"k +5 10 60",
		"k 05 10 60",
		"k -0 10 60",
		"k 9223372036854775807 1 999999999999",
		"k 9223372036854775808 1 1",
		"k -9223372036854775808 1 1",
		"k 0 10000000 1",
		"k 5 10 60 FOO 1",
		"k 5 10 60 TOKENS",
		"k 5 10 60 TOKENS 0",
		"k 5 10 60 TOKENS 1 x",
		"k 5 10 60 TOKENS 9223372036854775807",
		"k  5 10 60",
		"k 5 10 ' 60'",
		"k 5 10 60\x00",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fields := bytes.Split(in, []byte(" "))
		if len(fields) < 4 || len(fields) > 8 {
			return // the command table answers these (arity)
		}
		args := append([][]byte{[]byte("GCRA")}, fields...)
		strs := make([]string, len(args))
		for i, a := range args {
			strs[i] = string(a)
		}
		want, wantErr := gcraref.New().Call(1_795_350_508_971, strs...)
		p, msg := parseGCRA(args)
		if msg != "" || wantErr != "" {
			if wantErr == "" || msg != wantErr {
				if wantErr == "" || !gcraDecisionError(p, wantErr) {
					t.Fatalf("%q: parser %q, model %q", in, msg, wantErr)
				}
			}
			return
		}
		_, r, _, err := gcra.DecideCommand(1_795_350_508_971_000, 0, false, p)
		if err != nil || r.Ints() != want {
			t.Fatalf("%q: %+v decides %v %v, the model answers %v", in, p, r.Ints(), err, want)
		}
	})
}

// gcraDecisionError reports whether the model's error wantErr is one that
// the decision gives for p (an overflow), which the parser leaves to it.
func gcraDecisionError(p gcra.CommandParams, wantErr string) bool {
	_, _, _, err := gcra.DecideCommand(1_795_350_508_971_000, 0, false, p)
	return err != nil && gcraErrorPrefix+err.Error() == wantErr
}
