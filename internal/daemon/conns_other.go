//go:build !unix

package daemon

// maxFiles returns the descriptors the process may open: 1<<20 where it
// cannot tell.
func maxFiles() uint64 { return 1 << 20 }
