package auth

import (
	"bytes"
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"
)

// Secrets used across the tests; none may appear in a log or a reply.
const (
	defaultPass = "s3cret-default"
	alicePass   = "alice:pass with spaces"
)

func testCreds() *Credentials {
	return New(defaultPass, map[string]string{"alice": alicePass, "bob": "bob-pass"})
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestCheck(t *testing.T) {
	c := testCreds()
	for _, tc := range []struct {
		user, pass string
		want       bool
	}{
		{"", defaultPass, true},
		{DefaultUser, defaultPass, true},
		{"alice", alicePass, true},
		{"bob", "bob-pass", true},
		{"", "wrong", false},
		{"", "", false},
		{"alice", "bob-pass", false},
		{"alice", alicePass + "x", false},
		{"alice", alicePass[:len(alicePass)-1], false},
		{"carol", alicePass, false},
		{"carol", "", false},
	} {
		if got := c.Check(tc.user, tc.pass); got != tc.want {
			t.Errorf("Check(%q, %q) = %v, want %v", tc.user, tc.pass, got, tc.want)
		}
	}
	if !c.Enabled() {
		t.Error("Enabled() = false for a set with users")
	}
}

func TestEmptySet(t *testing.T) {
	for name, c := range map[string]*Credentials{"nil": nil, "New": New("", nil), "empty map": New("", map[string]string{})} {
		if c.Enabled() {
			t.Errorf("%s: Enabled() = true", name)
		}
		if c.Check("", "") || c.Check(DefaultUser, "x") {
			t.Errorf("%s: Check accepted a pair", name)
		}
	}
}

// The default user's password follows the RESP server's rules: Password
// wins over a "default" entry of the users; without it the entry counts;
// without either the default user cannot log in.
func TestDefaultUser(t *testing.T) {
	c := New("top", map[string]string{DefaultUser: "file"})
	if !c.Check("", "top") || c.Check("", "file") {
		t.Error("the password given does not win over the users' default entry")
	}
	c = New("", map[string]string{DefaultUser: "file"})
	if !c.Check(DefaultUser, "file") {
		t.Error("the users' default entry is not the default user's password")
	}
	c = New("", map[string]string{"alice": "a"})
	if c.Check("", "") || c.Check("", "a") {
		t.Error("the default user logged in with no password of its own")
	}
}

// Has knows the users of the set, and the default user only when it has a
// password.
func TestHas(t *testing.T) {
	c := testCreds()
	for name, want := range map[string]bool{DefaultUser: true, "alice": true, "bob": true, "carol": false, "": false, alicePass: false} {
		if got := c.Has(name); got != want {
			t.Errorf("Has(%q) = %v, want %v", name, got, want)
		}
	}
	if New("", map[string]string{"alice": "a"}).Has(DefaultUser) {
		t.Error("Has(default) = true for a default user without a password")
	}
	var none *Credentials
	if none.Has("alice") {
		t.Error("a nil set has a user")
	}
}

// New copies the users: changing the map afterwards changes nothing.
func TestNewCopies(t *testing.T) {
	users := map[string]string{"alice": "a"}
	c := New("", users)
	users["alice"] = "b"
	users["mallory"] = "m"
	if !c.Check("alice", "a") || c.Check("alice", "b") || c.Check("mallory", "m") {
		t.Error("the set follows changes to the map it was built from")
	}
}

func TestParseAuthorization(t *testing.T) {
	for _, tc := range []struct {
		in         string
		user, pass string
		ok         bool
	}{
		{"Bearer tok", "", "tok", true},
		{"bearer tok", "", "tok", true},
		{"BEARER   tok", "", "tok", true},
		{"Bearer a:b", "", "a:b", true}, // a bearer token is a password, colon and all
		{"Bearer ", "", "", false},
		{"Bearer", "", "", false},
		{basic("alice", "p:q"), "alice", "p:q", true},
		{basic("", "p"), "", "p", true},
		{"basic " + base64.StdEncoding.EncodeToString([]byte("u:")), "u", "", true},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("nocolon")), "", "", false},
		{"Basic !!!", "", "", false},
		{"Digest x", "", "", false},
		{"tok", "", "", false},
	} {
		user, pass, ok := parseAuthorization(tc.in)
		if user != tc.user || pass != tc.pass || ok != tc.ok {
			t.Errorf("parseAuthorization(%q) = %q, %q, %v; want %q, %q, %v", tc.in, user, pass, ok, tc.user, tc.pass, tc.ok)
		}
	}
}

func FuzzParseAuthorization(f *testing.F) {
	f.Add("Bearer tok")
	f.Add(basic("alice", "pass"))
	f.Add("Basic ")
	f.Fuzz(func(t *testing.T, v string) {
		user, pass, ok := parseAuthorization(v)
		if !ok && (user != "" || pass != "") {
			t.Fatalf("parseAuthorization(%q) failed but returned %q, %q", v, user, pass)
		}
		// What a Basic value carries comes back out of it.
		if strings.Contains(user, ":") {
			return
		}
		u, p, ok := parseAuthorization(basic(user, pass))
		if !ok || u != user || p != pass {
			t.Fatalf("Basic round trip of %q, %q gave %q, %q, %v", user, pass, u, p, ok)
		}
	})
}

// captureLog returns a logger that writes to the returned buffer.
func captureLog() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

// noSecrets fails the test if s holds any password of testCreds, or one of
// the wrong passwords the tests send.
func noSecrets(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range []string{defaultPass, alicePass, "bob-pass", "wrong-pass", "typed-as-user"} {
		if strings.Contains(s, secret) {
			t.Errorf("%s holds a secret (%q): %s", what, secret, s)
		}
	}
}
