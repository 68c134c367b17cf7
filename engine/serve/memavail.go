package serve

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// memAvail is how much memory this process may still take before the
// kernel or its memory cgroup refuses it, and where the figure comes from.
type memAvail struct {
	bytes  int64
	source string
}

// errMemNotReported: neither /proc/meminfo nor a cgroup says how much
// memory is available (not Linux).
var errMemNotReported = errors.New("available memory not reported")

// availableMemory reads MemAvailable of root/proc/meminfo and, where this
// process's memory cgroup (root/proc/self/cgroup, v2 or v1) has a limit,
// what that limit leaves: the limit less the usage, page cache the kernel
// can reclaim (inactive_file) not counted as used, over the cgroup and
// its ancestors. The smaller of the two is the answer. root is "/" but
// for tests.
func availableMemory(root string) (memAvail, error) {
	best := memAvail{bytes: math.MaxInt64}
	if b, err := os.ReadFile(filepath.Join(root, "proc/meminfo")); err == nil {
		if kb, ok := field(b, "MemAvailable:"); ok {
			best = memAvail{bytes: kb << 10, source: "MemAvailable in /proc/meminfo"}
		}
	}
	if cg, ok := cgroupAvailable(root); ok && cg.bytes < best.bytes {
		best = cg
	}
	if best.bytes == math.MaxInt64 {
		return memAvail{}, errMemNotReported
	}
	return best, nil
}

// cgroupAvailable is what this process's memory cgroup, or the tightest of
// its ancestors, leaves below its limit; false when no limit is set or
// none can be read.
func cgroupAvailable(root string) (memAvail, bool) {
	raw, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return memAvail{}, false
	}
	best, found := memAvail{bytes: math.MaxInt64}, false
	consider := func(mount, dir, limitFile, usageFile, inactive string, unlimited func(string) bool) {
		// Walk from the process's cgroup up to the mount: a limit may be
		// set on any ancestor. Inside a cgroup namespace the path is "/"
		// and only the mount itself is read.
		for d := dir; ; d = filepath.Dir(d) {
			lim, err1 := os.ReadFile(filepath.Join(d, limitFile))
			use, err2 := os.ReadFile(filepath.Join(d, usageFile))
			if err1 == nil && err2 == nil && !unlimited(strings.TrimSpace(string(lim))) {
				l, errL := strconv.ParseInt(strings.TrimSpace(string(lim)), 10, 64)
				u, errU := strconv.ParseInt(strings.TrimSpace(string(use)), 10, 64)
				if errL == nil && errU == nil {
					if st, err := os.ReadFile(filepath.Join(d, "memory.stat")); err == nil {
						if ia, ok := field(st, inactive); ok && ia <= u {
							u -= ia
						}
					}
					if left := max(l-u, 0); left < best.bytes {
						best, found = memAvail{bytes: left, source: fmt.Sprintf("the memory cgroup's limit of %s less the %s it uses (%s)",
							gib(l), gib(u), filepath.Join("/", strings.TrimPrefix(d, filepath.Clean(root))))}, true
					}
				}
			}
			if d == mount || !strings.HasPrefix(d, mount+"/") {
				return
			}
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		path := filepath.Clean("/" + parts[2])
		switch {
		case parts[0] == "0" && parts[1] == "":
			mount := filepath.Join(root, "sys/fs/cgroup")
			consider(mount, filepath.Join(mount, path), "memory.max", "memory.current", "inactive_file", func(s string) bool { return s == "max" })
		case hasController(parts[1], "memory"):
			mount := filepath.Join(root, "sys/fs/cgroup/memory")
			dir := filepath.Join(mount, path)
			if _, err := os.Stat(dir); err != nil {
				dir = mount // a namespaced view shows the process's own group at the mount
			}
			// v1 reports "no limit" as a page-rounded 2^63-1.
			consider(mount, dir, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file", func(s string) bool {
				v, err := strconv.ParseInt(s, 10, 64)
				return err == nil && v >= 1<<62
			})
		}
	}
	return best, found
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// field returns the number after key at the start of a line of b
// ("MemAvailable:   24084100 kB" gives 24084100, "inactive_file 5775360"
// gives 5775360).
func field(b []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), key)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		return v, err == nil && v >= 0
	}
	return 0, false
}

func gib(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// touchShare is how much of the available memory --kv-touch-gib may take:
// the rest is left for the engine itself and everything else on the
// machine, which would otherwise be pushed into reclaim or the OOM killer.
const touchShare = 0.9

// checkTouch refuses a --kv-touch-gib the memory available cannot hold,
// in one line saying how much there is and where that figure comes from.
// Where no figure is reported (not Linux) it lets the request through.
func checkTouch(gibs float64, root string) error {
	if gibs <= 0 {
		return nil
	}
	av, err := availableMemory(root)
	if err != nil {
		return nil
	}
	want := int64(gibs * (1 << 30))
	if limit := int64(float64(av.bytes) * touchShare); want > limit {
		return fmt.Errorf("--kv-touch-gib %v: %s is more than %.0f%% of the %s this process can still take (%s); use at most %.1f",
			gibs, gib(want), touchShare*100, gib(av.bytes), av.source, float64(limit)/(1<<30))
	}
	return nil
}
