package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httplimit"
)

func prefixes(s ...string) []netip.Prefix {
	p := make([]netip.Prefix, len(s))
	for i, v := range s {
		p[i] = netip.MustParsePrefix(v)
	}
	return p
}

// request builds a request from remote with the given header lines.
func request(remote string, headers ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

func TestClientIP(t *testing.T) {
	proxies := prefixes("10.0.0.0/8", "2001:db8:ffff::/48")
	cases := []struct {
		name    string
		key     httplimit.IPKey
		remote  string
		headers []string
		want    string
		ok      bool
	}{
		{"remote v4", httplimit.IPKey{}, "203.0.113.7:4711", nil, "203.0.113.7", true},
		{"remote v6 keyed by /64", httplimit.IPKey{}, "[2001:db8:1:2:3:4:5:6]:80", nil, "2001:db8:1:2::/64", true},
		{"remote v6 full", httplimit.IPKey{IPv6Bits: 128}, "[2001:db8:1:2:3:4:5:6]:80", nil, "2001:db8:1:2:3:4:5:6", true},
		{"remote v4 /24", httplimit.IPKey{IPv4Bits: 24}, "203.0.113.7:1", nil, "203.0.113.0/24", true},
		{"v4-mapped remote", httplimit.IPKey{}, "[::ffff:203.0.113.7]:80", nil, "203.0.113.7", true},
		{"zone dropped", httplimit.IPKey{IPv6Bits: 128}, "[fe80::1%eth0]:80", nil, "fe80::1", true},
		{"no port", httplimit.IPKey{}, "203.0.113.7", nil, "203.0.113.7", true},
		{"unix socket", httplimit.IPKey{}, "@", nil, "", false},
		{"empty remote", httplimit.IPKey{}, "", nil, "", false},

		// Spoofing: headers from an untrusted peer are never read.
		{"XFF from untrusted peer", httplimit.IPKey{}, "203.0.113.7:1", []string{"X-Forwarded-For", "198.51.100.1"}, "203.0.113.7", true},
		{"XFF untrusted, proxies configured", httplimit.IPKey{Trusted: proxies}, "203.0.113.7:1", []string{"X-Forwarded-For", "10.0.0.1"}, "203.0.113.7", true},
		{"Forwarded from untrusted peer", httplimit.IPKey{Trusted: proxies, Header: "Forwarded"}, "203.0.113.7:1", []string{"Forwarded", "for=198.51.100.1"}, "203.0.113.7", true},

		// A trusted proxy reports the client.
		{"one proxy", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1", []string{"X-Forwarded-For", "198.51.100.1"}, "198.51.100.1", true},
		{"client prepends a spoofed address", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1", []string{"X-Forwarded-For", "1.2.3.4, 198.51.100.1"}, "198.51.100.1", true},
		{"client spoofs a trusted address", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1", []string{"X-Forwarded-For", "10.9.9.9, 198.51.100.1"}, "198.51.100.1", true},
		{"two trusted hops", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1", []string{"X-Forwarded-For", "1.2.3.4, 198.51.100.1, 10.0.0.3"}, "198.51.100.1", true},
		{"v6 proxy hop", httplimit.IPKey{Trusted: proxies, IPv6Bits: 128}, "[2001:db8:ffff::1]:1", []string{"X-Forwarded-For", "2001:db8:1::9, 2001:db8:ffff::2"}, "2001:db8:1::9", true},
		{"several header lines", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1", []string{"X-Forwarded-For", "1.2.3.4", "X-Forwarded-For", "198.51.100.1, 10.0.0.7"}, "198.51.100.1", true},
		{"ports in XFF", httplimit.IPKey{Trusted: proxies, IPv6Bits: 128}, "10.0.0.2:1", []string{"X-Forwarded-For", "[2001:db8::1]:4711, 10.0.0.3:80"}, "2001:db8::1", true},
		{"every hop trusted", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1", []string{"X-Forwarded-For", "10.0.0.4, 10.0.0.3"}, "10.0.0.4", true},
		{"trusted proxy without header", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1", nil, "10.0.0.2", true},
		{"garbage stops the walk", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1", []string{"X-Forwarded-For", "198.51.100.1, garbage"}, "10.0.0.2", true},
		{"garbage past the client is not read", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1", []string{"X-Forwarded-For", "garbage, 198.51.100.1"}, "198.51.100.1", true},
		{"empty element stops the walk", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1", []string{"X-Forwarded-For", "198.51.100.1,, 10.0.0.3"}, "10.0.0.3", true},
		{"mapped address in XFF", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1", []string{"X-Forwarded-For", "::ffff:198.51.100.1"}, "198.51.100.1", true},

		// Only the configured header is read.
		{"Forwarded ignored when proxies write XFF", httplimit.IPKey{Trusted: proxies}, "10.0.0.2:1",
			[]string{"Forwarded", "for=1.2.3.4", "X-Forwarded-For", "198.51.100.1"}, "198.51.100.1", true},
		{"XFF ignored when proxies write Forwarded", httplimit.IPKey{Trusted: proxies, Header: "Forwarded"}, "10.0.0.2:1",
			[]string{"X-Forwarded-For", "1.2.3.4", "Forwarded", "for=198.51.100.1"}, "198.51.100.1", true},
		{"X-Real-IP", httplimit.IPKey{Trusted: proxies, Header: "X-Real-IP"}, "10.0.0.2:1",
			[]string{"X-Forwarded-For", "1.2.3.4", "X-Real-IP", "198.51.100.1"}, "198.51.100.1", true},

		// Forwarded (RFC 7239).
		{"Forwarded", httplimit.IPKey{Trusted: proxies, Header: "Forwarded", IPv6Bits: 128}, "10.0.0.2:1",
			[]string{"Forwarded", `for=192.0.2.43, for="[2001:db8:cafe::17]:4711";proto=https;by=10.0.0.2`}, "2001:db8:cafe::17", true},
		{"Forwarded params in any order and case", httplimit.IPKey{Trusted: proxies, Header: "forwarded"}, "10.0.0.2:1",
			[]string{"Forwarded", `proto=http;FOR=198.51.100.1;by=_proxy`}, "198.51.100.1", true},
		{"Forwarded quoted comma", httplimit.IPKey{Trusted: proxies, Header: "Forwarded"}, "10.0.0.2:1",
			[]string{"Forwarded", `for=198.51.100.1;host="a,b", for=10.0.0.3`}, "198.51.100.1", true},
		{"Forwarded unknown stops", httplimit.IPKey{Trusted: proxies, Header: "Forwarded"}, "10.0.0.2:1",
			[]string{"Forwarded", `for=198.51.100.1, for=unknown`}, "10.0.0.2", true},
		{"Forwarded obfuscated stops", httplimit.IPKey{Trusted: proxies, Header: "Forwarded"}, "10.0.0.2:1",
			[]string{"Forwarded", `for=198.51.100.1, for=10.0.0.3, for="_hidden"`}, "10.0.0.2", true},
		{"Forwarded without for", httplimit.IPKey{Trusted: proxies, Header: "Forwarded"}, "10.0.0.2:1",
			[]string{"Forwarded", `proto=https`}, "10.0.0.2", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := c.key.Key(request(c.remote, c.headers...))
			if got != c.want || ok != c.ok {
				t.Errorf("Key = %q, %v; want %q, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestClientIPHelper(t *testing.T) {
	k := httplimit.ClientIP(netip.MustParsePrefix("127.0.0.1/32"))
	got, _ := k(request("127.0.0.1:5", "X-Forwarded-For", "198.51.100.1"))
	if got != "198.51.100.1" {
		t.Errorf("ClientIP behind a trusted proxy: %q", got)
	}
	got, _ = httplimit.ClientIP()(request("127.0.0.1:5", "X-Forwarded-For", "198.51.100.1"))
	if got != "127.0.0.1" {
		t.Errorf("ClientIP trusting nobody: %q", got)
	}
}

func TestHeaderKey(t *testing.T) {
	k := httplimit.Header("x-api-key")
	if got, ok := k(request("1.2.3.4:1", "X-Api-Key", "  abc ")); got != "abc" || !ok {
		t.Errorf("Header: %q, %v", got, ok)
	}
	for _, r := range []*http.Request{request("1.2.3.4:1"), request("1.2.3.4:1", "X-Api-Key", "  ")} {
		if got, ok := k(r); ok {
			t.Errorf("Header without a value: %q, %v", got, ok)
		}
	}
}

type userKey struct{}

func TestFromContext(t *testing.T) {
	k := httplimit.FromContext(func(ctx context.Context) (string, bool) {
		u, ok := ctx.Value(userKey{}).(string)
		return "user:" + u, ok
	})
	r := request("1.2.3.4:1")
	if _, ok := k(r); ok {
		t.Error("FromContext without a user: ok")
	}
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, "42"))
	if got, ok := k(r); got != "user:42" || !ok {
		t.Errorf("FromContext: %q, %v", got, ok)
	}
}

// FuzzClientIP checks, for any RemoteAddr and forwarding headers, that the
// key is an address or prefix; that a peer that is not a trusted proxy is
// keyed by its own address whatever it sends; and that the key is never
// taken from further left than the first untrusted address.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.2:1", "1.2.3.4, 198.51.100.1, 10.0.0.3", `for=192.0.2.43, for="[2001:db8:cafe::17]:4711"`, false)
	f.Add("203.0.113.7:1", "10.0.0.1", "for=10.0.0.1", true)
	f.Add("[::ffff:10.1.2.3]:80", "::ffff:1.2.3.4, [2001:db8::1]:80", `for="\"a,b\"";proto=x, for=unknown`, true)
	f.Add("[fe80::1%eth0]:80", ",,, ,", `for=";,"`, false)
	trusted := prefixes("10.0.0.0/8", "2001:db8:ffff::/48", "::1/128")
	f.Fuzz(func(t *testing.T, remote, xff, fwd string, useForwarded bool) {
		k := httplimit.IPKey{Trusted: trusted, IPv6Bits: 128}
		if useForwarded {
			k.Header = "Forwarded"
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xff)
		r.Header.Set("Forwarded", fwd)

		got, ok := k.Key(r)
		a, err := netip.ParseAddr(got)
		if !ok {
			if got != "" {
				t.Fatalf("not ok with key %q", got)
			}
			return
		}
		if err != nil || a.Zone() != "" || a.Is4In6() {
			t.Fatalf("key %q is not a plain address (%v)", got, err)
		}
		peer, _ := (httplimit.IPKey{IPv6Bits: 128}).Client(request(remote))
		if !peer.IsValid() {
			t.Fatalf("key %q for an unparsable RemoteAddr %q", got, remote)
		}
		trustedPeer := false
		for _, p := range trusted {
			trustedPeer = trustedPeer || p.Contains(peer)
		}
		if !trustedPeer && a != peer {
			t.Fatalf("untrusted peer %v keyed as %v", peer, a)
		}
		if a == peer {
			return
		}
		hdr := xff
		if useForwarded {
			hdr = fwd
		}
		if !containsAddr(hdr, a) {
			t.Fatalf("key %v appears neither as RemoteAddr %q nor in the header %q", a, remote, hdr)
		}
		// A client keyed by an untrusted address cannot change its key by
		// writing more addresses to the left.
		untrusted := true
		for _, p := range trusted {
			untrusted = untrusted && !p.Contains(a)
		}
		if untrusted {
			if useForwarded {
				r.Header.Set("Forwarded", "for=9.9.9.9, "+fwd)
			} else {
				r.Header.Set("X-Forwarded-For", "9.9.9.9, "+xff)
			}
			if again, _ := k.Key(r); again != got {
				t.Fatalf("prepending an address changed the key from %s to %s", got, again)
			}
		}
	})
}

// containsAddr reports whether some token of s parses as a.
func containsAddr(s string, a netip.Addr) bool {
	s = strings.ReplaceAll(s, `\`, "")
	for _, tok := range strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ';' || r == ' ' || r == '"' || r == '=' || r == '[' || r == ']' || r == '\t'
	}) {
		if b, err := netip.ParseAddr(tok); err == nil && b.Unmap().WithZone("") == a {
			return true
		}
		if b, err := netip.ParseAddrPort(tok); err == nil && b.Addr().Unmap().WithZone("") == a {
			return true
		}
	}
	return false
}

// A key of up to funnel.MaxKeyLen bytes is stored as it is, after the
// prefix, as on every edge (the middleware hashed keys over 256 bytes
// before); a longer one is stored under funnel.StoreKey's hash.
func TestKeyBoundIsOneForEveryEdge(t *testing.T) {
	lim := memLimiter(t, newClock())
	srv := serve(t, newMW(t, lim, funnel.PerMinute(1), httplimit.Header("X-Api-Key"), httplimit.Prefix("k:")), okHandler())
	for _, key := range []string{strings.Repeat("m", funnel.MaxKeyLen), strings.Repeat("l", funnel.MaxKeyLen+1)} {
		if r := get(t, srv, "X-Api-Key", key); r.status != 200 {
			t.Fatal(r.status)
		}
		want := "k:" + key
		if len(key) > funnel.MaxKeyLen {
			want = funnel.StoreKey("k:", key)
		}
		if _, ok, err := lim.TTL(context.Background(), want); err != nil || !ok {
			t.Errorf("a key of %d bytes is not stored as %.20q…: %v %v", len(key), want, ok, err)
		}
	}
}
