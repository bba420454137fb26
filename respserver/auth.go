package respserver

// Credentials is a set of users and their passwords, as Config.Credentials
// takes it. Its methods must be safe for concurrent use. The set of
// Config.Password and Config.Users is the one every listener of the daemon
// uses (internal/auth: SHA-256 digests compared in constant time).
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
