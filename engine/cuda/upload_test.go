package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lazyDMA is a dmaEngine that, like the copy engine, reads a slot only
// after the copy was enqueued: copies are queued per slot and performed
// when the slot's fence is waited for. A pipeline that refills a slot
// before waiting for its fence therefore uploads the refill's bytes, and
// the comparison with the file fails. Several threads may use it at once
// (readers that enqueue their own copies, each on a stream of its own).
type lazyDMA struct {
	mu      sync.Mutex
	dev     []byte
	queued  map[int][]func() // slot → copies fenced on it
	pending map[int][]func() // stream → copies not yet fenced
	fenced  map[int]bool
	// prepared slots; a copy fenced on an unprepared one fails.
	prepared map[int]bool
	// nPrepared counts them, for other goroutines (the in-place fakes).
	nPrepared atomic.Int32
	failAt    int // copy number that fails (0: none)
	copies    int
	streams   map[int]bool // the streams copied on
}

func newLazyDMA(size int) *lazyDMA {
	return &lazyDMA{dev: make([]byte, size), queued: map[int][]func(){}, pending: map[int][]func(){},
		fenced: map[int]bool{}, prepared: map[int]bool{}, streams: map[int]bool{}}
}

func (d *lazyDMA) prepare(slot int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.prepared[slot] {
		return fmt.Errorf("slot %d prepared twice", slot)
	}
	d.prepared[slot] = true
	d.nPrepared.Add(1)
	return nil
}

func (d *lazyDMA) copy(stream int, dst DevicePtr, src []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.copies++
	if d.failAt > 0 && d.copies == d.failAt {
		return errors.New("injected copy failure")
	}
	if stream < 0 {
		return fmt.Errorf("stream %d", stream)
	}
	d.streams[stream] = true
	d.pending[stream] = append(d.pending[stream], func() { copy(d.dev[dst:], src) })
	return nil
}

func (d *lazyDMA) fence(slot, stream int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fenced[slot] {
		return fmt.Errorf("slot %d fenced twice without a wait: it was refilled while its copies were in flight", slot)
	}
	if !d.prepared[slot] {
		return fmt.Errorf("slot %d copied from before it was prepared (page-locked)", slot)
	}
	d.queued[slot], d.fenced[slot] = d.pending[stream], true
	delete(d.pending, stream)
	return nil
}

func (d *lazyDMA) wait(slot int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.queued[slot] {
		f()
	}
	delete(d.queued, slot)
	d.fenced[slot] = false
	return nil
}

// goThread runs f on a goroutine of its own: readerFeed.thread for tests.
func goThread(f func() error) <-chan error {
	c := make(chan error, 1)
	go func() { c <- f() }()
	return c
}

// writeWeights writes a file of n random bytes and returns them.
func writeWeights(t *testing.T, path string, n int, seed int64) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStagedUploadPlacesEveryByte runs the staged pipeline over two files
// with tensors of awkward sizes (smaller than, equal to and several times a
// slot, with small and large gaps, listed out of file order) into a ring
// smaller than the data, with a lazy fake copy engine, and checks every
// destination byte.
func TestStagedUploadPlacesEveryByte(t *testing.T) {
	dir := t.TempDir()
	const slot = 4096
	files := []string{filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")}
	data := [][]byte{writeWeights(t, files[0], 64<<10, 1), writeWeights(t, files[1], 40<<10, 2)}
	type tensor struct {
		file    int
		off, n  int
		devOff  int
		comment string
	}
	ts := []tensor{
		{0, 100, 3000, 0, "small, unaligned"},
		{0, 3100, 4096, 0, "exactly a slot, right after"},
		{0, 7196, 10000, 0, "spans three slots"},
		{0, 17196 + 2<<20, 0, 0, "placeholder"},
		{1, 0, 1, 0, "one byte"},
		{1, 9, 20000, 0, "after a tiny gap, five slots"},
		{0, 30000, 20000, 0, "after a gap"},
		{1, 30000, 10000, 0, "last"},
	}
	ts = append(ts[:3], ts[4:]...) // drop the placeholder
	var jobs []copyJob
	dev := 0
	for i := range ts {
		ts[i].devOff = dev
		d := data[ts[i].file][ts[i].off : ts[i].off+ts[i].n]
		jobs = append(jobs, copyJob{src: d, file: files[ts[i].file], off: int64(ts[i].off), n: ts[i].n, dst: DevicePtr(dev)})
		dev += ts[i].n + 7 // a gap on the device too
	}
	// Reverse the job order: the planner must sort by file and offset.
	for i, j := 0, len(jobs)-1; i < j; i, j = i+1, j-1 {
		jobs[i], jobs[j] = jobs[j], jobs[i]
	}
	chunks := planChunks(jobs, slot, 512)
	covered := 0
	for _, c := range chunks {
		if c.n > slot || c.n <= 0 || c.off%512 != 0 {
			t.Fatalf("chunk [%d, +%d) with %d-byte slots aligned to 512", c.off, c.n, slot)
		}
		for _, p := range c.pieces {
			if p.at < 0 || p.at+p.n > c.n {
				t.Fatalf("piece [%d,%d) outside its %d-byte chunk", p.at, p.at+p.n, c.n)
			}
			covered += p.n
		}
	}
	total := 0
	for _, x := range ts {
		total += x.n
	}
	if covered != total {
		t.Fatalf("pieces cover %d bytes, tensors hold %d", covered, total)
	}
	// Both feeds: the copy loop, and readers that copy their own chunks
	// with one to three slots each (the readers that run are those the
	// ring has slots for).
	for _, own := range []bool{false, true} {
		for _, readers := range []int{1, 3, 8} {
			for _, slots := range []int{1, 2, 5} {
				for _, per := range []int{1, 2, 3} {
					if !own && per > 1 {
						continue
					}
					ring := &stagingRing{mem: make([]byte, slots*slot), slotBytes: slot}
					dma := newLazyDMA(dev)
					feed := readerFeed{readers: readers, perReader: per, ownCopies: own, thread: goThread}
					run := fmt.Sprintf("own copies %v, readers %d, slots %d (%d each)", own, readers, slots, per)
					t0 := time.Now()
					st, err := runStaged(context.Background(), chunks, newChunkQueue(len(chunks), false), ring, feed, dma)
					wall := time.Since(t0)
					if err != nil {
						t.Fatalf("%s: %v", run, err)
					}
					if st.chunks != len(chunks) || len(dma.queued) != 0 || len(dma.pending) != 0 {
						t.Fatalf("%s: uploaded %d chunks of %d; %d slots' copies never waited for, %d streams' never fenced",
							run, st.chunks, len(chunks), len(dma.queued), len(dma.pending))
					}
					// Each reader's time inside the run is either reading
					// or idle.
					n := min(readers, slots)
					if own {
						n = max(1, min(readers, slots/min(per, slots)))
						if len(dma.streams) > n {
							t.Fatalf("%s: copies on %d streams, %d readers", run, len(dma.streams), n)
						}
						// The wall-clock split is the mean reader's.
						if st.readWait != st.readBusy/time.Duration(n) {
							t.Fatalf("%s: read wait %v, busy %v over %d readers", run, st.readWait, st.readBusy, n)
						}
					}
					if st.readIdle < 0 || st.readBusy+st.readIdle > time.Duration(n)*wall {
						t.Fatalf("%s: busy %v + idle %v over %d readers in %v", run, st.readBusy, st.readIdle, n, wall)
					}
					for _, x := range ts {
						want := data[x.file][x.off : x.off+x.n]
						if got := dma.dev[x.devOff : x.devOff+x.n]; !bytes.Equal(got, want) {
							t.Fatalf("%s: tensor %q arrived corrupted", run, x.comment)
						}
					}
				}
			}
		}
	}
}

// TestPlanChunksMergesAndSplits: neighbours with a small gap share a read,
// a large gap starts a new one, and a tensor larger than a slot is split.
func TestPlanChunksMergesAndSplits(t *testing.T) {
	jobs := []copyJob{
		{file: "f", off: 0, n: 100, dst: 0},
		{file: "f", off: 200, n: 100, dst: 1000},                 // small gap: same read
		{file: "f", off: 300 + maxReadGap + 1, n: 10, dst: 2000}, // large gap: new read
		{file: "f", off: 10 << 20, n: 2500, dst: 3000},           // split in slots of 1000
	}
	c := planChunks(jobs, 1000, 1)
	if len(c) != 5 {
		t.Fatalf("%d chunks: %+v", len(c), c)
	}
	if c[0].off != 0 || c[0].n != 300 || len(c[0].pieces) != 2 || c[0].pieces[1].at != 200 {
		t.Fatalf("first read %+v", c[0])
	}
	if c[2].n != 1000 || c[3].n != 1000 || c[4].n != 500 || c[4].pieces[0].dst != 5000 {
		t.Fatalf("split %+v %+v %+v", c[2], c[3], c[4])
	}
}

// TestStagedUploadErrors: a file that is shorter than its index claims
// (truncated after opening) and a failing copy both end the upload with an
// error that names the cause, and the readers stop.
func TestStagedUploadErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.safetensors")
	writeWeights(t, path, 10000, 3)
	ring := &stagingRing{mem: make([]byte, 4*4096), slotBytes: 4096}
	for _, feed := range []readerFeed{{readers: 2}, {readers: 2, perReader: 2, ownCopies: true, thread: goThread}} {
		jobs := []copyJob{{file: path, off: 0, n: 20000, dst: 0}}
		_, err := runStaged1(planChunks(jobs, 4096, 4096), ring, feed, newLazyDMA(20000))
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("own copies %v: truncated file: %v", feed.ownCopies, err)
		}
		jobs = []copyJob{{file: path, off: 0, n: 10000, dst: 0}}
		dma := newLazyDMA(10000)
		dma.failAt = 2
		if _, err := runStaged1(planChunks(jobs, 4096, 4096), ring, feed, dma); err == nil || !strings.Contains(err.Error(), "injected") {
			t.Fatalf("own copies %v: copy failure: %v", feed.ownCopies, err)
		}
		jobs = []copyJob{{file: filepath.Join(dir, "missing"), off: 0, n: 10, dst: 0}}
		if _, err := runStaged1(planChunks(jobs, 4096, 4096), ring, feed, newLazyDMA(10)); err == nil || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("own copies %v: missing file: %v", feed.ownCopies, err)
		}
	}
}

// cancelDMA is lazyDMA that cancels the upload's context at its n-th copy:
// a stop (SIGTERM, Ctrl-C) arriving in the middle of an upload.
type cancelDMA struct {
	*lazyDMA
	n      atomic.Int32
	at     int32
	cancel context.CancelFunc
}

func (d *cancelDMA) copy(stream int, dst DevicePtr, src []byte) error {
	if d.n.Add(1) == d.at {
		d.cancel()
	}
	return d.lazyDMA.copy(stream, dst, src)
}

// TestStagedUploadStopsWhenCancelled: a context that ends during the
// staged upload stops its readers before their next chunk, with either
// feed: the upload returns context.Canceled, having read only part of the
// chunks. (Copies still in flight are synchronized when the failed load
// releases the copy engine's streams, before the ring is unmapped.)
func TestStagedUploadStopsWhenCancelled(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.safetensors")
	writeWeights(t, path, 64<<10, 4)
	jobs := []copyJob{{file: path, off: 0, n: 64 << 10, dst: 0}}
	chunks := planChunks(jobs, 4096, 4096)
	for _, feed := range []readerFeed{{readers: 2}, {readers: 2, perReader: 2, ownCopies: true, thread: goThread}} {
		ring := &stagingRing{mem: make([]byte, 4*4096), slotBytes: 4096}
		ctx, cancel := context.WithCancel(context.Background())
		dma := &cancelDMA{lazyDMA: newLazyDMA(64 << 10), at: 3, cancel: cancel}
		st, err := runStaged(ctx, chunks, newChunkQueue(len(chunks), false), ring, feed, dma)
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("own copies %v: cancelled upload: %v, want context.Canceled", feed.ownCopies, err)
		}
		if st.chunks >= len(chunks) {
			t.Fatalf("own copies %v: %d of %d chunks uploaded after the cancel", feed.ownCopies, st.chunks, len(chunks))
		}
	}
}

// runStaged1 runs the staged path alone over every chunk.
func runStaged1(chunks []readChunk, ring *stagingRing, feed readerFeed, dma dmaEngine) (stagedStats, error) {
	return runStaged(context.Background(), chunks, newChunkQueue(len(chunks), false), ring, feed, dma)
}

// TestPlanChunksAligned: with a page as align, every chunk starts on a
// page and the pages of two chunks never overlap (the in-place copiers
// register each chunk's pages), whatever the tensors' offsets; a file's
// chunks cover its tensors' bytes exactly once.
func TestPlanChunksAligned(t *testing.T) {
	const page, slot = 4096, 4 * 4096
	rng := rand.New(rand.NewSource(5))
	for trial := 0; trial < 200; trial++ {
		var jobs []copyJob
		off, dev := int64(rng.Intn(page)), DevicePtr(0)
		for k := 0; k < 1+rng.Intn(12); k++ {
			n := 1 + rng.Intn(3*slot)
			jobs = append(jobs, copyJob{file: "f", off: off, n: n, dst: dev})
			dev += DevicePtr(n)
			switch rng.Intn(3) { // the gap to the next tensor
			case 0:
				off += int64(n)
			case 1:
				off += int64(n + rng.Intn(2*page))
			default:
				off += int64(n + maxReadGap + 1 + rng.Intn(page))
			}
		}
		chunks := planChunks(jobs, slot, page)
		covered := map[DevicePtr]bool{}
		prevEnd := int64(-1)
		for _, c := range chunks {
			if c.off%page != 0 || c.n <= 0 || c.n > slot {
				t.Fatalf("trial %d: chunk [%d, +%d)", trial, c.off, c.n)
			}
			if c.off < prevEnd {
				t.Fatalf("trial %d: chunk at %d starts on the pages of the last, which end at %d", trial, c.off, prevEnd)
			}
			prevEnd = (c.off + int64(c.n) + page - 1) &^ (page - 1)
			for _, p := range c.pieces {
				for b := 0; b < p.n; b++ {
					if covered[p.dst+DevicePtr(b)] {
						t.Fatalf("trial %d: device byte %d placed twice", trial, p.dst+DevicePtr(b))
					}
					covered[p.dst+DevicePtr(b)] = true
				}
			}
		}
		if len(covered) != int(dev) {
			t.Fatalf("trial %d: %d of %d bytes placed", trial, len(covered), dev)
		}
	}
}

// TestStagingRing maps, pre-faults and unmaps a ring.
func TestStagingRing(t *testing.T) {
	r, err := newStagingRing(3, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if r.slots() != 3 || len(r.slot(2)) != 1<<20 {
		t.Fatalf("%d slots of %d", r.slots(), len(r.slot(2)))
	}
	r.slot(2)[5] = 7
	if err := r.unmap(); err != nil {
		t.Fatal(err)
	}
	if err := r.unmap(); err != nil { // idempotent
		t.Fatal(err)
	}
}

func TestUploadMode(t *testing.T) {
	t.Setenv(UploadEnv, "")
	if m, err := uploadMode(""); err != nil || m != UploadStaged {
		t.Fatal(m, err)
	}
	if m, err := uploadMode(UploadMapped); err != nil || m != UploadMapped {
		t.Fatal(m, err)
	}
	t.Setenv(UploadEnv, "mapped")
	if m, _ := uploadMode(UploadStaged); m != UploadMapped {
		t.Fatal("the environment does not override the option")
	}
	t.Setenv(UploadEnv, "dma")
	if _, err := uploadMode(""); err == nil || !strings.Contains(err.Error(), UploadEnv) {
		t.Fatalf("bad mode: %v", err)
	}
}

// TestReleaseStaging: what the staged upload leaves (here a ring without
// a copy engine, as when the upload thread never made one) is released
// once: the ring is unmapped and the backend forgets it, so free after
// the background item finds nothing left.
func TestReleaseStaging(t *testing.T) {
	ring, err := newStagingRing(2, 4096)
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{staging: &stagingLeft{ring: ring}}
	if err := b.releaseStaging(); err != nil {
		t.Fatal(err)
	}
	if b.staging != nil || ring.mem != nil {
		t.Fatalf("after release: staging %v, ring mapped %v", b.staging, ring.mem != nil)
	}
	if err := b.releaseStaging(); err != nil {
		t.Fatalf("second release: %v", err)
	}
}

// TestUploadConfig: a warm upload runs readers only unless the
// environment asks for in-place copiers, which then take two readers'
// cores each and have their mappings populated ahead; the environment
// overrides the counts, the copiers' unit and populating within their
// ranges, refuses what is not a count, not a whole number of chunks or
// leaves no thread, and a cold page cache keeps its readers and runs no
// copier whatever the warm environment says; UploadColdReadersEnv alone
// sets its readers.
func TestUploadConfig(t *testing.T) {
	for _, e := range []string{ColdPrefetchEnv, UploadColdReadersEnv, UploadReadersEnv, UploadInPlaceEnv, UploadInPlaceUnitEnv, UploadPopulateEnv, UploadFeedEnv, UploadSlotsEnv, UploadSlotEnv} {
		t.Setenv(e, "")
	}
	c, err := resolveUploadConfig(false)
	if err != nil || c.readers != maxReaders() || c.inPlace != 0 || c.populate || !c.ownCopies || c.perReader != 2 || c.slotMB != stagingSlotBytes>>20 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if c.ringSlots() != 2*maxReaders() || c.ringReaders(c.ringSlots()) != maxReaders() || c.ringReaders(5) != 2 {
		t.Fatalf("ring of %d slots; %d readers on it, %d on 5", c.ringSlots(), c.ringReaders(c.ringSlots()), c.ringReaders(5))
	}
	// The ring's shape applies warm and cold; the copiers' unit stays a
	// whole number of slots.
	t.Setenv(UploadFeedEnv, "loop")
	t.Setenv(UploadSlotsEnv, "3")
	t.Setenv(UploadSlotEnv, "24")
	for _, cold := range []bool{false, true} {
		c, err := resolveUploadConfig(cold)
		if err != nil || c.ownCopies || c.perReader != 3 || c.slotMB != 24 || c.ringSlots() != c.readers+stagingSlack || (!cold && c.unitMB != 48) {
			t.Fatalf("loop feed, 24 MiB slots (cold %v): %+v %v", cold, c, err)
		}
	}
	for _, bad := range [][3]string{{"loops", "", ""}, {"", "0", ""}, {"", "9", ""}, {"", "", "0"}, {"", "", "257"}} {
		t.Setenv(UploadFeedEnv, bad[0])
		t.Setenv(UploadSlotsEnv, bad[1])
		t.Setenv(UploadSlotEnv, bad[2])
		if _, err := resolveUploadConfig(true); err == nil || !strings.Contains(err.Error(), "TRENI_CUDA_UPLOAD_") {
			t.Fatalf("feed %q, slots a reader %q, slot MiB %q: %v", bad[0], bad[1], bad[2], err)
		}
	}
	for _, e := range []string{UploadFeedEnv, UploadSlotsEnv, UploadSlotEnv} {
		t.Setenv(e, "")
	}
	t.Setenv(UploadInPlaceEnv, "2")
	if c, err := resolveUploadConfig(false); err != nil || c.readers != max(4, maxReaders()-4) || c.inPlace != 2 || c.unitMB != defaultInPlaceUnitMB || !c.populate {
		t.Fatalf("two copiers: %+v %v", c, err)
	}
	t.Setenv(UploadPopulateEnv, "0")
	if c, err := resolveUploadConfig(false); err != nil || c.populate || c.inPlace != 2 {
		t.Fatalf("populating off: %+v %v", c, err)
	}
	t.Setenv(UploadPopulateEnv, "1")
	t.Setenv(UploadInPlaceEnv, "0")
	if c, err := resolveUploadConfig(false); err != nil || c.populate {
		t.Fatalf("populating with no copier to use it: %+v %v", c, err)
	}
	t.Setenv(UploadPopulateEnv, "yes")
	if _, err := resolveUploadConfig(false); err == nil || !strings.Contains(err.Error(), UploadPopulateEnv) {
		t.Fatalf("populate=yes: %v", err)
	}
	t.Setenv(UploadPopulateEnv, "")
	t.Setenv(UploadReadersEnv, "0")
	t.Setenv(UploadInPlaceEnv, "3")
	t.Setenv(UploadInPlaceUnitEnv, "256")
	if c, err := resolveUploadConfig(false); err != nil || c != (uploadConfig{readers: 0, inPlace: 3, unitMB: 256, populate: true,
		ownCopies: true, perReader: 2, slotMB: stagingSlotBytes >> 20}) {
		t.Fatalf("in place only: %+v %v", c, err)
	}
	if c, err := resolveUploadConfig(true); err != nil || c.readers != coldReaders || c.inPlace != 0 || c.populate || !c.prefetch {
		t.Fatalf("cold: %+v %v", c, err)
	}
	t.Setenv(ColdPrefetchEnv, "0")
	if c, err := resolveUploadConfig(true); err != nil || c.prefetch {
		t.Fatalf("cold, prefetch off: %+v %v", c, err)
	}
	t.Setenv(ColdPrefetchEnv, "1")
	if c, err := resolveUploadConfig(false); err != nil || c.prefetch {
		t.Fatalf("a warm page cache prefetches: %+v %v", c, err)
	}
	t.Setenv(ColdPrefetchEnv, "on")
	if _, err := resolveUploadConfig(true); err == nil || !strings.Contains(err.Error(), ColdPrefetchEnv) {
		t.Fatalf("prefetch=on: %v", err)
	}
	t.Setenv(ColdPrefetchEnv, "")
	t.Setenv(UploadColdReadersEnv, "16")
	if c, err := resolveUploadConfig(true); err != nil || c.readers != 16 || c.inPlace != 0 {
		t.Fatalf("16 cold readers: %+v %v", c, err)
	}
	if c, err := resolveUploadConfig(false); err != nil || c.readers != 0 {
		t.Fatalf("the cold readers' count leaks into a warm upload: %+v %v", c, err)
	}
	for _, bad := range []string{"0", "65", "x"} {
		t.Setenv(UploadColdReadersEnv, bad)
		if _, err := resolveUploadConfig(true); err == nil || !strings.Contains(err.Error(), UploadColdReadersEnv) {
			t.Fatalf("cold readers %q: %v", bad, err)
		}
	}
	t.Setenv(UploadColdReadersEnv, "")
	for _, bad := range [][3]string{{"0", "0", ""}, {"x", "1", ""}, {"-1", "1", ""}, {"4", "17", ""}, {"65", "0", ""}, {"4", "2", "20"}, {"4", "2", "8192"}, {"4", "2", "0"}} {
		t.Setenv(UploadReadersEnv, bad[0])
		t.Setenv(UploadInPlaceEnv, bad[1])
		t.Setenv(UploadInPlaceUnitEnv, bad[2])
		if _, err := resolveUploadConfig(false); err == nil || !strings.Contains(err.Error(), "TRENI_CUDA_UPLOAD_") {
			t.Fatalf("readers %q, in place %q, unit %q: %v", bad[0], bad[1], bad[2], err)
		}
	}
}
