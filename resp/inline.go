package resp

import "bytes"

// isSpace reports whether c is a space for C's isspace in the "C" locale.
func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}

// unhex returns the value of the hexadecimal digit c, and whether c is one.
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// splitArgs splits an inline command line into arguments, appended to args,
// by the rules of Redis's sdssplitargs:
//
//   - Arguments are separated by spaces (C's isspace).
//   - Within double quotes, \n \r \t \b \a and \xHH (two hexadecimal
//     digits) are escapes, and a backslash before any other byte stands for
//     that byte (so \" and \\).
//   - Within single quotes, \' stands for a quote and every other byte for
//     itself.
//   - A quote may open in the middle of an argument (a"b c" is one argument,
//     "ab c"), but a closing quote must be followed by a space or the end of
//     the line.
//   - The line ends at its first NUL byte, since Redis handles it as a C
//     string.
//
// It returns false for an unterminated quote or a closing quote followed by
// something else than a space. It unescapes in place: the arguments are
// slices of line, whose bytes it overwrites.
func splitArgs(line []byte, args [][]byte) ([][]byte, bool) {
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	n := len(line)
	p, w := 0, 0 // read and write positions; w <= p
	for {
		for p < n && isSpace(line[p]) {
			p++
		}
		if p == n {
			return args, true
		}
		start := w
		inq, insq := false, false
		for done := false; !done; {
			switch {
			case inq:
				if p == n {
					return args, false
				}
				c := line[p]
				switch {
				case c == '\\' && p+3 < n && line[p+1] == 'x':
					hi, ok1 := unhex(line[p+2])
					lo, ok2 := unhex(line[p+3])
					if ok1 && ok2 {
						line[w] = hi<<4 | lo
						w++
						p += 3
					} else {
						line[w] = 'x'
						w++
						p++
					}
				case c == '\\' && p+1 < n:
					p++
					switch c = line[p]; c {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'b':
						c = '\b'
					case 'a':
						c = '\a'
					}
					line[w] = c
					w++
				case c == '"':
					if p+1 < n && !isSpace(line[p+1]) {
						return args, false
					}
					done = true
				default:
					line[w] = c
					w++
				}
			case insq:
				if p == n {
					return args, false
				}
				c := line[p]
				switch {
				case c == '\\' && p+1 < n && line[p+1] == '\'':
					p++
					line[w] = '\''
					w++
				case c == '\'':
					if p+1 < n && !isSpace(line[p+1]) {
						return args, false
					}
					done = true
				default:
					line[w] = c
					w++
				}
			default:
				if p == n {
					done = true
					break
				}
				switch c := line[p]; c {
				case ' ', '\n', '\r', '\t':
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					line[w] = c
					w++
				}
			}
			if p < n {
				p++
			}
		}
		args = append(args, line[start:w:w])
	}
}
