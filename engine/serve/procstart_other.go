//go:build !linux

package serve

import (
	"errors"
	"time"
)

// ProcessStart is only implemented on Linux (/proc/self/stat); elsewhere the
// process_start stage is not reported.
func ProcessStart() (time.Time, error) {
	return time.Time{}, errors.New("process start time needs /proc (Linux)")
}
