//go:build unix

package daemon

import "syscall"

// maxFiles returns the descriptors the process may open (RLIMIT_NOFILE's
// soft limit, which Go raises to the hard limit at start), or 1<<20 when it
// cannot tell.
func maxFiles() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 1 << 20
	}
	return uint64(r.Cur)
}
