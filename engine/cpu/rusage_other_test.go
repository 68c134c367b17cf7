//go:build !unix

package cpu

import "time"

// processCPU is unavailable here; the CPU-time metric then reads 0.
func processCPU() time.Duration { return 0 }
