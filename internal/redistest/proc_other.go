//go:build !linux

package redistest

import "os/exec"

// setDeathSignal does nothing where the kernel cannot kill a child with its
// parent; t.Cleanup still stops every server.
func setDeathSignal(cmd *exec.Cmd) {}
