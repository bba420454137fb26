package server

import (
	"crypto/sha256"
	"crypto/subtle"
)

// Credentials is a set of users and their passwords, as Config.Credentials
// takes it. Its methods must be safe for concurrent use.
type Credentials interface {
	// Enabled reports whether clients must authenticate.
	Enabled() bool
	// Check reports whether password is the password of user ("default"
	// for AUTH <password>), in a time that tells nothing of either.
	Check(user, password string) bool
	// Has reports whether user is a user of the set: a refused name is
	// logged only then, as what a client sent in its place may be a
	// password.
	Has(user string) bool
}

// passwords is the Credentials of Config.Password and Config.Users: the
// SHA-256 digest of each user's password, compared in constant time, so
// that neither the length of a password nor whether a user exists shows in
// the time a check takes.
type passwords map[string][sha256.Size]byte

// newPasswords returns the set of Config.Password (the default user's,
// over a "default" entry of users) and Config.Users.
func newPasswords(password string, users map[string]string) passwords {
	p := make(passwords, len(users)+1)
	for name, pw := range users {
		p[name] = sha256.Sum256([]byte(pw))
	}
	if password != "" {
		p["default"] = sha256.Sum256([]byte(password))
	}
	return p
}

func (p passwords) Enabled() bool { return len(p) > 0 }

func (p passwords) Has(user string) bool {
	_, ok := p[user]
	return ok
}

func (p passwords) Check(user, password string) bool {
	want, ok := p[user]
	got := sha256.Sum256([]byte(password))
	eq := subtle.ConstantTimeCompare(got[:], want[:]) == 1
	return ok && eq
}
