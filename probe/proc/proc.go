// Package proc samples the target's process tree through gopsutil: the
// target PID and every descendant, recomputed on each reading so that
// children started later (vLLM's engine core and workers, Ollama's runner)
// are included. It reports the tree's summed RSS, its CPU use, the bytes it
// has read from storage and its process count, and it exposes the PID list
// for the GPU sampler.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shirou/gopsutil/v3/process"

	"github.com/treni-top/treni-top/trace"
)

// Sampler reads one process tree. Create it with New; it is safe to call
// PIDs from another goroutine while Sample runs.
type Sampler struct {
	root   int
	procfs string // "/proc"; a field so tests could point elsewhere

	mu      sync.Mutex
	pids    []int // the tree at the last reading
	sampled bool  // pids is valid

	// State for rates and cumulative totals, owned by the Sample caller.
	prev      map[int]counters
	prevAt    time.Time
	cpuTotal  float64 // CPU seconds of the tree, including exited members
	readTotal float64 // bytes read from storage, including exited members
	ioDenied  bool    // /proc/PID/io unreadable (another user's process)
	scanAll   bool    // no /proc/PID/task/TID/children: scan every process
	walks     int     // tree walks so far, for fullWalkEvery
	extra     map[int]bool
	buf       []byte // reused for /proc reads
	fds       *fdCache
}

// counters are one process's cumulative readings at the previous sample.
type counters struct {
	cpu  float64 // user + system seconds
	read uint64  // bytes read from storage
}

// New returns a sampler for the tree rooted at pid.
// Close the sampler when done with it: it keeps a few /proc files of each
// tree member open between readings.
func New(pid int) *Sampler {
	s := &Sampler{root: pid, procfs: "/proc", prev: map[int]counters{}, fds: newFDCache("/proc")}
	// A safety net for callers that drop a sampler without Close (a target
	// restarted with a new PID): the descriptors go with the sampler.
	runtime.AddCleanup(s, func(c *fdCache) { c.closeAll() }, s.fds)
	return s
}

// Close releases the open /proc files. Sample must not be running; a later
// Sample reopens what it needs.
func (s *Sampler) Close() error {
	s.fds.closeAll()
	return nil
}

// Name is "proc".
func (s *Sampler) Name() string { return "proc" }

// Root is the target's PID.
func (s *Sampler) Root() int { return s.root }

// PIDs is the tree at the last reading, root first then ascending; before
// the first reading it is computed now. It is nil once the root has exited.
// Pass it to gpu.Open so the GPU sampler can attribute device memory.
func (s *Sampler) PIDs() []int {
	s.mu.Lock()
	pids, sampled := slices.Clone(s.pids), s.sampled
	s.mu.Unlock()
	if !sampled {
		pids, _ = Tree(context.Background(), s.root)
	}
	return pids
}

// IOAvailable reports whether bytes read could be read for the whole tree
// at the last reading. /proc/PID/io of another user's process needs
// CAP_SYS_PTRACE; without it read_bytes is left out of the samples.
func (s *Sampler) IOAvailable() bool { return !s.ioDenied }

// Sample reads the tree. Values (trace metric names):
//
//   - procs: processes in the tree (0 once the root has exited; the
//     sampler keeps reporting so graphs show the drop).
//   - rss_bytes: summed resident set size. Pages shared between members
//     (a forked worker's copy-on-write memory, the same mmapped weights)
//     are counted once per process, as top and ps do.
//   - cpu_pct: CPU time of the tree over wall time since the previous
//     reading, in percent of one core (200 = two cores busy), from
//     /proc/PID/stat deltas, not gopsutil's blocking Percent. A process
//     that exits between readings loses its last interval. Absent on the
//     first reading.
//   - read_bytes: cumulative bytes the tree read from storage (the
//     read_bytes of /proc/PID/io: page-cache hits do not count, which is
//     what tells a page-cache-cold load from a warm one). Kept monotonic
//     across exiting members. Absent when /proc/PID/io is unreadable.
func (s *Sampler) Sample(ctx context.Context) ([]trace.Sample, error) {
	now := time.Now()
	pids, err := s.tree(ctx)
	if err != nil && !errors.Is(err, ErrExited) {
		return nil, err
	}
	var rss uint64
	var cpuDelta float64
	denied := false
	cur := make(map[int]counters, len(pids))
	alive := pids[:0:0]
	for _, pid := range pids {
		st, err := s.readStat(pid)
		if err != nil {
			continue // exited between listing and reading
		}
		alive = append(alive, pid)
		rss += st.rss
		c := counters{cpu: st.cpu}
		if rb, err := s.readIO(pid); err == nil {
			c.read = rb
		} else if errors.Is(err, fs.ErrPermission) {
			denied = true
		}
		cur[pid] = c
		old, seen := s.prev[pid]
		switch {
		case seen:
			cpuDelta += max(c.cpu-old.cpu, 0)
			s.readTotal += float64(c.read - min(old.read, c.read))
		case !s.prevAt.IsZero():
			// A member that appeared since the previous reading: all of its
			// CPU and IO happened since then (or in the gap before it was
			// seen), so it all counts.
			cpuDelta += c.cpu
			s.readTotal += float64(c.read)
		default:
			s.readTotal += float64(c.read)
		}
	}
	pids = alive
	s.fds.keep(pids)
	v := map[string]float64{trace.MetricProcs: float64(len(pids))}
	s.ioDenied = denied
	v[trace.MetricRSS] = float64(rss)
	if !s.prevAt.IsZero() {
		if wall := now.Sub(s.prevAt).Seconds(); wall > 0 {
			v[trace.MetricCPU] = 100 * cpuDelta / wall
		}
	}
	s.cpuTotal += cpuDelta
	if !denied {
		v[trace.MetricReadBytes] = s.readTotal
	}
	s.prev, s.prevAt = cur, now
	s.mu.Lock()
	s.pids, s.sampled = pids, true
	s.mu.Unlock()
	return []trace.Sample{{Source: trace.SourceProcess, Values: v}}, nil
}

// CPUSeconds is the tree's CPU time seen so far across readings.
func (s *Sampler) CPUSeconds() float64 { return s.cpuTotal }

// ErrExited means the root process no longer exists.
var ErrExited = errors.New("process has exited")

// fullWalkEvery is how often (in readings) the tree walk reads the
// children file of every thread rather than only each process's main
// thread. A child forked by another thread is listed only in that thread's
// file; reading every thread's file on every reading would cost hundreds of
// reads per sample for a vLLM tree with its many threads. Children found by
// the full walk are remembered, so a child forked by a side thread is seen
// within fullWalkEvery readings (1 s at the default interval) and from then
// on every time.
const fullWalkEvery = 10

// tree lists the root and its descendants.
func (s *Sampler) tree(ctx context.Context) ([]int, error) {
	if !s.scanAll {
		all := s.walks%fullWalkEvery == 0
		s.walks++
		// The root's stat doubles as the existence check, through the
		// cache (no path walk).
		if _, err := s.fds.read(s.root, fileStat, s.buf); err != nil {
			return nil, fmt.Errorf("pid %d: %w", s.root, ErrExited)
		}
		var mainThread func(pid int, buf []byte) ([]byte, error)
		if !all {
			mainThread = func(pid int, buf []byte) ([]byte, error) { return s.fds.read(pid, fileChildren, buf) }
		}
		pids, err := walkChildren(s.procfs, s.root, mainThread, s.extra, &s.buf)
		if !errors.Is(err, errNoChildrenFile) {
			if err == nil && all {
				s.extra = make(map[int]bool, len(pids))
				for _, p := range pids[1:] {
					s.extra[p] = true
				}
			}
			return pids, err
		}
		s.scanAll = true
	}
	return scanTree(ctx, s.root)
}

// Tree lists pid and all its descendants, pid first then ascending. It
// returns an error wrapping ErrExited when pid does not exist.
func Tree(ctx context.Context, pid int) ([]int, error) {
	var buf []byte
	if err := syscall.Access("/proc/"+strconv.Itoa(pid), 0); err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrExited)
	}
	pids, err := walkChildren("/proc", pid, nil, nil, &buf)
	if errors.Is(err, errNoChildrenFile) {
		return scanTree(ctx, pid)
	}
	return pids, err
}

var errNoChildrenFile = errors.New("kernel without /proc/PID/task/TID/children")

// walkChildren walks /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN):
// the cost grows with the tree, not with every process on the host as a
// full /proc scan does. With mainThread nil it reads every thread's file;
// otherwise only each process's main thread's, through mainThread (the
// sampler's descriptor cache). extra are members found earlier that are
// kept while they live (see fullWalkEvery).
func walkChildren(procfs string, root int, mainThread func(pid int, buf []byte) ([]byte, error), extra map[int]bool, buf *[]byte) ([]int, error) {
	seen := map[int]bool{root: true}
	out := []int{root}
	queue := []int{root}
	add := func(c int) {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	first := true
	for len(queue) > 0 || len(extra) > 0 {
		if len(queue) == 0 {
			for p := range extra {
				if syscall.Access(procfs+"/"+strconv.Itoa(p), 0) == nil {
					add(p)
				}
			}
			extra = nil
			continue
		}
		pid := queue[0]
		queue = queue[1:]
		dir := procfs + "/" + strconv.Itoa(pid) + "/task"
		tids := []string{strconv.Itoa(pid)}
		if mainThread == nil {
			names, err := readDirNames(dir)
			if err != nil {
				continue // exited while we walked
			}
			tids = names
		}
		for _, tid := range tids {
			var b []byte
			var err error
			if mainThread != nil {
				b, err = mainThread(pid, *buf)
			} else {
				b, err = readFile(dir+"/"+tid+"/children", *buf)
			}
			if err != nil {
				if first && errors.Is(err, fs.ErrNotExist) && syscall.Access(dir+"/"+tid, 0) == nil {
					return nil, errNoChildrenFile
				}
				continue
			}
			*buf = b[:0]
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					add(c)
				}
			}
		}
		first = false
	}
	slices.Sort(out[1:])
	return out, nil
}

// scanTree builds the tree from every process's parent through gopsutil,
// for kernels without the children files.
func scanTree(ctx context.Context, root int) ([]int, error) {
	all, err := process.PidsWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("list processes (is /proc mounted?): %w", err)
	}
	kids := map[int][]int{}
	found := false
	for _, pid := range all {
		if int(pid) == root {
			found = true
		}
		pp, err := (&process.Process{Pid: pid}).PpidWithContext(ctx)
		if err != nil {
			continue
		}
		kids[int(pp)] = append(kids[int(pp)], int(pid))
	}
	if !found {
		return nil, fmt.Errorf("pid %d: %w", root, ErrExited)
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, kids[out[i]]...)
	}
	slices.Sort(out[1:])
	return out, nil
}

// readDirNames lists a directory's entries without stat'ing them.
func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// readFile reads a small /proc file into buf with three system calls
// (os.ReadFile makes several more, which is most of a reading's cost in a
// VM where each system call is expensive).
func readFile(path string, buf []byte) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(512, cap(buf)))
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// userHZ is the unit of CPU times in /proc/PID/stat. It is 100 on every
// Linux architecture Go supports (USER_HZ is fixed by the ABI, unlike HZ).
const userHZ = 100

// statReading is what a reading needs from /proc/PID/stat.
type statReading struct {
	cpu float64 // utime + stime, seconds
	rss uint64  // bytes
}

// readStat reads CPU times and RSS from /proc/PID/stat in one file (statm
// would be a second).
func (s *Sampler) readStat(pid int) (statReading, error) {
	b, err := s.fds.read(pid, fileStat, s.buf)
	if err != nil {
		return statReading{}, err
	}
	s.buf = b[:0]
	return parseStat(b)
}

// parseStat parses /proc/PID/stat. The command name (field 2) may contain
// spaces and parentheses, so fields are counted from the last ')'.
func parseStat(b []byte) (statReading, error) {
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return statReading{}, fmt.Errorf("malformed /proc stat line %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime 15, rss 24.
	if len(f) < 22 {
		return statReading{}, fmt.Errorf("short /proc stat line %q", b)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	rss, err3 := strconv.ParseInt(f[21], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return statReading{}, fmt.Errorf("malformed /proc stat line: %w", err)
	}
	return statReading{cpu: float64(ut+st) / userHZ, rss: uint64(max(rss, 0)) * uint64(os.Getpagesize())}, nil
}

// readIO returns read_bytes from /proc/PID/io.
func (s *Sampler) readIO(pid int) (uint64, error) {
	b, err := s.fds.read(pid, fileIO, s.buf)
	if err != nil {
		return 0, err
	}
	s.buf = b[:0]
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "read_bytes:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no read_bytes in /proc/%d/io", pid)
}
