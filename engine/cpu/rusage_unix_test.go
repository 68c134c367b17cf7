//go:build unix

package cpu

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) the process has used. On a
// shared machine wall time per step depends on the neighbours; CPU time per
// step mostly does not, so the benchmarks report both.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
