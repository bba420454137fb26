package respserver

import "golang.org/x/sys/unix"

// unacked returns the bytes written to the socket fd that the peer has not
// acknowledged yet (SIOCOUTQ): 0 once its system has taken them all, or
// when the socket cannot tell.
func unacked(fd int) int {
	n, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
	if err != nil {
		return 0
	}
	return n
}
