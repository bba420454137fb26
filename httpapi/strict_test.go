package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzOneMeaning runs checkOneMeaning on every JSON text that encoding/json
// decodes: it never panics, and what it passes is valid UTF-8 with no
// object that holds a name twice up to case.
func FuzzOneMeaning(f *testing.F) {
	for _, seed := range []string{
		`{"key":"a","Key":"b"}`, `{"a":{"b":1,"B":2}}`, `[{"x":"\ud800\udc00"},"\udc00"]`, "\"\xff\"",
		`{"k\u0065y":1,"key":2}`, `{"s":"\\\"\/\b\f\n\r\t"}`, ` [ 1 , -2.5e3 , true , null , { } , [ ] ] `,
		"{\"\u212a\":1,\"k\":2}", `"\ud83d\ude00"`, `"\ud83dx"`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v any
		if json.Unmarshal([]byte(s), &v) != nil {
			return
		}
		err := checkOneMeaning([]byte(s))
		if err != nil {
			return
		}
		if !utf8.ValidString(s) {
			t.Fatalf("%q: passed, not UTF-8", s)
		}
		if strings.Contains(s, `\ud`) || strings.Contains(s, `\uD`) {
			return // escapes are checked by the cases of TestBadInput
		}
		if strings.Contains(s, "\ufffd") {
			return
		}
		// With no replacement possible, what decodes as text equals it.
		var walk func(any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				names := []string{}
				for k, e := range v {
					for _, n := range names {
						if strings.EqualFold(n, k) {
							t.Fatalf("%q: passed with %q and %q", s, n, k)
						}
					}
					names = append(names, k)
					walk(e)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			}
		}
		walk(v)
	})
}
