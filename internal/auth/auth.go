// Package auth checks the one set of credentials that every listener of the
// daemon takes: the password of the default user (Redis's requirepass) and
// named users with their passwords (the users file).
//
// Build a Credentials once with New and hand it to each listener:
//
//   - the RESP server takes it as its Config.Credentials, and checks AUTH
//     and HELLO ... AUTH with Check (and Has, to log only known names);
//   - an HTTP server wraps its handler with Middleware, which reads the
//     Authorization header and answers 401 with a problem (RFC 9457) when
//     the credentials are missing or wrong, except on the exempt paths
//     (HealthPaths);
//   - a gRPC server takes ServerOptions, interceptors that read the
//     "authorization" metadata of each call and answer Unauthenticated,
//     except for the exempt methods (HealthMethods).
//
// Over HTTP and gRPC the credentials take one of two forms:
//
//	Authorization: Bearer <password>              the default user, as AUTH <password>
//	Authorization: Basic base64(<user>:<password>) any user, as AUTH <user> <password>;
//	                                               an empty user is the default user
//
// A bearer token is always the default user's password, never
// "user:password": a password may contain a colon, and a named user has
// Basic for that.
//
// An empty set (no password and no users) turns authentication off: the
// middleware and the interceptors let every request through, and Check
// accepts nothing. Passwords are kept as SHA-256 digests and compared in
// constant time; they are never logged nor sent back, and a user name is
// logged only when it names a user of the set, so that a password typed in
// the user's place is not logged either.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strings"
)

// DefaultUser is the name of the user whose password is the daemon's
// requirepass, as in Redis.
const DefaultUser = "default"

// Credentials is a set of users and their passwords. A Credentials is
// immutable and safe for concurrent use; a nil *Credentials is the empty
// set.
type Credentials struct {
	users map[string][sha256.Size]byte // name → digest of the password
}

// New returns the set made of the default user's password (empty means the
// default user has none of its own) and the named users (name → password).
// As with the RESP server's Config, password, when not empty, is the
// default user's password even if users names DefaultUser too; when it is
// empty, the default user may still be given a password in users. New
// copies users.
func New(password string, users map[string]string) *Credentials {
	c := &Credentials{users: make(map[string][sha256.Size]byte, len(users)+1)}
	for name, p := range users {
		c.users[name] = sha256.Sum256([]byte(p))
	}
	if password != "" {
		c.users[DefaultUser] = sha256.Sum256([]byte(password))
	}
	return c
}

// Enabled reports whether the set holds any user, that is whether clients
// must authenticate.
func (c *Credentials) Enabled() bool { return c != nil && len(c.users) > 0 }

// Check reports whether password is the password of user; an empty user
// means DefaultUser. It takes the same time whatever the password, and
// whether or not the user exists. An empty set accepts nothing: a listener
// asks Enabled first.
func (c *Credentials) Check(user, password string) bool {
	if c == nil {
		return false
	}
	if user == "" {
		user = DefaultUser
	}
	want, ok := c.users[user]
	got := sha256.Sum256([]byte(password))
	// Compare even for an unknown user, so that a miss takes as long as a
	// wrong password.
	eq := subtle.ConstantTimeCompare(got[:], want[:]) == 1
	return ok && eq
}

// Has reports whether name is a user of the set (DefaultUser when it has a
// password). A listener that logs a refused attempt logs the user name it
// was given only when Has says so: what a client sent in its place may be a
// password.
func (c *Credentials) Has(name string) bool {
	if c == nil {
		return false
	}
	_, ok := c.users[name]
	return ok
}

// Errors of authentication, as the middleware and the interceptors report
// them. Their messages hold no credentials.
var (
	// ErrMissing reports a request without credentials.
	ErrMissing = errors.New("auth: credentials are required")
	// ErrMalformed reports credentials that are neither Bearer nor Basic,
	// or a Basic value that is not base64 of "user:password".
	ErrMalformed = errors.New("auth: the credentials are not Bearer or Basic")
	// ErrInvalid reports a user and password that are not in the set.
	ErrInvalid = errors.New("auth: invalid username-password pair")
)

// authenticate checks the value of an Authorization header (or of
// "authorization" metadata) and returns the user it authenticates.
func (c *Credentials) authenticate(value string) (string, error) {
	if value == "" {
		return "", ErrMissing
	}
	user, pass, ok := parseAuthorization(value)
	if !ok {
		return "", ErrMalformed
	}
	if user == "" {
		user = DefaultUser
	}
	if !c.Check(user, pass) {
		return user, ErrInvalid
	}
	return user, nil
}

// parseAuthorization splits a Bearer or Basic credentials value into a user
// ("" for a bearer token) and a password. Scheme names are
// case-insensitive (RFC 9110, section 11.1).
func parseAuthorization(v string) (user, pass string, ok bool) {
	scheme, rest, found := strings.Cut(v, " ")
	if !found {
		return "", "", false
	}
	rest = strings.TrimLeft(rest, " ")
	switch {
	case strings.EqualFold(scheme, "Bearer"):
		return "", rest, rest != ""
	case strings.EqualFold(scheme, "Basic"):
		b, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return "", "", false
		}
		user, pass, ok = strings.Cut(string(b), ":")
		if !ok {
			return "", "", false
		}
		return user, pass, true
	}
	return "", "", false
}

// userKey is the context key of the authenticated user.
type userKey struct{}

// withUser returns ctx carrying the authenticated user.
func withUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// UserFrom returns the user that the middleware or an interceptor
// authenticated for the request of ctx (DefaultUser for a bearer token),
// and false when there is none: authentication is off or the path or
// method is exempt. Its shape fits httplimit.FromContext, to limit each
// user on its own key.
func UserFrom(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(userKey{}).(string)
	return u, ok
}

// loggedUser is the user name a failure may log: the name when it is a
// user of the set, and "" otherwise, as what a client sent in its place
// may be a password.
func (c *Credentials) loggedUser(user string) string {
	if c.Has(user) {
		return user
	}
	return ""
}
