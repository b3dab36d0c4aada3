//go:build unix

package filterchain_test

import (
	"syscall"
	"time"
)

// processCPUTime returns the CPU time used by the process so far, user and
// system, all threads; ok is false when it is unavailable.
func processCPUTime() (d time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
