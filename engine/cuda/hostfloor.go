package cuda

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

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
// against what this host can feed it.

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
	// Every reader's buffer is mapped and touched before the clock starts.
	bufs := make([][]byte, threads)
	defer func() {
		for _, b := range bufs {
			if b != nil {
				unix.Munmap(b)
			}
		}
	}()
	for i := range bufs {
		b, err := unix.Mmap(-1, 0, piece, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return 0, 0, fmt.Errorf("page-cache read floor: map %d bytes: %w", piece, err)
		}
		_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // as the ring does
		for j := 0; j < len(b); j += 4096 {
			b[j] = 0
		}
		bufs[i] = b
	}
	var next, total atomic.Int64
	var firstErr error
	var errOnce sync.Once
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t0 := time.Now()
	deadline := t0.Add(dur)
	for _, buf := range bufs {
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

// readFloor measures PageCacheRead for threads over the file, the H2D
// half with copy (one pinned host→device copy of n bytes, synchronised;
// small, so that the one running when the readers stop ends soon after).
func (p *pageCacheFile) readFloor(threads, n int, dur time.Duration, copy func() error) (PageCacheRead, error) {
	r := PageCacheRead{Threads: threads}
	got, took, err := p.read(threads, dur, nil)
	if err != nil {
		return r, err
	}
	r.GBps = float64(got) / took.Seconds() / 1e9
	var copied int64
	got, took, err = p.read(threads, dur, func(stop <-chan struct{}) error {
		for { // at least one copy, however late this goroutine runs
			if err := copy(); err != nil {
				return err
			}
			copied += int64(n)
			select {
			case <-stop:
				return nil
			default:
			}
		}
	})
	if err != nil {
		return r, err
	}
	r.BesideH2DGBps = float64(got) / took.Seconds() / 1e9
	r.H2DBesideGBps = float64(copied) / took.Seconds() / 1e9
	return r, nil
}
