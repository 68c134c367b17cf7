package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/treni-top/treni-top/engine/memstat"
	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/trace"
)

// Sleep mode on the CUDA backend (docs/ARCHITECTURE.md, "Sleep and wake").
// With BackendOptions.SleepMode the weights and the KV pool live in
// ranges of the driver's virtual memory API (vmm.go):
//   - level 1 copies the weights into page-locked host memory and gives
//     both ranges' device memory back; a wake maps new memory at the same
//     addresses and copies the weights back, chunk by chunk as it maps
//     them, while the KV pool is mapped and zeroed beside the copies;
//   - level 2 gives the device memory back and keeps no copy; a wake maps
//     it again and reads the weights from the checkpoint's files through
//     the staged upload (upload.go), after checking they are the files
//     that were loaded.
//
// The context, the kernels' module, the cuBLASLt handle and workspace, the
// step scratch, the norm weights and biases (a few hundred KB) and the
// captured decode graphs stay: the graphs hold addresses in the ranges,
// which a wake keeps, so nothing is captured again.

// ErrAsleep is returned (wrapped) by Forward, ForwardTokens and CopyBlocks
// while the backend sleeps.
var ErrAsleep = errors.New("cuda: backend is asleep (sleep mode); wake it first")

// SleepHostEnv says what becomes of the level-1 host copy of the weights
// once they are back on the device: "keep" (the default) keeps the
// page-locked buffer for the next sleep, which then only copies; "release"
// frees it at every wake (every level-1 sleep allocates it again). Page-
// locking a 4B-shaped checkpoint's 8 GB costs more than copying it; see
// docs/BENCHMARKS.md for the figures.
const SleepHostEnv = "TRENI_CUDA_SLEEP_HOST"

// sleepState is the backend's sleep mode.
type sleepState struct {
	weights, kv *vmmRegion // the ranges (SleepMode); nil otherwise
	host        *hostCopy  // the level-1 copy of the weights, page-locked
	level       int        // the current sleep's level; 0 awake
	// weightsAsleep and kvAsleep: the part's device memory is given back.
	weightsAsleep, kvAsleep bool
}

func (s *sleepState) asleep() bool { return s.weightsAsleep || s.kvAsleep }

var _ sched.Sleeper = (*Backend)(nil)

// allocWeights allocates the weights' n bytes: a range of its own in sleep
// mode (on a level-2 wake, the range already there, which must be as
// large), else plain device memory (runner thread).
func (b *Backend) allocWeights(n int64) (DevicePtr, error) {
	if !b.opts.SleepMode {
		return b.c.Alloc(int(n))
	}
	if r := b.sl.weights; r != nil {
		if int64(r.size) != n {
			return 0, fmt.Errorf("the checkpoint's weights now take %d bytes, %d when it was loaded; restart the server", n, r.size)
		}
		return r.base, nil
	}
	r, err := b.c.reserveVMM(int(n))
	if err != nil {
		return 0, err
	}
	b.sl.weights = r
	return r.base, nil
}

// allocKVMem allocates the KV pool's n bytes, a range of its own in sleep
// mode (runner thread).
func (b *Backend) allocKVMem(n int64) (DevicePtr, error) {
	if !b.opts.SleepMode {
		return b.c.Alloc(int(n))
	}
	r, err := b.c.reserveVMM(int(n))
	if err != nil {
		return 0, err
	}
	b.sl.kv = r
	return r.base, nil
}

// freeSleep releases the ranges and the host copy (free, runner thread);
// the DevicePtr fields that pointed at the ranges are cleared so that
// free does not cuMemFree them.
func (b *Backend) freeSleep() error {
	var errs []error
	if r := b.sl.weights; r != nil {
		errs = append(errs, r.free())
		b.sl.weights, b.weights = nil, 0
	}
	if r := b.sl.kv; r != nil {
		errs = append(errs, r.free())
		b.sl.kv, b.kv = nil, 0
	}
	errs = append(errs, b.dropHostCopy())
	return errors.Join(errs...)
}

// dropHostCopy frees the level-1 host copy, if any (runner thread).
func (b *Backend) dropHostCopy() error {
	h := b.sl.host
	b.sl.host = nil
	return h.free(b.c)
}

// hostCopy is the level-1 copy of the weights: anonymous memory (huge
// pages where the kernel gives them), faulted in by every core and
// page-locked chunk by chunk with cuMemHostRegister, each chunk's copy
// enqueued as soon as it is locked. cuMemHostAlloc took 4.6 s for the
// 4B shape's 8 GB on the lent H200 (and 475 ms a GiB in doctor --floors),
// where faulting in on 14 threads and registering run at 13 and 19 GB/s
// (the staging ring's allocation, the floors' cuMemHostRegister).
type hostCopy struct {
	mem        []byte
	registered []bool // per chunk of hostCopyChunk bytes
}

// hostCopyChunk is the unit a first level-1 sleep faults in and locks.
const hostCopyChunk = 256 << 20

// chunks is how many hostCopyChunk units h holds.
func (h *hostCopy) chunks() int { return len(h.registered) }

// span is chunk i's bytes.
func (h *hostCopy) span(i int) []byte {
	return h.mem[i*hostCopyChunk : min((i+1)*hostCopyChunk, len(h.mem))]
}

// each calls f with the pieces of [lo, lo+n) cut at the chunks' bounds:
// a copy stays inside one cuMemHostRegister'd range, which the driver
// copies from asynchronously at full speed.
func (h *hostCopy) each(lo, n int, f func(lo, n int) error) error {
	for end := lo + n; lo < end; {
		m := min(end, (lo/hostCopyChunk+1)*hostCopyChunk) - lo
		if err := f(lo, m); err != nil {
			return err
		}
		lo += m
	}
	return nil
}

// free unlocks and unmaps the copy.
func (h *hostCopy) free(c *Context) error {
	if h == nil {
		return nil
	}
	var errs []error
	for i, r := range h.registered {
		if r {
			errs = append(errs, c.HostUnregister(unsafe.Pointer(&h.span(i)[0])))
		}
	}
	errs = append(errs, unix.Munmap(h.mem))
	return errors.Join(errs...)
}

// copyToHost copies the weights into the host copy, making it first when
// there is none (runner thread): then every core faults the chunks in, in
// order, ahead of this thread, which page-locks each chunk and enqueues its
// copy while the next ones are faulted in.
func (b *Backend) copyToHost(attrs trace.Attrs) error {
	n := int(b.weightsBytes)
	h := b.sl.host
	if h != nil {
		attrs["host_alloc_ms"], attrs["host_reused"] = 0.0, true
		if err := h.each(0, n, func(lo, m int) error {
			return b.s.CopyDtoHAsync(unsafe.Pointer(&h.mem[lo]), b.weights+DevicePtr(lo), m)
		}); err != nil {
			return err
		}
		return b.s.Synchronize()
	}
	ta := time.Now()
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("cuda: a host copy of the weights for a level-1 sleep (%d bytes; sleep at level 2 to keep none): %w", n, err)
	}
	_ = unix.Madvise(mem, unix.MADV_HUGEPAGE) // advisory: 512× fewer pages to fault in and lock
	h = &hostCopy{mem: mem, registered: make([]bool, (n+hostCopyChunk-1)/hostCopyChunk)}
	b.sl.host = h
	// Fault the chunks in, in order, on every core.
	ready := make([]chan struct{}, h.chunks())
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	stop := make(chan struct{})
	faulted := make(chan struct{})
	go func() {
		defer close(faulted)
		workers := max(1, runtime.NumCPU())
		for i := range h.chunks() {
			select {
			case <-stop:
				return
			default:
			}
			sp := h.span(i)
			part := max(4096, (len(sp)/workers+4095)&^4095)
			var wg sync.WaitGroup
			for lo := 0; lo < len(sp); lo += part {
				wg.Add(1)
				go func(p []byte) {
					defer wg.Done()
					for j := 0; j < len(p); j += 4096 {
						p[j] = 0
					}
				}(sp[lo:min(lo+part, len(sp))])
			}
			wg.Wait()
			close(ready[i])
		}
	}()
	defer func() { close(stop); <-faulted }()
	var registerMS float64
	locked := 0
	for i := range h.chunks() {
		<-ready[i]
		sp := h.span(i)
		tr := time.Now()
		if b.c.HostRegister(unsafe.Pointer(&sp[0]), len(sp), false) == nil {
			h.registered[i] = true
			locked++
		} // else copied from pageable memory: slower, still right
		registerMS += msSince(tr)
		if err := b.s.CopyDtoHAsync(unsafe.Pointer(&sp[0]), b.weights+DevicePtr(i*hostCopyChunk), len(sp)); err != nil {
			return err
		}
	}
	err = b.s.Synchronize()
	attrs["host_alloc_ms"], attrs["host_register_ms"], attrs["host_locked_chunks"], attrs["host_chunks"] = msSince(ta), registerMS, locked, h.chunks()
	return err
}

// waitBackground waits for the background warm-up to end (it may still
// run items, capture graphs or warm cuBLASLt on the weights); the caller
// must not hold b.mu.
func (b *Backend) waitBackground() {
	b.mu.Lock()
	done := b.bgDone
	b.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Sleep gives the device memory of the weights and the KV pool back
// (sched.Sleeper); level 1 keeps a page-locked host copy of the weights.
// It first waits for the background warm-up to end.
func (b *Backend) Sleep(_ context.Context, level int) ([]sched.Phase, error) {
	if !b.opts.SleepMode {
		return nil, errors.New("cuda: this backend was not started in sleep mode (serve --enable-sleep-mode)")
	}
	if level != sched.SleepLevel1 && level != sched.SleepLevel2 {
		return nil, fmt.Errorf("cuda: sleep level %d: use 1 (keep the weights in host memory) or 2 (drop them)", level)
	}
	b.waitBackground()
	release, err := b.acquire()
	if err != nil {
		return nil, err
	}
	defer release()
	var ph sched.Phase
	err = b.r.Do(context.Background(), func() error {
		var err error
		ph, err = b.sleep(level)
		return err
	})
	if err != nil {
		return nil, err
	}
	return []sched.Phase{ph}, nil
}

// sleep is Sleep on the runner thread.
func (b *Backend) sleep(level int) (sched.Phase, error) {
	t0 := time.Now()
	attrs := trace.Attrs{"level": level, "weights_bytes": b.weightsBytes, "kv_bytes": b.kvBytes}
	ph := sched.Phase{Stage: trace.StageSleep, Start: t0, Attrs: attrs}
	free0, _, err := b.c.MemInfo()
	if err != nil {
		return ph, err
	}
	if err := b.c.Synchronize(); err != nil {
		return ph, err
	}
	if level == sched.SleepLevel1 {
		attrs["weights"] = "copied to page-locked host memory"
		tc := time.Now()
		if err := b.copyToHost(attrs); err != nil {
			return ph, err
		}
		attrs["d2h_ms"], attrs["d2h_gb_per_s"] = msSince(tc), gbPerS(b.weightsBytes, time.Since(tc))
	} else {
		attrs["weights"] = "dropped (a wake reads the weight files)"
		if err := b.dropHostCopy(); err != nil {
			return ph, err
		}
	}
	if err := b.sl.weights.unback(); err != nil {
		return ph, err
	}
	b.sl.level, b.sl.weightsAsleep = level, true
	if err := b.sl.kv.unback(); err != nil {
		return ph, err
	}
	b.sl.kvAsleep = true
	free1, total, err := b.c.MemInfo()
	if err != nil {
		return ph, err
	}
	attrs["device_freed_bytes"] = int64(free1) - int64(free0)
	attrs["device_used_bytes"] = int64(total - free1) // every process on the device
	for k, v := range b.keptAttrs() {
		attrs[k] = v
	}
	addRSS(attrs)
	ph.End = time.Now()
	return ph, nil
}

// keptAttrs name what a sleep leaves on the device, where the backend
// knows its size: the step scratch, the norm weights and biases, the
// cuBLASLt workspace, and how many decode graphs are kept. The context,
// the module and what the driver and cuBLASLt hold themselves are the
// rest of the process's device memory (NVML's per-process figure).
func (b *Backend) keptAttrs() trace.Attrs {
	scratch := b.capScratch + b.capRows*(b.cfg.VocabSize*4+sampleDeviceBytesPerRow) + b.capMeta*4
	if b.capT > 0 {
		for _, n := range b.scratchSizes(b.capT) {
			scratch += n
		}
	}
	a := trace.Attrs{"kept_step_scratch_bytes": scratch, "kept_norms_bytes": b.smallsBytes, "graphs_kept": len(b.graphs)}
	if b.blas != nil {
		a["kept_cublaslt_workspace_bytes"] = BLASWorkspace
	}
	return a
}

// Asleep says which parts sleep (sched.Sleeper).
func (b *Backend) Asleep() (weights, kv bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sl.weightsAsleep, b.sl.kvAsleep
}

// Wake maps device memory at the weights' and the KV pool's addresses
// again and restores them (sched.Sleeper): the weights from the host copy
// (level 1) or the files (level 2), the KV pool zeroed.
func (b *Backend) Wake(_ context.Context, weights, kv bool) ([]sched.Phase, error) {
	b.pending.Add(1)
	b.mu.Lock()
	defer func() {
		b.lastDone.Store(time.Now().UnixNano())
		b.mu.Unlock()
		b.pending.Add(-1)
	}()
	if b.closed {
		return nil, ErrClosed
	}
	weights, kv = weights && b.sl.weightsAsleep, kv && b.sl.kvAsleep
	if !weights && !kv {
		return nil, nil
	}
	var phases []sched.Phase
	err := b.r.Do(context.Background(), func() error {
		var err error
		phases, err = b.wake(weights, kv)
		return err
	})
	return phases, err
}

// wake is Wake on the runner thread. The copies, the KV pool's zeroing and
// two events go on the compute stream, so a wake of both parts creates and
// maps memory while the copies already run; each stage ends where its
// event says its last device work ended.
func (b *Backend) wake(weights, kv bool) ([]sched.Phase, error) {
	t0 := time.Now()
	start, err := b.c.NewEvent()
	if err != nil {
		return nil, err
	}
	defer start.Destroy()
	if err := start.Record(b.s); err != nil {
		return nil, err
	}
	// at is when the device work before ev ended, on the host's clock.
	at := func(ev *Event) time.Time {
		ms, err := ElapsedMS(start, ev)
		if err != nil {
			return time.Now()
		}
		return t0.Add(time.Duration(float64(ms) * float64(time.Millisecond)))
	}
	var phases []sched.Phase
	var wEv, kEv *Event
	var wAttrs, kAttrs trace.Attrs
	var tk time.Time
	if weights {
		if wAttrs, err = b.restoreWeights(); err != nil {
			return phases, err
		}
		if wEv, err = b.c.NewEvent(); err != nil {
			return phases, err
		}
		defer wEv.Destroy()
		if err := wEv.Record(b.s); err != nil {
			return phases, err
		}
	}
	if kv {
		tk = time.Now()
		if err := b.sl.kv.back(nil); err != nil {
			return phases, fmt.Errorf("cuda: map the KV pool again (%d bytes): %w", b.kvBytes, err)
		}
		kAttrs = trace.Attrs{"blocks": b.opts.NumBlocks, "block_size": b.opts.BlockSize, "bytes": b.kvBytes, "level": b.sl.level, "map_ms": msSince(tk)}
		// Zeroed, as at startup: graph padding rows attend to block 0.
		if err := b.s.Memset8Async(b.kv, 0, int(b.kvBytes)); err != nil {
			return phases, err
		}
		if kEv, err = b.c.NewEvent(); err != nil {
			return phases, err
		}
		defer kEv.Destroy()
		if err := kEv.Record(b.s); err != nil {
			return phases, err
		}
	}
	if err := b.s.Synchronize(); err != nil {
		return phases, err
	}
	if weights {
		b.sl.weightsAsleep = false
		end := later(at(wEv), t0)
		wAttrs["gb_per_s"] = gbPerS(b.weightsBytes, end.Sub(t0))
		addRSS(wAttrs)
		phases = append(phases, sched.Phase{Stage: trace.StageWeightsRestore, Start: t0, End: end, Attrs: wAttrs})
	}
	if kv {
		b.sl.kvAsleep = false
		phases = append(phases, sched.Phase{Stage: trace.StageKVAlloc, Start: tk, End: later(at(kEv), tk), Attrs: kAttrs})
	}
	if !b.sl.asleep() {
		lvl := b.sl.level
		b.sl.level = 0
		if b.sl.host != nil && os.Getenv(SleepHostEnv) == "release" {
			if err := b.dropHostCopy(); err != nil {
				return phases, err
			}
		}
		if n := len(b.graphs); n > 0 {
			// Nothing to capture: the graphs' addresses are the ranges'.
			now := time.Now()
			phases = append(phases, sched.Phase{Stage: trace.StageGraphCapture, Start: now, End: now,
				Attrs: trace.Attrs{"graphs_kept": n, "recaptured": 0, "level": lvl, "how": "kept: the weights and the KV pool are back at the addresses the graphs were captured with"}})
		}
	}
	return phases, nil
}

// restoreWeights maps the weights' range again and enqueues, or runs, the
// weights' way back (runner thread).
func (b *Backend) restoreWeights() (trace.Attrs, error) {
	attrs := trace.Attrs{"bytes": b.weightsBytes, "level": b.sl.level}
	if b.sl.level == sched.SleepLevel1 {
		// Each chunk's copy is enqueued as soon as it is mapped.
		tm := time.Now()
		host := b.sl.host
		chunks := 0
		if err := b.sl.weights.back(func(lo, n int) error {
			chunks++
			return host.each(lo, n, func(lo, n int) error {
				return b.s.CopyHtoDAsync(b.weights+DevicePtr(lo), unsafe.Pointer(&host.mem[lo]), n)
			})
		}); err != nil {
			return nil, fmt.Errorf("cuda: map the weights again (%d bytes): %w", b.weightsBytes, err)
		}
		attrs["from"], attrs["chunks"], attrs["map_and_enqueue_ms"] = "page-locked host memory", chunks, msSince(tm)
		return attrs, nil
	}
	tm := time.Now()
	if err := b.sl.weights.back(nil); err != nil {
		return nil, fmt.Errorf("cuda: map the weights again (%d bytes): %w", b.weightsBytes, err)
	}
	attrs["map_ms"] = msSince(tm)
	up, err := b.reloadWeights()
	if err != nil {
		// Nothing usable was restored: give the memory back again.
		return nil, errors.Join(err, b.s.Synchronize(), b.sl.weights.unback())
	}
	for k, v := range up {
		attrs[k] = v
	}
	attrs["from"] = "the weight files"
	return attrs, nil
}

// reloadWeights reads the weights from the checkpoint's files into their
// range, after checking the files are the ones loaded: the layout of the
// load (same offsets, checked sizes) and the staged upload's readers, on
// a ring of their own released at the end (runner thread).
func (b *Backend) reloadWeights() (trace.Attrs, error) {
	ck, err := model.Open(b.dir)
	if err != nil {
		return nil, fmt.Errorf("cuda: open the checkpoint again: %w", err)
	}
	defer ck.Close()
	if err := ck.SameFiles(b.files); err != nil {
		return nil, err
	}
	st, jobs, finish, err := b.layout(ck)
	if err != nil {
		return nil, err
	}
	up, err := resolveUploadConfig(false)
	if err != nil {
		return nil, err
	}
	up.readers = max(1, up.readers)
	tr := time.Now()
	ring, err := newStagingRing(up.ringSlots(), up.slotMB<<20)
	if err != nil {
		return nil, err
	}
	defer ring.unmap()
	attrs := trace.Attrs{"staging_bytes": len(ring.mem), "staging_alloc_ms": msSince(tr)}
	readers := up.ringReaders(ring.slots())
	streams := 2
	if up.ownCopies {
		streams = readers
	}
	dma, err := newCudaDMA(b.c, ring, streams)
	if err != nil {
		return nil, err
	}
	defer dma.destroy()
	chunks := planChunks(jobs, ring.slotBytes, os.Getpagesize())
	feed := readerFeed{readers: readers, perReader: up.perReader, ownCopies: up.ownCopies,
		thread: func(f func() error) <-chan error { return contextThread(b.c, "wake reader", f) }}
	staged, err := runStaged(context.Background(), chunks, newChunkQueue(len(chunks), false), ring, feed, dma)
	if err != nil {
		return nil, err
	}
	if err := finish(&st); err != nil {
		return nil, err
	}
	attrs["read_bytes"], attrs["readers"], attrs["chunks"], attrs["registered"] = staged.readBytes, readers, len(chunks), dma.allRegistered()
	for k, v := range staged.attrs() {
		attrs[k] = v
	}
	return attrs, nil
}

// later is the later of two instants.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// addRSS adds the process's resident memory to attrs (rss_mb, as the cold
// stages carry it).
func addRSS(attrs trace.Attrs) {
	if r, err := memstat.Self(); err == nil {
		attrs["rss_mb"] = memstat.MB(r.Total)
	}
}
