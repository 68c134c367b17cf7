package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/treni-top/treni-top/trace"
)

// How the weights reach the device. Two paths, both measured on the lent
// H100 (docs/BENCHMARKS.md):
//
//   - UploadStaged (the default): reader goroutines pread the weight files
//     into a ring of page-locked staging slots while the copy engine drains
//     the filled ones over two streams. The mapping of the weight files is
//     never touched, so no page-table entry is built for 8 GB of weights
//     (the cost that held the mapped path to ~13 GB/s), the process's RSS
//     stays at the size of the ring, which is freed after the upload, and a
//     cold page cache is read by several readers at once, its first chunks
//     by a prefetch while the driver initialises (prefetch.go). Opt-in in-place
//     copiers (inplace.go) can take chunks from the other end of the
//     readers' queue and have the copy engine read them straight from the
//     page cache, through a mapping of their own page-locked in place: one
//     pass over host memory instead of three.
//   - UploadMapped: the mapping itself is cuMemHostRegister'd chunk by chunk
//     and copied from. Kept for comparison and as the fallback when the
//     files cannot be opened for reading (the mapping is then all there is).

// Upload modes of BackendOptions.Upload.
const (
	UploadStaged = "staged"
	UploadMapped = "mapped"
)

// UploadEnv overrides BackendOptions.Upload when set (staged or mapped), so
// benchmarks can compare the two paths on one binary.
const UploadEnv = "TRENI_CUDA_UPLOAD"

// Staging ring geometry: the default slot size (uploadConfig.slotMB), and
// with one copy loop (stageCopyLoop) the slots beyond one per reader that
// keep the copy engine busy while readers refill. With readers that
// enqueue their own copies, two slots of 8 MiB each uploaded a warm 4B-
// shaped checkpoint ~1 GB/s faster than two of 16 MiB on the lent H100,
// but read it from a cold page cache 5–10% slower (the disk serves larger
// reads better; docs/BENCHMARKS.md): the cold start from disk is the
// longer by ten times, so the slots stay 16 MiB.
const (
	stagingSlotBytes = 16 << 20
	stagingSlack     = 6
	// maxReadGap is the largest stretch of a file between two wanted
	// tensors that a chunk reads through rather than starting a new chunk
	// (norm weights and biases sit between the matrices; reading them is
	// cheaper than another read call).
	maxReadGap = 1 << 20
)

// piece is one tensor's bytes inside a read chunk, headed for dst.
type piece struct {
	at  int // offset in the chunk
	n   int
	dst DevicePtr
}

// readChunk is one contiguous read of a weight file, at most a slot long.
type readChunk struct {
	file   string
	off    int64
	n      int
	pieces []piece
}

// uploadConfig is how the staged upload runs: readers that pread the
// weight files into the ring, in-place copiers (inplace.go) that register
// the files' mapping and copy from it beside the readers, and the
// copiers' unit (MiB taken, and registered, at a time).
type uploadConfig struct {
	readers, inPlace, unitMB int
	// populate has the copiers' mappings populated while the driver
	// initialises (prefault, inplace.go); only with in-place copiers.
	populate bool
	// ownCopies has each reader enqueue its own chunks' copies, on a
	// stream of its own, alternating between perReader slots of its own
	// (stageOwnCopies); otherwise one copy loop enqueues every copy and
	// hands the readers their chunks (stageCopyLoop). slotMB is the ring's
	// slot size.
	ownCopies         bool
	perReader, slotMB int
	// prefetch has the front of the files read into the page cache while
	// the driver initialises (coldPrefetch); only with a cold page cache.
	prefetch bool
}

// ringSlots is how many slots the staging ring needs for this config.
func (u uploadConfig) ringSlots() int {
	if u.ownCopies {
		// A reader's worth at least: the one the in-place copiers fall
		// back to when they cannot map the files.
		return max(1, u.readers) * u.perReader
	}
	return u.readers + stagingSlack
}

// ringReaders is how many readers a ring of n slots serves.
func (u uploadConfig) ringReaders(n int) int {
	if u.ownCopies {
		return min(u.readers, n/max(1, u.perReader))
	}
	return min(u.readers, n-stagingSlack)
}

// UploadReadersEnv and UploadInPlaceEnv override the staged upload's
// reader and in-place copier counts (a number; 0 in-place copiers means
// readers only, 0 readers in-place copiers only), so benchmarks can sweep
// them on one binary; UploadInPlaceUnitEnv (inplace.go) the copiers'
// unit, UploadPopulateEnv (0 or 1) whether their mappings are populated
// ahead. A cold page cache ignores them (see defaultUploadConfig).
const (
	UploadReadersEnv = "TRENI_CUDA_UPLOAD_READERS"
	UploadInPlaceEnv = "TRENI_CUDA_UPLOAD_INPLACE"
)

// UploadColdReadersEnv overrides how many readers read a cold page cache
// (a count from 1 to 64; coldReaders by default), so that storage's best
// queue depth can be measured on one binary (scripts/gpu-upload-sweep.sh
// with COLD=1). The ring is mapped before the residency is known, for the
// warm readers, so a cold upload runs at most as many readers as a warm
// one (uploadConfig.ringReaders).
const UploadColdReadersEnv = "TRENI_CUDA_UPLOAD_COLD_READERS"

// UploadFeedEnv chooses who enqueues the staged upload's copies: "reader"
// (each reader its own; the default) or "loop" (one copy loop beside the
// readers); UploadSlotsEnv the slots each reader alternates between (with
// "reader") and UploadSlotEnv the slot size in MiB. Warm or cold.
const (
	UploadFeedEnv  = "TRENI_CUDA_UPLOAD_FEED"
	UploadSlotsEnv = "TRENI_CUDA_UPLOAD_SLOTS_PER_READER"
	UploadSlotEnv  = "TRENI_CUDA_UPLOAD_SLOT_MB"
)

// defaultUploadConfig: from a warm page cache one reader copies at
// 4–5 GB/s, so approaching the 55 GB/s of a pinned H2D copy takes a dozen;
// two cores stay free for the backend's thread (kernel load, warm-up) and
// the copy thread. On the lent H100 host (16 cores) 8 readers reached
// 31 GB/s and 14 reached 35 GB/s. From storage (cold), more readers only
// interleave more streams on the disk: coldReaders read (8 read the
// 4B-shaped checkpoint at the disk's measured rate; 14 were not
// consistently faster in the eighteenth session's paired rounds), and a
// prefetch reads the front of the files while the driver initialises
// (coldPrefetch: the first token 187 ms sooner with 8 readers, 355 with
// 14, medians of 8 paired rounds on the lent H100; see
// docs/BENCHMARKS.md).
//
// In-place copiers are opt-in (UploadInPlaceEnv). On the 8 GB checkpoint,
// two of them, with the readers two cores fewer each and their mappings
// populated ahead, took the upload from 33–35 to 39–41 GB/s and the first
// token 11–55 ms sooner (on one host of nine, nothing). But until the
// background releases it (releaseInPlaceStep: at the server's first
// pause, or stagingForceAfter after it could start under steady load) the
// checkpoint's page cache stays page-locked and counts in the RSS: 8.7 GB
// instead of 0.65 when the server is healthy, and still in the RSS when a
// short session ends; and on the 1.2 GB checkpoint they lost
// (docs/BENCHMARKS.md).
func defaultUploadConfig(cold bool) uploadConfig {
	u := uploadConfig{readers: maxReaders(), unitMB: defaultInPlaceUnitMB, populate: true,
		ownCopies: true, perReader: 2, slotMB: stagingSlotBytes >> 20}
	if cold {
		u.readers, u.populate, u.prefetch = coldReaders, false, true
	}
	return u
}

// maxReaders is the most readers a warm upload runs by default (the ring
// holds perReader slots for each; ringSlots).
func maxReaders() int { return min(16, max(4, runtime.NumCPU()-2)) }

const coldReaders = 8

// resolveUploadConfig is defaultUploadConfig(cold) with the environment's
// overrides for a warm page cache. In-place copiers asked for without a
// reader count take two readers' cores each.
func resolveUploadConfig(cold bool) (uploadConfig, error) {
	t := defaultUploadConfig(cold)
	type count struct {
		env         string
		v           *int
		lo, hi, mul int
	}
	counts := func(cs ...count) error {
		for _, o := range cs {
			s := os.Getenv(o.env)
			if s == "" {
				continue
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < o.lo || n > o.hi || n%o.mul != 0 {
				return fmt.Errorf("cuda: %s=%q is not a count from %d to %d in steps of %d", o.env, s, o.lo, o.hi, o.mul)
			}
			*o.v = n
		}
		return nil
	}
	// flag reads a 0/1 setting into v; unset keeps the default.
	flag := func(env string, v *bool) error {
		switch s := os.Getenv(env); s {
		case "":
		case "0", "1":
			*v = s == "1"
		default:
			return fmt.Errorf("cuda: %s=%q is not 0 or 1", env, s)
		}
		return nil
	}
	// The ring's shape, warm or cold.
	if err := counts(count{UploadSlotEnv, &t.slotMB, 1, 256, 1}, count{UploadSlotsEnv, &t.perReader, 1, 8, 1}); err != nil {
		return t, err
	}
	switch v := os.Getenv(UploadFeedEnv); v {
	case "", "reader", "loop":
		t.ownCopies = v != "loop"
	default:
		return t, fmt.Errorf("cuda: %s=%q is not reader or loop", UploadFeedEnv, v)
	}
	if cold {
		if err := flag(ColdPrefetchEnv, &t.prefetch); err != nil {
			return t, err
		}
		return t, counts(count{UploadColdReadersEnv, &t.readers, 1, 64, 1})
	}
	t.unitMB = max(1, t.unitMB/t.slotMB) * t.slotMB // a whole number of slots
	if err := counts(count{UploadReadersEnv, &t.readers, 0, 64, 1}, count{UploadInPlaceEnv, &t.inPlace, 0, 16, 1},
		count{UploadInPlaceUnitEnv, &t.unitMB, t.slotMB, 4096, t.slotMB}); err != nil {
		return t, err
	}
	if t.inPlace > 0 && os.Getenv(UploadReadersEnv) == "" {
		t.readers = max(4, t.readers-2*t.inPlace)
	}
	if err := flag(UploadPopulateEnv, &t.populate); err != nil {
		return t, err
	}
	t.populate = t.populate && t.inPlace > 0
	if t.readers+t.inPlace == 0 {
		return t, fmt.Errorf("cuda: %s=0 and %s=0 leave no thread to upload the weights", UploadReadersEnv, UploadInPlaceEnv)
	}
	return t, nil
}

// planChunks cuts the copy jobs into reads of at most slot bytes: jobs of
// one file in file order, neighbours merged into one read when the gap
// between them is small, a tensor larger than a slot split across reads.
// Every byte of every job lands in exactly one piece. Every chunk starts
// at a multiple of align (the page size; it must divide slot), so that
// the pages of two chunks never overlap and the in-place copiers
// (inplace.go) can register each chunk's pages on its own: a chunk starts
// anew only in another file, after a gap longer than maxReadGap (at least
// a page) or where the last one filled its slot, which is aligned.
func planChunks(jobs []copyJob, slot, align int) []readChunk {
	js := append([]copyJob(nil), jobs...)
	sort.SliceStable(js, func(a, b int) bool {
		if js[a].file != js[b].file {
			return js[a].file < js[b].file
		}
		return js[a].off < js[b].off
	})
	var out []readChunk
	for _, j := range js {
		pos, rem, dst := j.off, j.n, j.dst
		for rem > 0 {
			var cur *readChunk
			if len(out) > 0 {
				cur = &out[len(out)-1]
			}
			end := int64(0)
			if cur != nil {
				end = cur.off + int64(cur.n)
			}
			if cur == nil || cur.file != j.file || pos < end || pos-end > maxReadGap || pos >= cur.off+int64(slot) {
				out = append(out, readChunk{file: j.file, off: pos &^ int64(align-1)})
				cur = &out[len(out)-1]
			}
			take := min(rem, int(cur.off+int64(slot)-pos))
			cur.pieces = append(cur.pieces, piece{at: int(pos - cur.off), n: take, dst: dst})
			cur.n = int(pos-cur.off) + take
			pos += int64(take)
			rem -= take
			dst += DevicePtr(take)
		}
	}
	return out
}

// stagingRing is page-aligned host memory cut into slots, mapped
// anonymously (never Go heap: it is page-locked for the copy engine).
type stagingRing struct {
	mem       []byte
	slotBytes int
}

// newStagingRing maps and pre-faults slots × slotBytes bytes (transparent
// huge pages where the kernel offers them, so pre-faulting and page-locking
// walk 512× fewer pages). It makes no CUDA call, so it can run while the
// driver initialises.
func newStagingRing(slots, slotBytes int) (*stagingRing, error) {
	n := slots * slotBytes
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map a %d MiB staging ring: %w", n>>20, err)
	}
	_ = unix.Madvise(mem, unix.MADV_HUGEPAGE) // advisory
	// Fault the pages in on several threads: the kernel zeroes them, which
	// is the ring's real cost.
	var wg sync.WaitGroup
	for s := 0; s < slots; s++ {
		wg.Add(1)
		go func(b []byte) {
			defer wg.Done()
			for i := 0; i < len(b); i += 4096 {
				b[i] = 0
			}
		}(mem[s*slotBytes : (s+1)*slotBytes])
	}
	wg.Wait()
	return &stagingRing{mem: mem, slotBytes: slotBytes}, nil
}

func (r *stagingRing) slots() int        { return len(r.mem) / r.slotBytes }
func (r *stagingRing) slot(i int) []byte { return r.mem[i*r.slotBytes : (i+1)*r.slotBytes] }

func (r *stagingRing) unmap() error {
	if r == nil || r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return err
}

// stagingLeft is what a staged upload leaves behind once its copies are
// done: the page-locked ring and the copy engine's streams, events and
// slot registrations.
type stagingLeft struct {
	ring    *stagingRing
	dma     *cudaDMA       // nil until the upload thread made it
	inPlace []*cudaInPlace // the in-place copiers, with their registrations
	maps    fileMaps       // the files' mappings they registered in
}

// releaseStaging releases what the staged upload left, once (runner
// thread; b.mu held, or the backend not yet published): the ring, the
// copy engine's streams and slot registrations, the in-place copiers'
// registrations and then the mappings they lie in. Unregistering the
// slots and destroying the streams took 6–8 ms on the H100, and once
// 40 ms (2026-11-26, docs/BENCHMARKS.md), between the last weight copy
// and a ready backend; they now run as the background warm-up's "staging"
// item (WarmBackground), the in-place registrations as its last,
// "inplace" items (releaseInPlaceStep), or all in free.
func (b *Backend) releaseStaging() error {
	err := b.releaseRing()
	_, err2 := b.releaseInPlaceStep(math.MaxInt64)
	return errors.Join(err, err2)
}

// releaseRing releases the ring and the copy engine's streams and slot
// registrations.
func (b *Backend) releaseRing() error {
	for {
		if done, err := b.releaseRingStep(); done || err != nil {
			return err
		}
	}
}

// releaseRingStep releases the next part of the ring (a "staging"
// background item): the copy engine's streams and events, then one
// page-locked slot, then the mapping; it says whether the ring is gone.
// Released in one item the ring held the runner thread for 7–12 ms on the
// H100, and a request arriving meanwhile waited that long (sixteenth
// session); a slot's unregistering is a fraction of it.
func (b *Backend) releaseRingStep() (bool, error) {
	st := b.staging
	if st == nil {
		return true, nil
	}
	if st.dma != nil {
		if st.dma.releaseNext() {
			return false, nil
		}
		st.dma = nil
	}
	return true, errors.Join(st.ring.unmap(), b.forgetStaging())
}

// ringItems is how many "staging" background items release the ring
// (releaseRingStep): the copy engine's streams and events, each
// page-locked slot, and the mapping.
func (st *stagingLeft) ringItems() int {
	n := 1 // the mapping
	if st.dma != nil {
		n += st.dma.pieces()
	}
	return n
}

// forgetStaging unmaps the in-place mappings and drops b.staging once the
// ring and every in-place registration are released (releaseRing,
// releaseInPlaceStep), whichever went last.
func (b *Backend) forgetStaging() error {
	st := b.staging
	if (st.ring != nil && st.ring.mem != nil) || len(st.inPlace) > 0 {
		return nil
	}
	b.staging = nil
	return st.maps.unmap()
}

// The in-place copiers' registrations (~6 GB of a 4B-shaped checkpoint)
// took ~55 ms to unregister on an idle server and 120–175 ms on one
// serving a burst, which that work stalled (docs/BENCHMARKS.md). So the
// background releases them stagingReleaseBytes at a time, each step only
// once the steps have paused for stagingQuiet: a burst is not stalled, a
// request arriving during a step waits for that step only, and the
// process's RSS (the registered file pages count while mapped) falls back
// at the first pause. A server under steady load from its start never
// pauses: stagingForceAfter after the first step could have run, the
// steps run between two steps anyway, at most one every stagingForceGap,
// so the page cache is unpinned within a bounded time at the cost of a
// short stall a step (inPlaceWait).
const (
	stagingReleaseBytes = 512 << 20
	stagingQuiet        = 100 * time.Millisecond
	stagingForceAfter   = 2 * time.Second
	stagingForceGap     = 250 * time.Millisecond
)

// inPlaceWait is how much longer an in-place release step waits, now,
// given when the steps last finished (lastDone), when the first release
// step became due (due) and when the last one ended (last, zero for
// none): until the steps have paused for stagingQuiet, or, from
// stagingForceAfter after due, until stagingForceGap after the last
// step. 0 or less: run it (once no step is pending); forced then says it
// runs by the deadline, without a pause.
func inPlaceWait(now, lastDone, due, last time.Time) (wait time.Duration, forced bool) {
	quiet := stagingQuiet - now.Sub(lastDone)
	switch {
	case now.Sub(due) < stagingForceAfter:
		wait = min(quiet, stagingForceAfter-now.Sub(due))
	case last.IsZero():
		wait = 0
	default:
		wait = min(quiet, stagingForceGap-now.Sub(last))
	}
	return wait, quiet > 0
}

// releaseInPlaceStep unregisters in-place ranges until budget bytes have
// gone and reports whether none is left.
func (b *Backend) releaseInPlaceStep(budget int64) (done bool, err error) {
	st := b.staging
	if st == nil {
		return true, nil
	}
	var errs []error
	for len(st.inPlace) > 0 && budget > 0 {
		e := st.inPlace[0]
		n, err := e.unregister(budget)
		errs = append(errs, err)
		budget -= n
		if len(e.registered) == 0 {
			errs = append(errs, e.release())
			st.inPlace = st.inPlace[1:]
		}
	}
	if len(st.inPlace) > 0 {
		return false, errors.Join(errs...)
	}
	return true, errors.Join(append(errs, b.forgetStaging())...)
}

// inPlaceItems is how many "inplace" background items release st's
// in-place registrations, one releaseInPlaceStep of stagingReleaseBytes
// each (0 without copiers).
func (st *stagingLeft) inPlaceItems() int {
	var n int64
	for _, e := range st.inPlace {
		for _, r := range e.registered {
			n += int64(len(r))
		}
	}
	return int((n + stagingReleaseBytes - 1) / stagingReleaseBytes)
}

// dmaEngine is what the staged pipeline needs from the device: prepare a
// slot once, before its first copy (the CUDA engine page-locks it then, so
// registering the ring costs no time before the first read: slot by slot,
// while the readers fill the others), enqueue a copy of src (inside a
// slot) to dst on one of two streams, fence a slot after its copies, and
// wait for a slot's fence before the slot is refilled. The CUDA
// implementation enqueues asynchronous copies and events; tests use one
// that performs the copies only when the fence is waited for, so a slot
// refilled too early shows up as corrupt weights.
type dmaEngine interface {
	prepare(slot int) error
	copy(stream int, dst DevicePtr, src []byte) error
	fence(slot, stream int) error
	wait(slot int) error
}

// stagedStats is what a staged upload did, and where its time went: if
// the copy loop mostly waited for reads (readWait), reading the files is
// the limit; if it mostly waited for slots to drain (fenceWait), the copy
// engine is.
type stagedStats struct {
	chunks    int
	readBytes int64 // bytes read from the files, gaps included
	// readBusy is the readers' time inside read calls, summed over readers.
	readBusy time.Duration
	// readIdle is the readers' time without a read under way, summed over
	// readers, from the first read to the last copy's fence: waiting for
	// the copy loop to hand them the next chunk and slot (or, enqueueing
	// their own copies, for a slot's copies, page-locking it and
	// enqueueing), and the end.
	readIdle time.Duration
	// readWait and fenceWait are the copy loop's time blocked on a read
	// result and on a slot's copies; prepare is its time registering slots
	// (with readers that copy their own chunks, the mean reader's time
	// reading, waiting for its slots' copies and registering them).
	readWait, fenceWait, prepare time.Duration
}

// attrs are the stats as stage attributes (ms, GB/s per reader).
func (st stagedStats) attrs() map[string]any {
	perReader := 0.0
	if st.readBusy > 0 {
		perReader = gbPerS(st.readBytes, st.readBusy)
	}
	return map[string]any{"read_busy_ms": durMS(st.readBusy), "read_idle_ms": durMS(st.readIdle), "read_gb_per_s_per_reader": perReader,
		trace.AttrReadWaitMS: durMS(st.readWait), trace.AttrCopyWaitMS: durMS(st.fenceWait), "slot_register_ms": durMS(st.prepare)}
}

// runStaged takes chunks from the front of q until it is empty, reads each
// into the ring with up to feed.readers readers and hands each filled slot
// to dma (the readers themselves, or one copy loop: readerFeed); a slot is
// reused only after its fence has been waited for. It opens q's back end
// once every slot in use is prepared, or when it returns. It returns when
// every copy has been fenced and waited for, or at the first error (after
// the readers have stopped, and after closing q so that the in-place
// copiers stop too); ctx ending is such an error, seen by each reader
// before its next chunk.
func runStaged(ctx context.Context, chunks []readChunk, q *chunkQueue, ring *stagingRing, feed readerFeed, dma dmaEngine) (st stagedStats, err error) {
	defer func() {
		if err != nil {
			q.close()
		}
		q.openBack()
	}()
	if len(chunks) == 0 {
		return st, nil
	}
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, c := range chunks {
		if _, ok := files[c.file]; ok {
			continue
		}
		f, err := os.Open(c.file)
		if err != nil {
			return st, fmt.Errorf("open weight file for upload: %w", err)
		}
		files[c.file] = f
	}
	read := func(c readChunk, dst []byte) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("upload weights: %w", err)
		}
		if _, err := files[c.file].ReadAt(dst, c.off); err != nil {
			return fmt.Errorf("read %s at %d (%d bytes): %w", c.file, c.off, c.n, err)
		}
		return nil
	}
	if feed.ownCopies {
		return stageOwnCopies(chunks, q, ring, feed, read, dma)
	}
	return stageCopyLoop(chunks, q, ring, feed.readers, read, dma)
}

// readerFeed is how the staged upload's readers are fed and who copies
// what they read: with ownCopies each of readers enqueues its own chunks'
// copies (stageOwnCopies), alternating between perReader slots of its own,
// on a thread that thread starts (one where the context is current;
// contextThread); otherwise one copy loop does (stageCopyLoop).
type readerFeed struct {
	readers, perReader int
	ownCopies          bool
	thread             func(f func() error) <-chan error
}

// stageOwnCopies: every reader reads a chunk into one of its slots,
// enqueues that chunk's copies on its own stream and fences the slot, then
// takes the next chunk into its next slot, waiting first for that slot's
// previous copies. No thread stands between a read and its copy. With one
// copy loop beside the readers (stageCopyLoop), on the lent H100 the copy
// engine sat idle 18% of the 4B upload in gaps between copies while the
// readers, ~15% of their time, waited for the loop to hand them their next
// chunk (docs/BENCHMARKS.md). The slots are page-locked by their readers
// at first use.
func stageOwnCopies(chunks []readChunk, q *chunkQueue, ring *stagingRing, feed readerFeed, read func(readChunk, []byte) error, dma dmaEngine) (stagedStats, error) {
	per := max(1, min(feed.perReader, ring.slots()))
	readers := max(1, min(feed.readers, ring.slots()/per))
	var unprepared atomic.Int32
	unprepared.Store(int32(readers * per))
	var failed atomic.Bool // the first error stops the other readers
	stats := make([]stagedStats, readers)
	done := make([]<-chan error, readers)
	start := time.Now()
	for r := range readers {
		st := &stats[r]
		done[r] = feed.thread(func() (err error) {
			defer func() {
				if err != nil {
					failed.Store(true)
				}
			}()
			filled := make([]bool, per)
			for n := 0; !failed.Load(); n++ {
				i, ok := q.takeFront()
				if !ok {
					break
				}
				k := n % per
				slot := r*per + k
				if filled[k] {
					t := time.Now()
					if err := dma.wait(slot); err != nil {
						return err
					}
					st.fenceWait += time.Since(t)
				}
				c := chunks[i]
				buf := ring.slot(slot)
				t := time.Now()
				if err := read(c, buf[:c.n]); err != nil {
					return err
				}
				st.readBusy += time.Since(t)
				if !filled[k] {
					t := time.Now()
					if err := dma.prepare(slot); err != nil {
						return err
					}
					st.prepare += time.Since(t)
					if unprepared.Add(-1) == 0 {
						q.openBack()
					}
				}
				for _, p := range c.pieces {
					if err := dma.copy(r, p.dst, buf[p.at:p.at+p.n]); err != nil {
						return fmt.Errorf("upload weights: %w", err)
					}
				}
				if err := dma.fence(slot, r); err != nil {
					return err
				}
				filled[k] = true
				st.chunks++
				st.readBytes += int64(c.n)
			}
			// This reader's last copies, before its slots may be unmapped.
			t := time.Now()
			for k, f := range filled {
				if f {
					if err := dma.wait(r*per + k); err != nil {
						return err
					}
				}
			}
			st.fenceWait += time.Since(t)
			return nil
		})
	}
	var errs []error
	for _, d := range done {
		errs = append(errs, <-d)
	}
	var st stagedStats
	for _, s := range stats {
		st.chunks += s.chunks
		st.readBytes += s.readBytes
		st.readBusy += s.readBusy
		st.fenceWait += s.fenceWait
		st.prepare += s.prepare
	}
	st.readIdle = max(0, time.Duration(readers)*time.Since(start)-st.readBusy)
	// The upload's split as the copy loop's was, in wall-clock time: the
	// mean reader's time in reads (what the copies waited for: a cold
	// page cache shows here), in waiting for its slots' copies, and in
	// page-locking them.
	n := time.Duration(readers)
	st.readWait, st.fenceWait, st.prepare = st.readBusy/n, st.fenceWait/n, st.prepare/n
	return st, errors.Join(errs...)
}

// stageCopyLoop: one copy loop hands each reader its next chunk and a
// slot, enqueues the copies of what they read on two streams, and waits
// for the oldest copies when no slot is free (UploadFeedEnv=loop).
func stageCopyLoop(chunks []readChunk, q *chunkQueue, ring *stagingRing, readers int, read func(readChunk, []byte) error, dma dmaEngine) (st stagedStats, err error) {
	type job struct{ chunk, slot int }
	type done struct {
		job
		err  error
		took time.Duration
	}
	nslots := ring.slots()
	readers = max(1, min(readers, nslots))
	start := time.Now()
	jobs := make(chan job)
	results := make(chan done, nslots)
	var wg sync.WaitGroup
	for w := 0; w < readers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				c := chunks[j.chunk]
				t := time.Now()
				err := read(c, ring.slot(j.slot)[:c.n])
				results <- done{j, err, time.Since(t)}
			}
		}()
	}
	// The readers are owned here: stop them on every return, the error
	// paths included. results has room for one result per slot and at most
	// one read per slot is in flight, so a reader never blocks on sending
	// and stop's Wait returns once the reads under way have ended — before
	// the caller may unmap the ring they write into.
	closed := false
	stop := func() {
		if !closed {
			close(jobs)
			closed = true
		}
		wg.Wait()
	}
	defer stop()

	free := make([]int, 0, nslots)
	for s := nslots - 1; s >= 0; s-- {
		free = append(free, s)
	}
	var fenced []int // slots whose copies are enqueued, oldest first
	prepared, unprepared := make([]bool, nslots), nslots
	reading := 0
	for {
		// Keep every reader busy. A reader without a free slot takes the
		// oldest fenced one once its copies are done: they were enqueued
		// first, so they finish first. Slots are conserved (free + fenced
		// + reading), so with no read under way there is always one.
		for reading < readers && (len(free) > 0 || len(fenced) > 0) {
			if len(free) == 0 {
				s := fenced[0]
				t := time.Now()
				if err := dma.wait(s); err != nil {
					return st, err
				}
				st.fenceWait += time.Since(t)
				fenced = fenced[1:]
				free = append(free, s)
			}
			i, ok := q.takeFront()
			if !ok {
				break
			}
			s := free[len(free)-1]
			free = free[:len(free)-1]
			jobs <- job{i, s}
			reading++
		}
		if reading == 0 {
			break // the queue is empty and every read is copied
		}
		t := time.Now()
		d := <-results
		st.readWait += time.Since(t)
		st.readBusy += d.took
		reading--
		if d.err != nil {
			return st, d.err
		}
		if !prepared[d.slot] {
			t := time.Now()
			if err := dma.prepare(d.slot); err != nil {
				return st, err
			}
			st.prepare += time.Since(t)
			prepared[d.slot] = true
			if unprepared--; unprepared == 0 {
				q.openBack()
			}
		}
		c := chunks[d.chunk]
		stream := d.chunk % 2
		buf := ring.slot(d.slot)
		for _, p := range c.pieces {
			if err := dma.copy(stream, p.dst, buf[p.at:p.at+p.n]); err != nil {
				return st, fmt.Errorf("upload weights: %w", err)
			}
		}
		if err := dma.fence(d.slot, stream); err != nil {
			return st, err
		}
		fenced = append(fenced, d.slot)
		st.chunks++
		st.readBytes += int64(c.n)
	}
	t := time.Now()
	for _, s := range fenced {
		if err := dma.wait(s); err != nil {
			return st, err
		}
	}
	st.fenceWait += time.Since(t)
	st.readIdle = max(0, time.Duration(readers)*time.Since(start)-st.readBusy)
	return st, nil
}

// cudaDMA is dmaEngine on two streams of a context, with one event per
// slot, page-locking each slot of the ring on its first use. Its methods
// run on threads where the context is current, each slot's (and each
// stream's) on one thread at a time.
type cudaDMA struct {
	c       *Context
	ring    *stagingRing
	streams []*Stream
	events  []*Event
	// prepared and registered: each slot's, written only by the thread
	// that fills the slot (slots are not shared between readers).
	prepared, registered []bool
}

// newCudaDMA makes the engine's streams (at least two) and an event per
// slot of the ring.
func newCudaDMA(c *Context, ring *stagingRing, streams int) (*cudaDMA, error) {
	slots := ring.slots()
	d := &cudaDMA{c: c, ring: ring, prepared: make([]bool, slots), registered: make([]bool, slots)}
	for range max(2, streams) {
		s, err := c.NewStream()
		if err != nil {
			d.destroy()
			return nil, err
		}
		d.streams = append(d.streams, s)
	}
	for i := 0; i < slots; i++ {
		e, err := c.NewEvent()
		if err != nil {
			d.destroy()
			return nil, err
		}
		d.events = append(d.events, e)
	}
	return d, nil
}

// prepare page-locks the slot, so its copies run at full bandwidth and
// asynchronously; if the driver refuses, the copies still work from
// pageable memory (slower), and allRegistered says so.
func (d *cudaDMA) prepare(slot int) error {
	b := d.ring.slot(slot)
	d.registered[slot] = d.c.HostRegister(unsafe.Pointer(&b[0]), len(b), false) == nil
	d.prepared[slot] = true
	return nil
}

// allRegistered reports whether every slot used was page-locked (once
// the upload's threads are done).
func (d *cudaDMA) allRegistered() bool {
	for i, p := range d.prepared {
		if p && !d.registered[i] {
			return false
		}
	}
	return true
}

func (d *cudaDMA) copy(stream int, dst DevicePtr, src []byte) error {
	if stream < 0 || stream >= len(d.streams) {
		return fmt.Errorf("upload: copy on stream %d of %d (internal error)", stream, len(d.streams))
	}
	return d.streams[stream].CopyHtoDAsync(dst, unsafe.Pointer(&src[0]), len(src))
}

func (d *cudaDMA) fence(slot, stream int) error {
	if stream < 0 || stream >= len(d.streams) {
		return fmt.Errorf("upload: fence on stream %d of %d (internal error)", stream, len(d.streams))
	}
	return d.events[slot].Record(d.streams[stream])
}

func (d *cudaDMA) wait(slot int) error { return d.events[slot].Synchronize() }

func (d *cudaDMA) destroy() {
	for d.releaseNext() {
	}
}

// releaseNext releases the next of the engine's resources — its streams
// and events together, then one page-locked slot at a time — and says
// whether there was one.
func (d *cudaDMA) releaseNext() bool {
	if d.streams != nil || d.events != nil {
		for _, s := range d.streams {
			s.Synchronize()
			s.Destroy()
		}
		d.streams = nil
		for _, e := range d.events {
			e.Destroy()
		}
		d.events = nil
		return true
	}
	for i, r := range d.registered {
		if r {
			b := d.ring.slot(i)
			d.c.HostUnregister(unsafe.Pointer(&b[0]))
			d.registered[i] = false
			return true
		}
	}
	return false
}

// pieces is how many releaseNext calls release the engine.
func (d *cudaDMA) pieces() int {
	n := 0
	if d.streams != nil || d.events != nil {
		n++
	}
	for _, r := range d.registered {
		if r {
			n++
		}
	}
	return n
}
