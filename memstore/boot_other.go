//go:build !linux

package memstore

import "time"

// systemBoot reports no evidence of the boot: restores are bounded by
// Options.RestoreMaxElapsed.
func systemBoot() (string, time.Duration, bool) { return "", 0, false }
