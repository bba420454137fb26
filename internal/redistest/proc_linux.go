package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the server if the test process dies
// first, so that a crashed test leaves no redis-server behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
