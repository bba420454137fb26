//go:build unix

package respserver

import "golang.org/x/sys/unix"

// inputWaiting reports whether the socket fd, which is non-blocking, holds
// input that has not been read. A socket whose peer has closed it, or that
// has failed, holds none.
func inputWaiting(fd int) bool {
	var b [1]byte
	for {
		n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}
