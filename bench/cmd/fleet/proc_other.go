//go:build !linux

package main

import (
	"errors"
	"syscall"
	"time"
)

// dieWithParent is Linux's only; elsewhere the processes are stopped by
// the deferred stops.
func dieWithParent() *syscall.SysProcAttr { return nil }

// cpuTime needs /proc.
func cpuTime(int) (time.Duration, error) {
	return 0, errors.New("the Redis CPU per decision needs Linux's /proc")
}
