//go:build !linux

package main

import "syscall"

// dieWithParent is Linux's only; elsewhere the servers are stopped by the
// deferred stops and the signal handler.
func dieWithParent() *syscall.SysProcAttr { return nil }
