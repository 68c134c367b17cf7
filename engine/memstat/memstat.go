// Package memstat reads the engine process's own resident memory from
// /proc/self/status, split the way the cold-start work needs it:
// anonymous (the Go heap, the CUDA driver's and the libraries' host
// allocations), file-backed (mapped libraries and weights) and shared.
// The profiler samples other processes' RSS in probe/proc; this is the
// engine's view of itself, for its stage attributes and load log.
package memstat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Resident is a process's resident memory in bytes.
type Resident struct {
	Total int64 // VmRSS
	Anon  int64 // RssAnon
	File  int64 // RssFile
	Shmem int64 // RssShmem
}

// ErrNotReported is wrapped by Parse's error when the status text has no
// VmRSS line (not Linux, or a kernel without the field).
var ErrNotReported = errors.New("resident memory not reported")

// Self reads this process's resident memory.
func Self() (Resident, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return Resident{}, fmt.Errorf("read resident memory: %w", err)
	}
	return Parse(b)
}

// Parse reads the VmRSS, RssAnon, RssFile and RssShmem lines ("VmRSS:
// 453756 kB") of a /proc/PID/status text. Only VmRSS is required (kernels
// before 4.5 lack the split); a line that names a field but holds no
// count in kB is an error.
func Parse(status []byte) (Resident, error) {
	var r Resident
	seen := false
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst, seen = &r.Total, true
		case "RssAnon":
			dst = &r.Anon
		case "RssFile":
			dst = &r.File
		case "RssShmem":
			dst = &r.Shmem
		default:
			continue
		}
		n, ok := strings.CutSuffix(strings.TrimSpace(v), " kB")
		kb, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		if !ok || err != nil || kb < 0 || kb > 1<<40 {
			return Resident{}, fmt.Errorf("%s: %q is not a count of kB", k, strings.TrimSpace(v))
		}
		*dst = kb << 10
	}
	if err := sc.Err(); err != nil {
		return Resident{}, fmt.Errorf("read status: %w", err)
	}
	if !seen {
		return Resident{}, ErrNotReported
	}
	return r, nil
}

// MB is n bytes in megabytes (10⁶ bytes, as the profiler's tables print
// RSS), to 0.1.
func MB(n int64) float64 { return float64(n/100_000) / 10 }

// String renders r for a log line: the total, then its anonymous, file
// and shared parts, in MB.
func (r Resident) String() string {
	return fmt.Sprintf("VmRSS %.1f MB (anonymous %.1f, file %.1f, shared %.1f)", MB(r.Total), MB(r.Anon), MB(r.File), MB(r.Shmem))
}
