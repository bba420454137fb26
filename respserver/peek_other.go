//go:build !unix

package respserver

// inputWaiting reports false: on this platform the server does not look
// into a socket for input that has not been read.
func inputWaiting(fd int) bool { return false }

// peek reports that the socket holds nothing, and has not ended.
func peek(fd int) (waiting, ended bool) { return false, false }

// discard does nothing on this platform.
func discard(fd int) {}
