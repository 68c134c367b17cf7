package cuda

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The host's half of the staged upload's floor.
//
// The staged upload (upload.go) has reader threads pread the checkpoint
// from the page cache into a page-locked ring while the copy engine reads
// the ring: every byte crosses host memory three times (read from the
// page cache, written to the ring, read by the DMA). How fast the host's
// threads can do the first two, alone and beside a pinned host→device
// copy, bounds the upload as much as the PCIe link does; MeasureFloors
// reports both (PageCacheRead) so that the upload's rate can be read
// against what this host can feed it. It also times the other way in: the
// file's mapping page-locked in place (the mapped upload) and copied by
// the copy engine straight from the page cache, one pass over host
// memory instead of three, alone and beside the readers
// (RegisteredFileCopy): the floor of an upload that sends part of the
// file each way.

// PageCacheRead is how fast Threads threads pread a file resident in the
// page cache into memory of their own, in stagingSlotBytes pieces (the
// staged upload's readers): alone, and beside a loop of pinned host→device
// copies, with that copy's own rate meanwhile.
type PageCacheRead struct {
	Threads       int     `json:"threads"`
	GBps          float64 `json:"gb_per_s"`
	BesideH2DGBps float64 `json:"beside_h2d_gb_per_s"`
	H2DBesideGBps float64 `json:"h2d_beside_reads_gb_per_s"`
}

// pageCacheFile is a file of known bytes written for the read floor; once
// written it is in the page cache.
type pageCacheFile struct {
	f    *os.File
	size int
}

// newPageCacheFile writes size bytes (a pattern, not zeros) to a new file
// in dir, removed on close.
func newPageCacheFile(dir string, size int) (*pageCacheFile, error) {
	f, err := os.CreateTemp(dir, "treni-floor-*")
	if err != nil {
		return nil, fmt.Errorf("page-cache read floor: %w (set TMPDIR to a writable folder on the weights' file system)", err)
	}
	os.Remove(f.Name()) // the open descriptor keeps it until closed
	buf := make([]byte, min(size, stagingSlotBytes))
	for i := range buf {
		buf[i] = byte(i*7 + i>>12)
	}
	for off := 0; off < size; off += len(buf) {
		if _, err := f.WriteAt(buf[:min(len(buf), size-off)], int64(off)); err != nil {
			f.Close()
			return nil, fmt.Errorf("page-cache read floor: write %s: %w", f.Name(), err)
		}
	}
	return &pageCacheFile{f: f, size: size}, nil
}

func (p *pageCacheFile) Close() error { return p.f.Close() }

// read has threads pread the file round robin, each piece into the
// thread's own buffer, until dur has passed (each finishes its piece),
// while beside (may be nil) runs on the caller's goroutine until the
// readers are done (its stop channel closes). It returns the bytes read
// and the time the readers took.
func (p *pageCacheFile) read(threads int, dur time.Duration, beside func(stop <-chan struct{}) error) (int64, time.Duration, error) {
	if threads < 1 || p.size <= 0 {
		return 0, 0, fmt.Errorf("page-cache read floor: %d threads over %d bytes", threads, p.size)
	}
	piece := min(stagingSlotBytes, p.size)
	pieces := (p.size + piece - 1) / piece
	// Every reader's buffer, a slot of a staging ring like the upload's,
	// is mapped and faulted in before the clock starts.
	ring, err := newStagingRing(threads, piece)
	if err != nil {
		return 0, 0, fmt.Errorf("page-cache read floor: %w", err)
	}
	defer ring.unmap()
	var next, total atomic.Int64
	var firstErr error
	var errOnce sync.Once
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t0 := time.Now()
	deadline := t0.Add(dur)
	for i := range ring.slots() {
		buf := ring.slot(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each reader reads a piece before it looks at the clock.
			for {
				off := int((next.Add(1)-1)%int64(pieces)) * piece
				n, err := p.f.ReadAt(buf[:min(piece, p.size-off)], int64(off))
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("page-cache read floor: %w", err) })
					return
				}
				total.Add(int64(n))
				if time.Now().After(deadline) {
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	var end time.Time
	go func() { wg.Wait(); end = time.Now(); close(done) }()
	var besideErr error
	if beside != nil {
		go func() { <-done; close(stop) }()
		besideErr = beside(stop)
	}
	<-done
	return total.Load(), end.Sub(t0), errors.Join(firstErr, besideErr)
}

// untilStopped is a read's beside function that runs f until the readers
// stop, and at least once however late its goroutine runs.
func untilStopped(f func() error) func(stop <-chan struct{}) error {
	return func(stop <-chan struct{}) error {
		for {
			if err := f(); err != nil {
				return err
			}
			select {
			case <-stop:
				return nil
			default:
			}
		}
	}
}

// readFloor measures PageCacheRead for threads over the file, the H2D
// half with copy (one pinned host→device copy of n bytes, synchronised;
// small, so that the one running when the readers stop ends soon after).
func (p *pageCacheFile) readFloor(threads, n int, dur time.Duration, copy func() error) (PageCacheRead, error) {
	r := PageCacheRead{Threads: threads}
	got, took, err := p.read(threads, dur, nil)
	if err != nil {
		return r, err
	}
	r.GBps = gbPerS(got, took)
	var copied int64
	got, took, err = p.read(threads, dur, untilStopped(func() error {
		copied += int64(n)
		return copy()
	}))
	if err != nil {
		return r, err
	}
	r.BesideH2DGBps = gbPerS(got, took)
	r.H2DBesideGBps = gbPerS(copied, took)
	return r, nil
}

// RegisteredFileCopy is the copy engine reading a file's page-cache pages
// in place: the resident file mapped read-only and cuMemHostRegister'd
// (RegisterMS for its bytes), then host→device copies of slot-sized pieces
// from the mapping, alone and beside Threads page-cache readers, with the
// readers' rate meanwhile.
type RegisteredFileCopy struct {
	Bytes      int     `json:"bytes"`
	RegisterMS float64 `json:"register_ms"`
	// PopulateMS is building the page-table entries of a fresh mapping of
	// the file first (populate, on populateThreads threads), and
	// RegisterPopulatedMS registering it then: how much of RegisterMS is
	// the kernel faulting the pages in, which threads could do ahead.
	PopulateMS          float64 `json:"populate_ms"`
	RegisterPopulatedMS float64 `json:"register_populated_ms"`
	GBps                float64 `json:"gb_per_s"`
	Threads             int     `json:"threads"`
	BesideReadGBps      float64 `json:"beside_reads_gb_per_s"`
	ReadsBesideGBps     float64 `json:"reads_beside_gb_per_s"`
}

// registeredCopyFloor measures RegisteredFileCopy over the file with
// threads readers: register page-locks the mapping (read-only) and
// unregister undoes it; copyFrom copies n bytes at host address src to the
// device and waits for it.
func (p *pageCacheFile) registeredCopyFloor(register func(src unsafe.Pointer, n int) error, unregister func(src unsafe.Pointer) error,
	threads int, dur time.Duration, copyFrom func(src unsafe.Pointer, n int) error) (RegisteredFileCopy, error) {
	r := RegisteredFileCopy{Bytes: p.size, Threads: threads}
	if err := p.registerPopulated(register, unregister, &r); err != nil {
		return r, err
	}
	m, err := unix.Mmap(int(p.f.Fd()), 0, p.size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return r, fmt.Errorf("registered page-cache floor: map the file: %w", err)
	}
	defer unix.Munmap(m)
	t0 := time.Now()
	if err := register(unsafe.Pointer(&m[0]), len(m)); err != nil {
		return r, fmt.Errorf("registered page-cache floor: %w", err)
	}
	r.RegisterMS = msSince(t0)
	defer unregister(unsafe.Pointer(&m[0]))
	piece := min(stagingSlotBytes, p.size)
	pieces := (p.size + piece - 1) / piece
	var copied int64
	k := 0
	copyNext := func() error {
		off := (k % pieces) * piece
		k++
		n := min(piece, p.size-off)
		copied += int64(n)
		return copyFrom(unsafe.Pointer(&m[off]), n)
	}
	t0 = time.Now()
	for { // at least one copy
		if err := copyNext(); err != nil {
			return r, err
		}
		if time.Since(t0) >= dur {
			break
		}
	}
	r.GBps = gbPerS(copied, time.Since(t0))
	copied = 0
	got, took, err := p.read(threads, dur, untilStopped(copyNext))
	if err != nil {
		return r, err
	}
	r.BesideReadGBps = gbPerS(copied, took)
	r.ReadsBesideGBps = gbPerS(got, took)
	return r, nil
}

// populateThreads is how many threads populate a mapping for the floor.
const populateThreads = 4

// registerPopulated maps the file afresh, populates the mapping and
// registers it, timing the two (PopulateMS, RegisterPopulatedMS).
func (p *pageCacheFile) registerPopulated(register func(src unsafe.Pointer, n int) error, unregister func(src unsafe.Pointer) error, r *RegisteredFileCopy) error {
	m, err := unix.Mmap(int(p.f.Fd()), 0, p.size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("registered page-cache floor: map the file: %w", err)
	}
	defer unix.Munmap(m)
	t0 := time.Now()
	populate(m, populateThreads)
	r.PopulateMS = msSince(t0)
	t0 = time.Now()
	if err := register(unsafe.Pointer(&m[0]), len(m)); err != nil {
		return fmt.Errorf("registered page-cache floor: %w", err)
	}
	r.RegisterPopulatedMS = msSince(t0)
	return unregister(unsafe.Pointer(&m[0]))
}

// populate builds the page-table entries of a read-only mapping on
// threads threads (MADV_POPULATE_READ; where the kernel lacks it, a read
// of one byte a page does the same).
func populate(m []byte, threads int) {
	page := os.Getpagesize()
	part := (len(m)/max(1, threads) + page - 1) &^ (page - 1)
	var wg sync.WaitGroup
	for lo := 0; lo < len(m); lo += part {
		b := m[lo:min(len(m), lo+part)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if unix.Madvise(b, unix.MADV_POPULATE_READ) == nil {
				return
			}
			var sink byte
			for i := 0; i < len(b); i += page {
				sink += b[i]
			}
			_ = sink
		}()
	}
	wg.Wait()
}
