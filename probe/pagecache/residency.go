// Package pagecache measures and controls whether model weight files are in
// the page cache: residency by mincore (the evidence that a run is
// page-cache cold; docs/ARCHITECTURE.md, "Measurements"), eviction by posix_fadvise(DONTNEED), the
// system's Cached figure, and discovery of a target's weight files.
package pagecache

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/treni-top/treni-top/trace"
)

// chunk bounds the address space one mincore call maps: a 70 GB checkpoint
// is measured 1 GiB at a time rather than mapped whole.
const chunk = 1 << 30

// FileResidency is one file's residency.
type FileResidency struct {
	Path     string `json:"path"`
	Resident int64  `json:"resident_bytes"`
	Total    int64  `json:"total_bytes"`
}

// Residency returns how many bytes of files are in the page cache, and
// their total size. Files that cannot be opened are an error (the user
// named them, so a typo should not pass as "0 % resident").
func Residency(files []string) (resident, total int64, err error) {
	var vec []byte
	for _, f := range files {
		r, err := fileResidency(f, &vec)
		if err != nil {
			return resident, total, err
		}
		resident += r.Resident
		total += r.Total
	}
	return resident, total, nil
}

// Files returns the residency of each file.
func Files(files []string) ([]FileResidency, error) {
	var vec []byte
	out := make([]FileResidency, 0, len(files))
	for _, f := range files {
		r, err := fileResidency(f, &vec)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// fileResidency measures one file. With cachestat(2) (Linux ≥ 6.5) it is one
// system call; otherwise it maps the file chunk by chunk (PROT_READ, shared, never
// touched, so nothing is faulted in) and asks mincore which pages are
// resident. vec is reused between calls.
func fileResidency(path string, vec *[]byte) (FileResidency, error) {
	return residencyOf(path, vec, true)
}

// residencyOf measures with cachestat when useCachestat and the kernel has
// it, else with mincore.
func residencyOf(path string, vec *[]byte, useCachestat bool) (FileResidency, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return FileResidency{Path: path}, fmt.Errorf("page-cache residency of %s: %w (check the weight file path)", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileResidency{Path: path}, fmt.Errorf("page-cache residency of %s: %w", path, err)
	}
	return residencyFD(fd, st.Size, path, vec, useCachestat)
}

// residencyFD measures an open file of the given size.
func residencyFD(fd int, size int64, path string, vec *[]byte, useCachestat bool) (FileResidency, error) {
	r := FileResidency{Path: path, Total: size}
	page := int64(os.Getpagesize())
	if useCachestat {
		if cached, err := cachestat(fd); err == nil {
			r.Resident = min(cached*page, r.Total)
			return r, nil
		}
	}
	for off := int64(0); off < size; off += chunk {
		n := min(int64(chunk), size-off)
		mem, err := unix.Mmap(fd, off, int(n), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return r, fmt.Errorf("page-cache residency of %s: mmap: %w", path, err)
		}
		pages := int((n + page - 1) / page)
		if cap(*vec) < pages {
			*vec = make([]byte, pages)
		}
		v := (*vec)[:pages]
		err = mincore(mem, v)
		unix.Munmap(mem)
		if err != nil {
			return r, fmt.Errorf("page-cache residency of %s: mincore: %w", path, err)
		}
		var res int64
		for _, b := range v {
			res += int64(b & 1)
		}
		r.Resident += res * page
	}
	// The last page is counted whole; report at most the file's size.
	r.Resident = min(r.Resident, r.Total)
	return r, nil
}

// SysCached returns the host's page cache size (Cached in /proc/meminfo),
// in bytes.
func SysCached() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("read /proc/meminfo for the page cache size: %w", err)
	}
	return parseCached(b)
}

func parseCached(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("Cached:")); ok {
			f := bytes.Fields(v)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse Cached in /proc/meminfo: %w", err)
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("no Cached line in /proc/meminfo")
}

// Sampler reports the residency of a set of weight files
// (trace.SourcePageCache: weights_resident_bytes, weights_total_bytes) on
// every reading, and the host's Cached (trace.SourceSystem:
// sys_cached_bytes) every sysCachedEvery.
type Sampler struct {
	files func() []string
	vec   []byte
	open  *openFiles

	lastCached time.Time
	// Residency is read at every tick while it moves and backs off while
	// it stands still: reading it costs time proportional to the files'
	// size (≈0.3 ms per GB cached with cachestat), and an idle target's
	// weights stay put for hours.
	last       [2]int64 // resident, total of the previous reading
	stillSince int      // consecutive unchanged readings
	backoff    time.Duration
	nextRead   time.Time
}

// Residency back-off: after stillReadings unchanged readings the sampler
// waits backoffStart between readings, doubling up to backoffMax; any
// change returns it to every tick. A change is therefore seen within
// backoffMax at worst, and during a cold start (residency rising) at the
// sampling interval.
const (
	stillReadings = 5
	backoffStart  = 200 * time.Millisecond
	backoffMax    = time.Second
)

// sysCachedEvery is how often the sampler reads the host's Cached.
// /proc/meminfo is costly to generate (every counter of the host is summed:
// about as much CPU as the rest of all samplers together, measured here)
// and Cached is a host-wide figure that only needs to show the trend; the
// residency of the weight files, cheap to read, is what has the full rate.
const sysCachedEvery = 500 * time.Millisecond

// NewSampler returns a sampler for the files that files returns on each
// reading (a func, because a lazy server's files may be known only after
// its first request). files may be nil: then only Cached is reported.
//
// The sampler keeps the weight files open between readings (a /proc-style
// path walk per file per reading is a good part of the cost otherwise);
// Close releases them.
func NewSampler(files func() []string) *Sampler {
	s := &Sampler{files: files, open: &openFiles{fds: map[string]int{}}}
	// A safety net for callers that drop a sampler without Close.
	runtime.AddCleanup(s, func(o *openFiles) { o.closeAll() }, s.open)
	return s
}

// Close releases the open weight files. Sample must not be running.
func (s *Sampler) Close() error {
	s.open.closeAll()
	return nil
}

// openFiles are the sampler's open weight files by path.
type openFiles struct{ fds map[string]int }

func (o *openFiles) closeAll() {
	for p, fd := range o.fds {
		unix.Close(fd)
		delete(o.fds, p)
	}
}

// residency reads one file through its kept descriptor. A file that was
// deleted or replaced (rename over it, as downloads do) has no links left:
// it is reopened by path.
func (s *Sampler) residency(path string) (FileResidency, error) {
	var st unix.Stat_t
	fd, ok := s.open.fds[path]
	if ok {
		if err := unix.Fstat(fd, &st); err != nil || st.Nlink == 0 {
			unix.Close(fd)
			delete(s.open.fds, path)
			ok = false
		}
	}
	if !ok {
		var err error
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return FileResidency{Path: path}, fmt.Errorf("page-cache residency of %s: %w (check the weight file path)", path, err)
		}
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return FileResidency{Path: path}, fmt.Errorf("page-cache residency of %s: %w", path, err)
		}
		s.open.fds[path] = fd
	}
	return residencyFD(fd, st.Size, path, &s.vec, true)
}

// Name is "pagecache".
func (s *Sampler) Name() string { return "pagecache" }

// Sample takes one reading. A weight file that cannot be read is skipped
// in this reading (it may be being downloaded or replaced); the sampler
// fails only when nothing could be read.
func (s *Sampler) Sample(ctx context.Context) ([]trace.Sample, error) {
	var out []trace.Sample
	var firstErr error
	if now := time.Now(); s.files != nil && !now.Before(s.nextRead) {
		var res, tot int64
		n := 0
		files := s.files()
		for p, fd := range s.open.fds {
			if !slices.Contains(files, p) {
				unix.Close(fd)
				delete(s.open.fds, p)
			}
		}
		for _, f := range files {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			r, err := s.residency(f)
			if err != nil {
				firstErr = err
				continue
			}
			n++
			res += r.Resident
			tot += r.Total
		}
		if n > 0 || len(files) == 0 {
			out = append(out, trace.Sample{Source: trace.SourcePageCache, Values: map[string]float64{
				trace.MetricResidentBytes: float64(res),
				trace.MetricWeightBytes:   float64(tot),
			}})
			s.pace(now, res, tot)
		}
	}
	if now := time.Now(); now.Sub(s.lastCached) >= sysCachedEvery {
		if c, err := SysCached(); err == nil {
			s.lastCached = now
			out = append(out, trace.Sample{Source: trace.SourceSystem, Values: map[string]float64{trace.MetricSysCachedBytes: float64(c)}})
		} else if firstErr == nil {
			firstErr = err
		}
	}
	if len(out) == 0 && firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// pace schedules the next residency reading after one at now.
func (s *Sampler) pace(now time.Time, res, tot int64) {
	if [2]int64{res, tot} != s.last {
		s.last, s.stillSince, s.backoff, s.nextRead = [2]int64{res, tot}, 0, 0, time.Time{}
		return
	}
	s.stillSince++
	if s.stillSince < stillReadings {
		return
	}
	switch {
	case s.backoff == 0:
		s.backoff = backoffStart
	case s.backoff < backoffMax:
		s.backoff = min(2*s.backoff, backoffMax)
	}
	s.nextRead = now.Add(s.backoff)
}

// mincore wraps the system call, which golang.org/x/sys/unix does not.
func mincore(mem, vec []byte) error {
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return e
	}
	return nil
}

// sysCachestat is cachestat(2)'s number, the same on every architecture
// (Linux ≥ 6.5 uses the unified table for new calls).
const sysCachestat = 451

// cachestat asks the kernel how many of the file's pages are cached in one
// call (Linux ≥ 6.5). mincore has to look every page up one by one, which
// costs ~4 ms per GiB of file on the reference machine; cachestat only
// walks the pages that are present. On older kernels it fails with ENOSYS
// and the caller falls back to mincore.
func cachestat(fd int) (pages int64, err error) {
	var rng struct{ off, len uint64 } // len 0: to the end of the file
	var cs struct {
		cache, dirty, writeback, evicted, recentlyEvicted uint64
	}
	_, _, e := unix.Syscall6(sysCachestat, uintptr(fd), uintptr(unsafe.Pointer(&rng)), uintptr(unsafe.Pointer(&cs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int64(cs.cache), nil
}
