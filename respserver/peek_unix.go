//go:build unix

package respserver

import "golang.org/x/sys/unix"

// inputWaiting reports whether the socket fd, which is non-blocking, holds
// input that has not been read. A socket whose peer has closed it, or that
// has failed, holds none.
func inputWaiting(fd int) bool {
	waiting, _ := peek(fd)
	return waiting
}

// peek reports whether the socket fd, which is non-blocking, holds input
// that has not been read (waiting), or will hold no more (ended: its peer
// has closed its side, or it has failed).
func peek(fd int) (waiting, ended bool) {
	var b [1]byte
	for {
		n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false, false
		case err != nil || n == 0:
			return false, true
		}
		return true, false
	}
}

// discard reads and drops what the socket fd, which is non-blocking, holds.
func discard(fd int) {
	var buf [16 << 10]byte
	for {
		n, err := unix.Read(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
	}
}
