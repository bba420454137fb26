//go:build !unix

package respserver

// inputWaiting reports false: on this platform the server does not look
// into a socket for input that has not been read.
func inputWaiting(fd int) bool { return false }
