package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The staged upload's second path: in-place copiers.
//
// The staged readers move every byte through host memory three times
// (read from the page cache, written into the ring, read by the copy
// engine), and on the lent H100 host that, not the PCIe link, is the
// upload's ceiling: with the readers and a pinned copy both running, each
// gets ~44 GB/s (doctor --floors, PageCacheRead). A byte the copy engine
// reads straight from its page-cache page crosses host memory once: the
// weight file mapped read-only and page-locked in place (cuMemHostRegister)
// feeds the copy engine at ~53 GB/s alone and 45–47 GB/s beside the
// readers, for ~30 ms of registration a GiB (RegisteredFileCopy).
//
// With UploadInPlaceEnv set, the upload runs both: the readers take read
// chunks from the front of one queue (chunkQueue) while in-place copiers,
// each on a thread of its own, take them from the back, register the
// chunks' pages and enqueue their copies on a stream of their own.
// Whichever path is faster on this host takes more chunks; the two meet
// where the last one is taken. Nothing is unregistered until the upload
// is over, and then only in background steps that wait for the server to
// pause, or under steady load for a deadline (releaseInPlaceStep,
// inPlaceWait): unregistering ~6 GB costs ~55 ms idle and
// stalled a server under load 120–200 ms when done in one item;
// unregistering each unit as soon as it was copied took the 8 GB upload
// from 41 to 28 GB/s, and unregistering on the copiers' threads right
// after the upload cost the first request 47 ms: the driver's work for it
// ran beside the upload or the request's launches (docs/BENCHMARKS.md).
//
// Chunks start on page boundaries (planChunks' align), so the ranges two
// copiers register never share a page: the driver refuses a range that
// overlaps one already registered. If it refuses one anyway (an old
// driver, a locked-memory limit), that chunk is copied from pageable
// memory, correct but slower, and the stage says how many were.

// chunkQueue hands out the indices 0..n-1 once each: the staged copy loop
// takes them from the front, the in-place copiers from the back. close
// ends it early (an error elsewhere), so that every taker stops.
//
// The back end can be held until the readers' ring is page-locked
// (newChunkQueue's holdBack, then openBack): the driver serialises
// registrations, and on the lent H100 host copiers registering beside the
// copy loop's first slot registrations tripled the slots' registration
// time (14 → 39 ms over a 0.6B-shaped upload), starving the readers of
// slots.
type chunkQueue struct {
	mu          sync.Mutex
	front, back int           // the next index each end hands out; empty once front > back
	backOpen    chan struct{} // closed once the back end hands out indices
	openOnce    sync.Once
}

// newChunkQueue hands out 0..n-1; with holdBack its back end waits for
// openBack.
func newChunkQueue(n int, holdBack bool) *chunkQueue {
	q := &chunkQueue{back: n - 1, backOpen: make(chan struct{})}
	if !holdBack {
		q.openBack()
	}
	return q
}

// openBack lets the back end hand out indices; later calls do nothing.
func (q *chunkQueue) openBack() { q.openOnce.Do(func() { close(q.backOpen) }) }

// takeFront returns the lowest index not yet taken.
func (q *chunkQueue) takeFront() (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.front > q.back {
		return 0, false
	}
	q.front++
	return q.front - 1, true
}

// takeBackN returns the highest n indices not yet taken (fewer where fewer
// are left), as lo..hi.
func (q *chunkQueue) takeBackN(n int) (lo, hi int, ok bool) {
	<-q.backOpen
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.front > q.back {
		return 0, 0, false
	}
	hi = q.back
	lo = max(q.front, hi-n+1)
	q.back = lo - 1
	return lo, hi, true
}

// close hands nothing out any more.
func (q *chunkQueue) close() {
	q.mu.Lock()
	q.front, q.back = 1, 0
	q.mu.Unlock()
	q.openBack()
}

// fileMaps are the weight files mapped read-only for the in-place copiers:
// a mapping of their own, not the checkpoint's, so that it lives exactly
// as long as the registrations in it (the checkpoint may be closed once
// the backend is built). Each mapping covers whole pages.
type fileMaps map[string][]byte

// mapFiles maps every file the chunks read.
func mapFiles(chunks []readChunk) (fileMaps, error) {
	m := fileMaps{}
	if err := m.ensure(chunks); err != nil {
		return nil, err
	}
	return m, nil
}

// ensure maps every file the chunks read that m does not map yet; on
// error m is unmapped.
func (m fileMaps) ensure(chunks []readChunk) error {
	page := os.Getpagesize()
	for _, c := range chunks {
		if _, ok := m[c.file]; ok {
			continue
		}
		f, err := os.Open(c.file)
		if err != nil {
			m.unmap()
			return fmt.Errorf("open weight file for the in-place upload: %w", err)
		}
		fi, err := f.Stat()
		if err == nil && fi.Size() == 0 {
			err = errors.New("empty file")
		}
		var b []byte
		if err == nil {
			// The mapping's last page may run past the end of the file;
			// its tail reads as zeros and nothing copies it.
			n := (int(fi.Size()) + page - 1) &^ (page - 1)
			b, err = unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
		}
		f.Close() // the mapping keeps the file
		if err != nil {
			m.unmap()
			return fmt.Errorf("map %s for the in-place upload: %w", c.file, err)
		}
		m[c.file] = b
	}
	return nil
}

func (m fileMaps) unmap() error {
	var errs []error
	for f, b := range m {
		if err := unix.Munmap(b); err != nil {
			errs = append(errs, fmt.Errorf("unmap %s: %w", f, err))
		}
		delete(m, f)
	}
	return errors.Join(errs...)
}

// region is the page-aligned range of the file's mapping that chunks
// first..last (consecutive, of one file) register: from the first's start
// (page-aligned by planChunks) to the page boundary after the last's last
// byte.
func (m fileMaps) region(first, last readChunk) ([]byte, error) {
	b, ok := m[first.file]
	page := int64(os.Getpagesize())
	end := (last.off + int64(last.n) + page - 1) &^ (page - 1)
	if !ok || last.file != first.file || first.off%page != 0 || first.off < 0 || end > int64(len(b)) || end <= first.off {
		return nil, fmt.Errorf("in-place upload: chunks [%d, %d+%d) of %s are not page-aligned inside its %d-byte mapping (internal error)",
			first.off, last.off, last.n, first.file, len(b))
	}
	return b[first.off:end], nil
}

// inPlaceEngine is what an in-place copier needs from the device: register
// page-locks a range of a file's mapping in place (read-only), copy
// enqueues a copy from it on the copier's stream, fence marks the copies
// so far with mark k (of depth), and wait waits for mark k's copies. The
// CUDA implementation is cudaInPlace; tests use one that performs copies
// only when their mark is waited for, and that refuses overlapping
// registrations as the driver does.
type inPlaceEngine interface {
	register(b []byte) error
	copy(dst DevicePtr, src []byte) error
	fence(k int) error
	wait(k int) error
}

// inPlaceDepth is how many units a copier keeps in flight: enough that
// registering the next one overlaps the copies of the last, few enough
// that a copier takes chunks at the rate the copy engine drains them
// rather than at the rate it can register them, so the two paths split
// the upload by what each actually delivers.
const inPlaceDepth = 3

// A copier takes its chunks a unit at a time (defaultInPlaceUnitMB of
// consecutive ones) and registers each run of them that lies together in
// one file with one call: the driver serialises registrations. On the
// lent H100 host one copier registering 16 MiB at a time spent 38 ms a
// GiB, two spent ~85 ms a GiB between them, and one call for 1 GiB takes
// 25–30 ms (docs/BENCHMARKS.md, doctor --floors).
const defaultInPlaceUnitMB = 64

// UploadInPlaceUnitEnv overrides the in-place copiers' unit (MiB, a
// multiple of the ring's slot, the chunk size), for benchmarks.
const UploadInPlaceUnitEnv = "TRENI_CUDA_UPLOAD_INPLACE_MB"

// inPlaceStats is what one or more in-place copiers did.
type inPlaceStats struct {
	chunks   int
	bytes    int64
	regions  int           // register calls
	register time.Duration // inside register calls
	pageable int           // registrations refused
	wait     time.Duration // blocked on a mark: the copy engine was the limit
	refused  string        // why no copier ran, when one should have
}

func (s *inPlaceStats) add(o inPlaceStats) {
	s.chunks += o.chunks
	s.bytes += o.bytes
	s.regions += o.regions
	s.register += o.register
	s.pageable += o.pageable
	s.wait += o.wait
}

// runInPlace takes units of up to unit chunks from the back of q until it
// is empty; for each run of a unit's chunks that lie together in one
// file it registers their pages in the file's mapping with one call, then
// enqueues their pieces' copies on eng, keeping at most inPlaceDepth units
// in flight. It returns once every copy it enqueued is done, or at the
// first error (after closing q, so the other takers stop too).
func runInPlace(chunks []readChunk, q *chunkQueue, maps fileMaps, unit int, eng inPlaceEngine) (st inPlaceStats, err error) {
	defer func() {
		if err != nil {
			q.close()
		}
	}()
	var marks []int // marks in flight, oldest first
	k := 0
	for {
		if len(marks) == inPlaceDepth {
			t := time.Now()
			if err := eng.wait(marks[0]); err != nil {
				return st, err
			}
			st.wait += time.Since(t)
			marks = marks[1:]
		}
		lo, hi, ok := q.takeBackN(max(1, unit))
		if !ok {
			break
		}
		for first := lo; first <= hi; {
			last := first
			for last < hi && chunks[last+1].file == chunks[first].file &&
				chunks[last+1].off-(chunks[last].off+int64(chunks[last].n)) <= maxReadGap {
				last++
			}
			reg, err := maps.region(chunks[first], chunks[last])
			if err != nil {
				return st, err
			}
			t := time.Now()
			if eng.register(reg) != nil {
				st.pageable++ // copied from pageable memory: correct, slower
			}
			st.register += time.Since(t)
			st.regions++
			base := chunks[first].off
			for _, c := range chunks[first : last+1] {
				at := int(c.off - base)
				for _, p := range c.pieces {
					if err := eng.copy(p.dst, reg[at+p.at:at+p.at+p.n]); err != nil {
						return st, fmt.Errorf("upload weights in place: %w", err)
					}
				}
				st.chunks++
				st.bytes += int64(c.n)
			}
			first = last + 1
		}
		if err := eng.fence(k); err != nil {
			return st, err
		}
		marks = append(marks, k)
		k = (k + 1) % inPlaceDepth
	}
	t := time.Now()
	for _, m := range marks {
		if err := eng.wait(m); err != nil {
			return st, err
		}
	}
	st.wait += time.Since(t)
	return st, nil
}

// cudaInPlace is inPlaceEngine on a stream of its own with inPlaceDepth
// events. Its methods run on the copier's thread, where the context is
// current; release, which unregisters what it registered, runs on the
// runner thread after the upload (releaseStaging).
type cudaInPlace struct {
	c          *Context
	s          *Stream
	events     []*Event
	registered [][]byte
}

func newCudaInPlace(c *Context) (*cudaInPlace, error) {
	s, err := c.NewStream()
	if err != nil {
		return nil, err
	}
	e := &cudaInPlace{c: c, s: s}
	for range inPlaceDepth {
		ev, err := c.NewEvent()
		if err != nil {
			e.release()
			return nil, err
		}
		e.events = append(e.events, ev)
	}
	return e, nil
}

func (e *cudaInPlace) register(b []byte) error {
	if err := e.c.HostRegister(unsafe.Pointer(&b[0]), len(b), true); err != nil {
		return err
	}
	e.registered = append(e.registered, b)
	return nil
}

func (e *cudaInPlace) copy(dst DevicePtr, src []byte) error {
	return e.s.CopyHtoDAsync(dst, unsafe.Pointer(&src[0]), len(src))
}

func (e *cudaInPlace) fence(k int) error { return e.events[k].Record(e.s) }

func (e *cudaInPlace) wait(k int) error { return e.events[k].Synchronize() }

// unregister unregisters ranges, oldest first, until budget bytes have
// been, or all have, and returns the bytes unregistered. Each range's
// page-table entries go with it (MADV_DONTNEED: the pages stay in the
// page cache), so the process's RSS falls step by step.
func (e *cudaInPlace) unregister(budget int64) (int64, error) {
	var done int64
	var errs []error
	for len(e.registered) > 0 && done < budget {
		b := e.registered[0]
		e.registered = e.registered[1:]
		errs = append(errs, e.c.HostUnregister(unsafe.Pointer(&b[0])))
		_ = unix.Madvise(b, unix.MADV_DONTNEED) // advisory: munmap drops them anyway
		done += int64(len(b))
	}
	return done, errors.Join(errs...)
}

// release waits for the stream, destroys it and the events and
// unregisters every range, before the mappings they lie in are unmapped.
func (e *cudaInPlace) release() error {
	var errs []error
	if e.s != nil {
		errs = append(errs, e.s.Synchronize(), e.s.Destroy())
		e.s = nil
	}
	for _, ev := range e.events {
		errs = append(errs, ev.Destroy())
	}
	e.events = nil
	_, err := e.unregister(math.MaxInt64)
	return errors.Join(append(errs, err)...)
}

// startInPlace starts n in-place copiers over chunks, each on a thread of
// its own with the context current, taking units of unit chunks from the
// back of q, from the files' mappings in maps (nil: mapped here; see
// prefault). The returned copied waits until every copier's copies are
// done, adds what they did to *st and leaves what they registered, and
// the mappings, to releaseStaging; it must be called once, on every path.
// If the files cannot be mapped it starts none and says why in
// st.refused: the readers then take every chunk.
func (b *Backend) startInPlace(chunks []readChunk, q *chunkQueue, n, unit int, maps fileMaps, st *inPlaceStats) (copied func() error) {
	if maps != nil {
		b.staging.maps = maps // populated ahead (prefault): released with the rest
	}
	if n == 0 || len(chunks) == 0 {
		return func() error { return nil }
	}
	if maps == nil {
		maps = fileMaps{}
	}
	if err := maps.ensure(chunks); err != nil {
		st.refused = err.Error()
		return func() error { return nil }
	}
	b.staging.maps = maps
	engs := make([]*cudaInPlace, n)
	stats := make([]inPlaceStats, n)
	done := make([]<-chan error, n)
	for i := range n {
		done[i] = contextThread(b.c, "in-place copier", func() error {
			e, err := newCudaInPlace(b.c)
			if err != nil {
				q.close()
				return err
			}
			engs[i] = e
			stats[i], err = runInPlace(chunks, q, maps, unit, e)
			return err
		})
	}
	return func() error {
		var errs []error
		for i, d := range done {
			errs = append(errs, <-d)
			st.add(stats[i])
			if engs[i] != nil {
				b.staging.inPlace = append(b.staging.inPlace, engs[i])
			}
		}
		return errors.Join(errs...)
	}
}

// attrs are the stats as the upload stage's attributes, for n copiers
// taking unitMB at a time.
func (s inPlaceStats) attrs(n, unitMB int) map[string]any {
	a := map[string]any{"inplace_copiers": n}
	if n == 0 {
		return a
	}
	a["inplace_unit_mb"] = unitMB
	a["inplace_bytes"] = s.bytes
	a["inplace_chunks"] = s.chunks
	a["inplace_regions"] = s.regions
	a["inplace_register_ms"] = durMS(s.register)
	a["inplace_wait_ms"] = durMS(s.wait)
	a["inplace_pageable_regions"] = s.pageable
	if s.refused != "" {
		a["inplace_refused"] = s.refused
	}
	return a
}

// UploadPopulateEnv overrides whether the weight files are mapped for the
// in-place copiers while the driver initialises, the mappings' page-table
// entries built from the back (where the copiers start) on
// prefaultThreads threads until the upload begins (prefault): 1 (the
// default where copiers run) or 0. On the lent H100 host the 8 GB upload
// went from 40.4 to 46.2 GB/s with it in one call and from 40.3 to 41.5
// in another, though registering a populated 1 GiB alone cost no less
// than a fresh one (doctor --floors): what it spares is the copiers
// faulting the pages in beside each other and the readers.
const UploadPopulateEnv = "TRENI_CUDA_UPLOAD_POPULATE"

const (
	prefaultThreads = 6
	prefaultRegion  = 64 << 20
)

// prefault populates mappings of the weight files from the back, on
// threads of its own, until finish.
type prefault struct {
	maps   fileMaps
	err    error
	stop   atomic.Bool
	filled atomic.Int64 // bytes populated
	wg     sync.WaitGroup
	t0     time.Time
}

// startPrefault maps files (sorted, as planChunks orders chunks) and
// starts populating them from the last file's end backwards, size bytes
// (prefaultRegion) at a time.
func startPrefault(files []string, size int) *prefault {
	p := &prefault{t0: time.Now()}
	sorted := append([]string(nil), files...)
	sort.Strings(sorted)
	var chunks []readChunk
	for _, f := range sorted {
		chunks = append(chunks, readChunk{file: f})
	}
	if p.maps, p.err = mapFiles(chunks); p.err != nil {
		return p
	}
	type part struct{ b []byte }
	var regions []part
	for _, f := range sorted {
		m := p.maps[f]
		for lo := 0; lo < len(m); lo += size {
			regions = append(regions, part{m[lo:min(len(m), lo+size)]})
		}
	}
	var next atomic.Int64
	next.Store(int64(len(regions)))
	for range prefaultThreads {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for !p.stop.Load() {
				i := next.Add(-1)
				if i < 0 {
					return
				}
				populate(regions[i].b, 1)
				p.filled.Add(int64(len(regions[i].b)))
			}
		}()
	}
	return p
}

// finish stops the threads, waits for them and hands over the mappings
// with what was populated (nil maps if mapping failed).
func (p *prefault) finish() (fileMaps, int64, float64, error) {
	p.stop.Store(true)
	p.wg.Wait()
	return p.maps, p.filled.Load(), msSince(p.t0), p.err
}
