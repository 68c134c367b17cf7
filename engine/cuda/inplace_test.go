package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// lazyInPlace is an inPlaceEngine that, like the copy engine, reads the
// source only after the copy was enqueued: copies wait for their mark to
// be waited for. Its registrations are shared by every copier of a test
// (regs) and, as the driver does, it refuses a range that is not
// page-aligned or that overlaps one already registered.
type lazyInPlace struct {
	// before, if set, is checked at every registration (the readers'
	// ring must be page-locked first).
	before  func() error
	regs    *registry
	dev     []byte
	pending []copyOp         // copies not yet fenced
	queued  map[int][]copyOp // mark → copies fenced on it
	failAt  int              // copy number that fails (0: none)
	copies  int
}

// copyOp is a copy not yet performed.
type copyOp struct {
	src []byte
	dst DevicePtr
}

// registry is the host ranges registered so far, by every copier.
type registry struct {
	mu     sync.Mutex
	spans  [][2]uintptr
	refuse bool // refuse every registration (a locked-memory limit)
}

func span(b []byte) (lo, hi uintptr) {
	lo = uintptr(unsafe.Pointer(&b[0]))
	return lo, lo + uintptr(len(b))
}

func (r *registry) add(b []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse {
		return errors.New("CUDA_ERROR_OUT_OF_MEMORY (injected)")
	}
	lo, hi := span(b)
	if lo%4096 != 0 || hi%4096 != 0 {
		return fmt.Errorf("range [%#x, %#x) is not page-aligned", lo, hi)
	}
	for _, s := range r.spans {
		if lo < s[1] && s[0] < hi {
			return fmt.Errorf("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: [%#x, %#x) overlaps [%#x, %#x)", lo, hi, s[0], s[1])
		}
	}
	r.spans = append(r.spans, [2]uintptr{lo, hi})
	return nil
}

func newLazyInPlace(regs *registry, dev []byte) *lazyInPlace {
	return &lazyInPlace{regs: regs, dev: dev, queued: map[int][]copyOp{}}
}

func (e *lazyInPlace) register(b []byte) error {
	if e.before != nil {
		if err := e.before(); err != nil {
			return err
		}
	}
	return e.regs.add(b)
}

func (e *lazyInPlace) copy(dst DevicePtr, src []byte) error {
	e.copies++
	if e.failAt > 0 && e.copies == e.failAt {
		return errors.New("injected copy failure")
	}
	e.pending = append(e.pending, copyOp{src, dst})
	return nil
}

func (e *lazyInPlace) fence(k int) error {
	if k < 0 || k >= inPlaceDepth {
		return fmt.Errorf("mark %d of %d", k, inPlaceDepth)
	}
	if len(e.queued[k]) > 0 {
		return fmt.Errorf("mark %d reused while its copies are in flight", k)
	}
	e.queued[k], e.pending = e.pending, nil
	return nil
}

func (e *lazyInPlace) wait(k int) error {
	for _, op := range e.queued[k] {
		copy(e.dev[op.dst:], op.src)
	}
	delete(e.queued, k)
	return nil
}

// inPlaceFixture is two weight files and tensors of awkward sizes and
// offsets in them, planned into page-aligned chunks of slot bytes.
type inPlaceFixture struct {
	chunks  []readChunk
	devSize int
	check   func(t *testing.T, dev []byte, what string)
}

func newInPlaceFixture(t *testing.T, slot int) inPlaceFixture {
	t.Helper()
	if os.Getpagesize() != 4096 {
		t.Skip("the fixture's offsets assume 4 KiB pages")
	}
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")}
	data := [][]byte{writeWeights(t, files[0], 96<<10+123, 11), writeWeights(t, files[1], 50<<10+7, 12)}
	type tensor struct{ file, off, n, dev int }
	ts := []tensor{
		{0, 8, 3000, 0}, {0, 3008, 4096, 0}, {0, 7104, 30000, 0}, // back to back, across pages
		{0, 37604, 5000, 0},                 // a small gap
		{0, 60000, 96<<10 + 123 - 60000, 0}, // to the file's last byte, mid-page
		{1, 0, 1, 0}, {1, 9, 20000, 0}, {1, 30000, 50<<10 + 7 - 30000, 0},
	}
	var jobs []copyJob
	dev := 0
	for i := range ts {
		ts[i].dev = dev
		jobs = append(jobs, copyJob{file: files[ts[i].file], off: int64(ts[i].off), n: ts[i].n, dst: DevicePtr(dev)})
		dev += ts[i].n + 5
	}
	return inPlaceFixture{chunks: planChunks(jobs, slot, 4096), devSize: dev, check: func(t *testing.T, got []byte, what string) {
		t.Helper()
		for i, x := range ts {
			if !bytes.Equal(got[x.dev:x.dev+x.n], data[x.file][x.off:x.off+x.n]) {
				t.Fatalf("%s: tensor %d arrived corrupted", what, i)
			}
		}
	}}
}

// TestUploadBothPaths runs the staged readers and in-place copiers over one
// queue, with lazy fake copy engines that read their sources only when a
// fence or mark is waited for and refuse overlapping registrations, and
// checks every destination byte, that the two paths took every chunk once
// between them, and that no registration was refused. The in-place path
// alone, and the readers alone, also upload everything.
func TestUploadBothPaths(t *testing.T) {
	const slot = 3 * 4096
	fx := newInPlaceFixture(t, slot)
	maps, err := mapFiles(fx.chunks)
	if err != nil {
		t.Fatal(err)
	}
	defer maps.unmap()
	for _, c := range [][2]int{{0, 1}, {0, 4}, {1, 0}, {1, 1}, {1, 4}, {3, 0}, {3, 1}, {3, 4}} {
		copiers, readers := c[0], c[1]
		for _, unit := range []int{1, 2, 5} {
			for _, own := range []bool{false, true} {
				if (copiers == 0 && unit > 1) || (readers == 0 && own) {
					continue
				}
				what := fmt.Sprintf("%d readers (own copies %v), %d copiers, units of %d chunks", readers, own, copiers, unit)
				dev := make([]byte, fx.devSize)
				q := newChunkQueue(len(fx.chunks), readers > 0) // held until the ring is page-locked
				dma := newLazyDMA(0)
				dma.dev = dev
				const slots = 3
				regs := &registry{}
				var wg sync.WaitGroup
				stats := make([]inPlaceStats, copiers)
				errs := make([]error, copiers)
				for i := range copiers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						e := newLazyInPlace(regs, dev)
						if readers > 0 {
							// Every slot of the ring in use is filled (the
							// fixture has more chunks than slots), so the back
							// end opens only once all are page-locked.
							// With own copies, a slot for each reader.
							used := int32(slots)
							if own {
								used = int32(min(readers, slots))
							}
							e.before = func() error {
								if n := dma.nPrepared.Load(); n != used {
									return fmt.Errorf("registered beside the ring's registration: %d of %d slots prepared", n, used)
								}
								return nil
							}
						}
						stats[i], errs[i] = runInPlace(fx.chunks, q, maps, unit, e)
					}()
				}
				var st stagedStats
				if readers > 0 {
					ring := &stagingRing{mem: make([]byte, slots*slot), slotBytes: slot}
					// A slot a reader: every slot is used with own copies too.
					feed := readerFeed{readers: readers, perReader: 1, ownCopies: own, thread: goThread}
					st, err = runStaged(context.Background(), fx.chunks, q, ring, feed, dma)
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
				}
				wg.Wait()
				var in inPlaceStats
				for i := range copiers {
					if errs[i] != nil {
						t.Fatalf("%s: copier %d: %v", what, i, errs[i])
					}
					in.add(stats[i])
				}
				if st.chunks+in.chunks != len(fx.chunks) {
					t.Fatalf("%s: readers took %d chunks and copiers %d, of %d", what, st.chunks, in.chunks, len(fx.chunks))
				}
				if in.pageable != 0 || len(regs.spans) != in.regions {
					t.Fatalf("%s: %d registrations refused, %d of %d made", what, in.pageable, len(regs.spans), in.regions)
				}
				// Units of one chunk register each chunk alone; larger ones register
				// a run of chunks together (the fixture has runs of several).
				if copiers > 0 && readers == 0 && (unit == 1) != (in.regions == len(fx.chunks)) {
					t.Fatalf("%s: %d ranges registered for %d chunks", what, in.regions, len(fx.chunks))
				}
				fx.check(t, dev, what)
			}
		}
	}
}

// TestInPlaceRefusedAndFailing: a refused registration leaves the chunk to
// a pageable copy (counted, every byte still right); a failing copy ends
// the copier with an error naming it and closes the queue, so the readers
// take no more chunks.
func TestInPlaceRefusedAndFailing(t *testing.T) {
	fx := newInPlaceFixture(t, 2*4096)
	maps, err := mapFiles(fx.chunks)
	if err != nil {
		t.Fatal(err)
	}
	defer maps.unmap()
	dev := make([]byte, fx.devSize)
	st, err := runInPlace(fx.chunks, newChunkQueue(len(fx.chunks), false), maps, 2, newLazyInPlace(&registry{refuse: true}, dev))
	if err != nil {
		t.Fatal(err)
	}
	if st.pageable != st.regions || st.chunks != len(fx.chunks) {
		t.Fatalf("refused: %d of %d regions pageable, %d of %d chunks copied", st.pageable, st.regions, st.chunks, len(fx.chunks))
	}
	fx.check(t, dev, "refused registrations")

	q := newChunkQueue(len(fx.chunks), false)
	e := newLazyInPlace(&registry{}, make([]byte, fx.devSize))
	e.failAt = 2
	if _, err := runInPlace(fx.chunks, q, maps, 1, e); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("failing copy: %v", err)
	}
	if i, ok := q.takeFront(); ok {
		t.Fatalf("the queue still hands out chunk %d after a copier failed", i)
	}
}

// TestChunkQueue: both ends together hand out every index exactly once,
// from many goroutines and in runs of several from the back; close stops
// both.
func TestChunkQueue(t *testing.T) {
	const n = 1000
	q := newChunkQueue(n, false)
	var mu sync.Mutex
	seen := make([]int, n)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Even goroutines take one index from the front, odd ones
			// g at a time from the back.
			take := func() (int, int, bool) {
				i, ok := q.takeFront()
				return i, i, ok
			}
			if g%2 == 1 {
				take = func() (int, int, bool) { return q.takeBackN(g) }
			}
			for {
				lo, hi, ok := take()
				if !ok {
					return
				}
				mu.Lock()
				for i := lo; i <= hi; i++ {
					seen[i]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("index %d handed out %d times", i, c)
		}
	}
	q = newChunkQueue(6, false)
	if lo, hi, ok := q.takeBackN(1); !ok || lo != 5 || hi != 5 {
		t.Fatalf("back: %d..%d %v", lo, hi, ok)
	}
	if lo, hi, ok := q.takeBackN(3); !ok || lo != 2 || hi != 4 {
		t.Fatalf("back 3: %d..%d %v", lo, hi, ok)
	}
	if i, ok := q.takeFront(); !ok || i != 0 {
		t.Fatalf("front: %d %v", i, ok)
	}
	if lo, hi, ok := q.takeBackN(3); !ok || lo != 1 || hi != 1 {
		t.Fatalf("back 3 of the last 1: %d..%d %v", lo, hi, ok)
	}
	q = newChunkQueue(3, false)
	q.close()
	if _, ok := q.takeFront(); ok {
		t.Fatal("a closed queue hands out an index")
	}
	if _, _, ok := newChunkQueue(0, false).takeBackN(1); ok {
		t.Fatal("an empty queue hands out an index")
	}
}

// TestMapFilesErrors: a missing or empty weight file is an error naming
// it, and a chunk that is not page-aligned inside its mapping is refused
// rather than registered.
func TestMapFilesErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := mapFiles([]readChunk{{file: filepath.Join(dir, "missing")}}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing file: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := mapFiles([]readChunk{{file: empty}}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty file: %v", err)
	}
	w := filepath.Join(dir, "w")
	writeWeights(t, w, 10000, 1)
	m, err := mapFiles([]readChunk{{file: w}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.unmap()
	page := int64(os.Getpagesize())
	for _, c := range []readChunk{{file: w, off: 100, n: 10}, {file: w, off: page, n: int(3 * page)}, {file: "other", n: 1}} {
		if _, err := m.region(c, c); err == nil {
			t.Fatalf("chunk [%d, +%d) of %s: no error", c.off, c.n, c.file)
		}
	}
	if c := (readChunk{file: w, off: page, n: 10000 - int(page)}); false {
	} else if r, err := m.region(c, c); err != nil || len(r) != int(2*page) {
		t.Fatalf("to the file's last byte, mid-page: %d bytes, %v", len(r), err)
	}
}

// TestPrefault: the files are mapped whole (sorted, every byte the
// file's) and, left to finish, every region is populated; finish stops
// the threads and hands the mappings over; a missing file is an error
// with no mapping left behind.
func TestPrefault(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "b.safetensors"), filepath.Join(dir, "a.safetensors")
	const size = 16 << 10 // regions of the test's own size: several a file
	da, db := writeWeights(t, a, 7*size/2+5, 1), writeWeights(t, b, 4097, 2)
	p := startPrefault([]string{a, b}, size)
	p.wg.Wait() // let it populate everything
	maps, filled, _, err := p.finish()
	if err != nil {
		t.Fatal(err)
	}
	defer maps.unmap()
	page := os.Getpagesize()
	want := int64((len(da)+page-1)&^(page-1) + (len(db)+page-1)&^(page-1))
	if filled != want {
		t.Fatalf("populated %d bytes of %d", filled, want)
	}
	if !bytes.Equal(maps[a][:len(da)], da) || !bytes.Equal(maps[b][:len(db)], db) {
		t.Fatal("a mapping does not hold its file's bytes")
	}
	p = startPrefault([]string{a, filepath.Join(dir, "missing")}, size)
	if m, _, _, err := p.finish(); err == nil || !strings.Contains(err.Error(), "missing") || len(m) != 0 {
		t.Fatalf("missing file: %v, %d mappings", err, len(m))
	}
}
