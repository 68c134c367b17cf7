package serve

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times. The kernel
// fixes it at 100 for user space on every architecture Go supports.
const clockTicks = 100

// ProcessStart returns when this process was exec'd, from the starttime
// field of /proc/self/stat (clock ticks since boot). It converts through
// CLOCK_BOOTTIME rather than /proc/stat's btime, which is rounded to whole
// seconds and would misplace the start by up to a second; the result is
// exact to one tick (10 ms), always at or before the real start.
func ProcessStart() (time.Time, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return time.Time{}, fmt.Errorf("read process start time: %w", err)
	}
	// The command name (field 2) may contain spaces and parentheses; the
	// fields after the last ')' start at field 3.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return time.Time{}, fmt.Errorf("parse /proc/self/stat: no ')' in %q", s)
	}
	f := strings.Fields(s[i+1:])
	const starttimeField = 22 - 3
	if len(f) <= starttimeField {
		return time.Time{}, fmt.Errorf("parse /proc/self/stat: %d fields after the command name", len(f))
	}
	ticks, err := strconv.ParseInt(f[starttimeField], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse /proc/self/stat starttime: %w", err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Time{}, fmt.Errorf("read CLOCK_BOOTTIME: %w", err)
	}
	now := time.Now()
	age := time.Duration(ts.Nano()) - time.Duration(ticks)*(time.Second/clockTicks)
	if age < 0 {
		age = 0
	}
	return now.Add(-age), nil
}
