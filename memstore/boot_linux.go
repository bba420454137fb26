package memstore

import (
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// bootID is this boot's identity (/proc/sys/kernel/random/boot_id), read
// once; "" when it cannot be read.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// systemBoot returns this boot's identity and the time since it began on
// CLOCK_BOOTTIME, which counts suspended time and which wall-clock steps
// do not move.
func systemBoot() (string, time.Duration, bool) {
	id := bootID()
	var ts unix.Timespec
	if id == "" || unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return "", 0, false
	}
	return id, time.Duration(ts.Nano()), true
}
