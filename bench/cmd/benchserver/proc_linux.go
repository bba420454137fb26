package main

import "syscall"

// dieWithParent makes a child process get SIGKILL when this one dies, so
// that no server outlives the measurement.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
