//go:build !linux

package respserver

// unacked returns 0: on this platform the server does not ask a socket
// what its peer has acknowledged.
func unacked(fd int) int { return 0 }
