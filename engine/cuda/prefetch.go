package cuda

import (
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ColdPrefetchEnv turns the cold-cache prefetch off ("0") or on ("1", the
// default), so that its gain can be measured on one binary
// (scripts/gpu-upload-sweep.sh with COLD=1).
const ColdPrefetchEnv = "TRENI_CUDA_COLD_PREFETCH"

// coldPrefetch reads the front of the weight files from storage into the
// page cache while the driver initialises, when the page cache is cold.
//
// Why: the staged upload cannot begin before cuda_init ends (its chunks
// are addressed to device memory, and its slots are page-locked by the
// driver), so with a cold page cache the disk sat idle for the ~200 ms of
// cuInit and the cold start was the disk read plus cuInit. The prefetch
// threads read the first chunks in the order the upload's readers will
// take them, as the readers would (one chunk-sized pread at a time, as
// many threads as cold readers), into buffers of their own that are
// thrown away: the bytes stay in the page cache, and the readers then copy
// them at memory speed. Every byte still comes off the disk once. The
// threads stop taking chunks when told (stop: the driver is up); a chunk
// being read then finishes on its own, and a reader that wants it waits
// on the page cache rather than reading it again.
type coldPrefetch struct {
	files []*os.File
	spans []prefetchSpan
	chunk int
	halt  atomic.Bool
	wg    sync.WaitGroup
	bytes atomic.Int64 // read, in whole chunks
	t0    time.Time
	ms    atomic.Int64 // µs from start until stop was asked
}

// startColdPrefetch starts threads readers over files (in planChunks'
// order: by name, each from its start) in reads of chunk bytes. Errors are
// not reported: the prefetch only warms the page cache, and the upload's
// own reads report whatever is wrong with a file (a file that cannot be
// opened is left out; a thread whose read fails stops).
func startColdPrefetch(files []string, threads, chunk int) *coldPrefetch {
	p := newColdPrefetch(files, chunk)
	p.run(threads)
	return p
}

// prefetchSpan is one chunk-sized read of the prefetch.
type prefetchSpan struct {
	f   *os.File
	off int64
	n   int
}

// newColdPrefetch opens files and cuts them into chunk-sized reads.
func newColdPrefetch(files []string, chunk int) *coldPrefetch {
	p := &coldPrefetch{t0: time.Now(), chunk: chunk}
	sorted := append([]string(nil), files...)
	sort.Strings(sorted)
	for _, name := range sorted {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			continue
		}
		p.files = append(p.files, f)
		for off := int64(0); off < fi.Size(); off += int64(chunk) {
			p.spans = append(p.spans, prefetchSpan{f, off, int(min(int64(chunk), fi.Size()-off))})
		}
	}
	return p
}

// run starts the threads; each takes the next span until none is left or
// it is told to stop.
func (p *coldPrefetch) run(threads int) {
	var next atomic.Int64
	for range min(threads, len(p.spans)) {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			// Anonymous memory, not Go heap: a chunk-sized buffer a thread
			// that the garbage collector never scans, returned to the
			// kernel when the thread stops.
			buf, err := unix.Mmap(-1, 0, p.chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				return
			}
			defer unix.Munmap(buf)
			_ = unix.Madvise(buf, unix.MADV_HUGEPAGE) // advisory
			for !p.halt.Load() {
				i := next.Add(1) - 1
				if i >= int64(len(p.spans)) {
					return
				}
				s := p.spans[i]
				if _, err := s.f.ReadAt(buf[:s.n], s.off); err != nil {
					return
				}
				p.bytes.Add(int64(s.n))
			}
		}()
	}
}

// stop tells the threads to take no further chunk, and notes when. It
// does not wait: a read in flight finishes in the background (wait).
func (p *coldPrefetch) stop() {
	if p != nil && p.halt.CompareAndSwap(false, true) {
		p.ms.Store(time.Since(p.t0).Microseconds())
	}
}

// wait stops the threads, waits until they have returned and closes the
// files; it returns the bytes read in all and the time from the start
// until the stop (ms). The owner (Starter.Load) calls it once the upload
// is under way, on every path.
func (p *coldPrefetch) wait() (int64, float64) {
	if p == nil {
		return 0, 0
	}
	p.stop()
	p.wg.Wait()
	for _, f := range p.files {
		f.Close()
	}
	p.files = nil
	return p.bytes.Load(), float64(p.ms.Load()) / 1e3
}
