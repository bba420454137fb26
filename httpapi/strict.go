package httpapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// checkOneMeaning returns an error for a JSON value that encoding/json would
// decode, but that means two things, one of them silently dropped:
//   - a name that comes twice in one object, exactly or up to case:
//     encoding/json matches names to fields case-insensitively and keeps the
//     last, so that {"key":"a","Key":"b"} is decided on "b" while a proxy
//     that reads the first "key" sees "a";
//   - a string that is not valid UTF-8, or that escapes half of a surrogate
//     pair: encoding/json replaces either with U+FFFD, so that "u\xff",
//     "u\xfe" and "u\ufffd" would be one key.
//
// data must be one JSON value that encoding/json has decoded (its syntax is
// then valid, and every object's names are fields of a struct, so that an
// object has few distinct names: they are compared pairwise).
func checkOneMeaning(data []byte) error {
	c := meaningChecker{data: data}
	c.value()
	return c.err
}

// meaningChecker walks a valid JSON text; err is the first problem found.
type meaningChecker struct {
	data []byte
	i    int
	err  error
}

func (c *meaningChecker) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{errBadJSON}, args...)...)
	}
}

func (c *meaningChecker) space() {
	for c.i < len(c.data) {
		switch c.data[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

// value walks one value and what follows it up to the next token.
func (c *meaningChecker) value() {
	c.space()
	if c.err != nil || c.i >= len(c.data) {
		return
	}
	switch c.data[c.i] {
	case '{':
		c.i++
		var names []string
		for c.space(); c.err == nil && c.i < len(c.data) && c.data[c.i] != '}'; c.space() {
			if c.data[c.i] == ',' {
				c.i++
				continue
			}
			name := c.str()
			for _, seen := range names {
				if strings.EqualFold(seen, name) {
					if seen == name {
						c.fail("the field %q comes twice in one object", name)
					} else {
						c.fail("the fields %q and %q differ only in case (names are matched whatever their case)", seen, name)
					}
					return
				}
			}
			names = append(names, name)
			c.space()
			c.i++ // ':'
			c.value()
		}
		c.i++
	case '[':
		c.i++
		for c.space(); c.err == nil && c.i < len(c.data) && c.data[c.i] != ']'; c.space() {
			if c.data[c.i] == ',' {
				c.i++
				continue
			}
			c.value()
		}
		c.i++
	case '"':
		c.str()
	default:
		// A number, true, false or null.
		for c.i < len(c.data) && !strings.ContainsRune(",]} \t\n\r", rune(c.data[c.i])) {
			c.i++
		}
	}
}

// str walks a string at c.i, checks it and returns it unescaped.
func (c *meaningChecker) str() string {
	start := c.i
	c.i++ // '"'
	escaped := false
	for c.i < len(c.data) {
		b := c.data[c.i]
		switch {
		case b == '"':
			c.i++
			raw := c.data[start:c.i]
			if !escaped {
				return string(raw[1 : len(raw)-1])
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				c.fail("%v", err)
			}
			return s
		case b == '\\':
			escaped = true
			if c.data[c.i+1] != 'u' {
				c.i += 2
				continue
			}
			r := hex4(c.data[c.i+2 : c.i+6])
			c.i += 6
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				c.fail("a string holds the second half of a surrogate pair alone (\\u%04x)", r)
				return ""
			case r >= 0xd800 && r <= 0xdbff:
				if c.i+6 > len(c.data) || c.data[c.i] != '\\' || c.data[c.i+1] != 'u' {
					c.fail("a string holds the first half of a surrogate pair alone (\\u%04x)", r)
					return ""
				}
				if low := hex4(c.data[c.i+2 : c.i+6]); low < 0xdc00 || low > 0xdfff {
					c.fail("a string holds the first half of a surrogate pair alone (\\u%04x)", r)
					return ""
				}
				c.i += 6
			}
		case b < utf8.RuneSelf:
			c.i++
		default:
			r, n := utf8.DecodeRune(c.data[c.i:])
			if r == utf8.RuneError && n == 1 {
				c.fail("a string is not valid UTF-8 (byte %d)", c.i)
				return ""
			}
			c.i += n
		}
	}
	return ""
}

// hex4 decodes four hexadecimal digits (valid: the text has been decoded).
func hex4(b []byte) rune {
	var r rune
	for _, h := range b {
		r <<= 4
		switch {
		case h >= '0' && h <= '9':
			r |= rune(h - '0')
		case h >= 'a' && h <= 'f':
			r |= rune(h - 'a' + 10)
		case h >= 'A' && h <= 'F':
			r |= rune(h - 'A' + 10)
		}
	}
	return r
}
