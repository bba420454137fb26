package httplimit

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
)

// KeyFunc returns the key a request is limited under, and false when the
// request has none (see SkipNoKey for what happens then). A KeyFunc that
// wants keyless requests to share a bucket returns a fixed key for them
// instead.
type KeyFunc func(r *http.Request) (key string, ok bool)

// Header returns a KeyFunc that limits by the value of the request header
// name (the first one, trimmed of spaces), such as an API key. A request
// without the header, or with an empty one, has no key.
//
// A client chooses its headers: limit by a header only if something before
// the middleware has checked it (an API gateway, an authentication
// middleware), or a client sends a new value with each request.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, bool) {
		v := strings.TrimSpace(r.Header.Get(name))
		return v, v != ""
	}
}

// FromContext returns a KeyFunc that limits by what f finds in the request's
// context, such as the user an authentication middleware stored there.
func FromContext(f func(ctx context.Context) (string, bool)) KeyFunc {
	return func(r *http.Request) (string, bool) { return f(r.Context()) }
}

// ClientIP returns a KeyFunc that limits by the client's address: the
// address the connection comes from (Request.RemoteAddr) or, when that is
// one of the trusted proxies, the address they report in X-Forwarded-For.
// It is IPKey{Trusted: trusted}.Key; see IPKey for the details and for
// Forwarded. With no trusted proxies, headers are never read: a client
// cannot choose its key by sending X-Forwarded-For.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	return IPKey{Trusted: trusted}.Key
}

// IPKey finds a request's client address, trusting forwarding headers only
// from trusted proxies. The zero IPKey trusts no proxy and keys by
// RemoteAddr, an IPv6 address by its /64.
//
// The address is walked from the right: RemoteAddr first; if it is a
// trusted proxy, the last address of the header (the one that proxy saw);
// if that is trusted too, the one before; and so on. The first address that
// is not trusted is the client. An address that does not parse ("unknown",
// an obfuscated Forwarded identifier, garbage) stops the walk, and the last
// trusted hop is the key. Addresses a client wrote to the left of the
// first untrusted one are never read.
type IPKey struct {
	// Trusted are the proxies whose forwarding header is believed.
	Trusted []netip.Prefix
	// Header is the forwarding header the trusted proxies write:
	// "X-Forwarded-For" when empty, "Forwarded" (RFC 7239, its for=
	// parameters), or another header holding a comma-separated list of
	// addresses, such as "X-Real-IP". Only this header is read: a client
	// cannot slip a Forwarded header past proxies that write
	// X-Forwarded-For.
	Header string
	// IPv6Bits is the prefix length IPv6 clients are keyed by; 0 means 64,
	// since a single host commonly holds a whole /64. 128 keys each address.
	IPv6Bits int
	// IPv4Bits is the prefix length IPv4 clients are keyed by; 0 means 32.
	IPv4Bits int
}

// Key returns the client's address as the key: "203.0.113.7", or a prefix
// such as "2001:db8:1:2::/64" when the address is masked. It reports false
// only when RemoteAddr is not an IP address (a Unix socket, a test
// request that leaves it empty).
func (k IPKey) Key(r *http.Request) (string, bool) {
	a, ok := k.Client(r)
	if !ok {
		return "", false
	}
	return k.format(a), true
}

// Client returns the client's address, found as Key describes, unmasked.
func (k IPKey) Client(r *http.Request) (netip.Addr, bool) {
	addr, ok := parseAddr(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !k.trusted(addr) {
		return addr, true
	}
	name := k.Header
	if name == "" {
		name = "X-Forwarded-For"
	}
	values := r.Header.Values(name)
	forwarded := strings.EqualFold(name, "Forwarded")
	// Walk the elements of every field line, from the last line's last
	// element back to the first line's first.
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for v != "" {
			var elem string
			v, elem = lastElement(v)
			if forwarded {
				elem = forwardedFor(elem)
			}
			a, ok := parseAddr(elem)
			if !ok {
				return addr, true
			}
			addr = a
			if !k.trusted(addr) {
				return addr, true
			}
		}
	}
	return addr, true
}

// trusted reports whether a is a trusted proxy.
func (k IPKey) trusted(a netip.Addr) bool {
	for _, p := range k.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// format returns the key of address a.
func (k IPKey) format(a netip.Addr) string {
	bits, full := k.IPv4Bits, 32
	if a.Is6() {
		bits, full = k.IPv6Bits, 128
		if bits == 0 {
			bits = 64
		}
	}
	if bits <= 0 || bits >= full {
		return a.String()
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return a.String()
	}
	return p.String()
}

// lastElement splits a comma-separated list into the part before its last
// element and that element (trimmed). Commas inside quoted strings (in
// Forwarded) do not split.
func lastElement(v string) (rest, elem string) {
	inQuote := false
	for i := len(v) - 1; i >= 0; i-- {
		switch v[i] {
		case '"':
			// A quote escaped by a backslash does not toggle; count them.
			n := 0
			for j := i - 1; j >= 0 && v[j] == '\\'; j-- {
				n++
			}
			if n%2 == 0 {
				inQuote = !inQuote
			}
		case ',':
			if !inQuote {
				return v[:i], strings.TrimSpace(v[i+1:])
			}
		}
	}
	return "", strings.TrimSpace(v)
}

// forwardedFor returns the value of the for= parameter of one Forwarded
// element (RFC 7239, section 4), unquoted, or "" when it has none.
func forwardedFor(elem string) string {
	for elem != "" {
		var pair string
		pair, elem, _ = cutUnquoted(elem, ';')
		name, value, ok := strings.Cut(pair, "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "for") {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = strings.ReplaceAll(value[1:len(value)-1], `\`, "")
		}
		return value
	}
	return ""
}

// cutUnquoted is strings.Cut on the first sep outside a quoted string.
func cutUnquoted(s string, sep byte) (before, after string, found bool) {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if inQuote {
				i++
			}
		case '"':
			inQuote = !inQuote
		case sep:
			if !inQuote {
				return s[:i], s[i+1:], true
			}
		}
	}
	return s, "", false
}

// parseAddr parses an address as RemoteAddr and forwarding headers write
// it: "192.0.2.1", "192.0.2.1:4711", "2001:db8::1", "[2001:db8::1]" or
// "[2001:db8::1]:4711". IPv4-mapped IPv6 addresses become IPv4, and zones
// are dropped, so that one client has one key.
func parseAddr(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
				return netip.Addr{}, false
			}
			if a, err = netip.ParseAddr(s[1 : len(s)-1]); err != nil || !a.Is6() {
				return netip.Addr{}, false
			}
		} else {
			a = ap.Addr()
		}
	}
	return a.Unmap().WithZone(""), true
}
