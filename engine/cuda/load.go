package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/treni-top/treni-top/engine/memstat"
	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/trace"
)

// Loading: Start brings the driver and context up in the background while
// the server opens its checkpoint, Load builds the backend (weights,
// kernels, KV pool) and the load warm-up runs beside the upload.

// Starter is a CUDA backend on its way up. Start begins, in the
// background, the driver and context initialisation (cuda_init) on the
// backend's thread, the dlopen of cuBLASLt and the staging ring's
// allocation, so that a server can open its checkpoint and tokenizer
// meanwhile; Load finishes the backend. Call exactly one of Load and
// Abort.
type Starter struct {
	b       *Backend
	initErr chan error      // cuda_init's result
	blas    chan blasResult // the dlopened cuBLASLt
	ring    chan ringResult // the staging ring (staged uploads only)
	up      uploadConfig    // the staged upload's threads (Load resolves it, build runs by it)
	pre     *prefault       // the in-place copiers' mappings, populated ahead (UploadPopulateEnv)
	// prefetch reads a cold page cache's first chunks while the driver
	// initialises (ColdPrefetchEnv); Load stops it and waits for it.
	prefetch *coldPrefetch
	used     bool
}

type blasResult struct {
	lib blasLib
	err error
	ms  float64
}

type ringResult struct {
	ring *stagingRing
	err  error
	ms   float64
}

// envOption is a BackendOptions field that its environment variable may
// override, with the function that resolves the two.
type envOption struct {
	v       *string
	resolve func(string) (string, error)
}

// envOptions lists o's environment-overridable fields, in the order
// Start resolves them: Start settles each once, and Load keeps Start's
// values.
func (o *BackendOptions) envOptions() []envOption {
	return []envOption{{&o.Upload, uploadMode}, {&o.Attention, attentionMode}, {&o.Gemm, gemmMode}, {&o.PDL, pdlMode},
		{&o.Fuse, fuseMode}, {&o.SkinnyNarrow, skinnyNarrowMode}, {&o.DecodeAttention, decodeAttentionMode},
		{&o.RunnerSpin, runnerSpinMode}, {&o.SkinnyRows, skinnyRowsMode}}
}

// Start loads the driver library (failing at once, with ErrNoDriver, on a
// machine without one) and starts bringing device opts.Device up. Only
// opts.Device, the fields of envOptions and opts.Stage are used here.
func Start(opts BackendOptions) (*Starter, error) {
	for _, e := range opts.envOptions() {
		var err error
		if *e.v, err = e.resolve(*e.v); err != nil {
			return nil, err
		}
	}
	d, err := LoadDriver()
	if err != nil {
		return nil, err
	}
	b := &Backend{opts: opts, r: NewRunner(), graphs: map[int]*Graph{}, d: d}
	s := &Starter{b: b, initErr: make(chan error, 1), blas: make(chan blasResult, 1), ring: make(chan ringResult, 1)}
	// Both goroutines send exactly once into buffered channels that Load
	// or Abort drain.
	go func() {
		t := time.Now()
		lib, err := openBLASLib()
		s.blas <- blasResult{lib, err, msSince(t)}
	}()
	up, err := resolveUploadConfig(false)
	if err != nil {
		return nil, err
	}
	go func() {
		if opts.Upload != UploadStaged {
			s.ring <- ringResult{}
			return
		}
		t := time.Now()
		r, err := newStagingRing(up.ringSlots(), up.slotMB<<20)
		s.ring <- ringResult{r, err, msSince(t)}
	}()
	go func() { s.initErr <- b.r.Do(context.Background(), b.initCUDA) }()
	return s, nil
}

// Load finishes the backend over ck with opts (opts.Device and the fields
// of envOptions are the ones Start settled). On error everything Start
// began is released. When ctx ends the upload's readers stop at their
// next chunk and Load returns ctx's error (a server told to stop while
// loading: SIGTERM, Ctrl-C).
func (s *Starter) Load(ctx context.Context, ck *model.Checkpoint, opts BackendOptions) (*Backend, error) {
	if s.used {
		return nil, errors.New("cuda: Starter.Load called twice")
	}
	s.used = true
	b := s.b
	err := checkOptions(ck, opts)
	if err == nil && opts.SleepMode && !b.d.HasVMM() {
		err = errors.New("cuda: sleep mode needs the driver's virtual memory management API (cuMemCreate and friends, CUDA 10.2 on), which this driver lacks; update the driver or serve without --enable-sleep-mode")
	}
	if err == nil {
		s.up, err = resolveUploadConfig(opts.ColdPageCache) // build runs the upload by it
	}
	var files []string
	for _, f := range ck.Files {
		files = append(files, f.Path)
	}
	if err == nil && b.opts.Upload == UploadStaged && s.up.populate {
		s.pre = startPrefault(files, prefaultRegion) // while the driver initialises
	}
	if err == nil && b.opts.Upload == UploadStaged && s.up.prefetch {
		s.prefetch = startColdPrefetch(files, s.up.readers, s.up.slotMB<<20) // while the driver initialises
	}
	defer s.prefetch.wait() // its last reads finish beside the upload's
	if initErr := <-s.initErr; err == nil {
		err = initErr
	}
	s.prefetch.stop() // the upload can begin
	if err == nil {
		opts.Device = b.opts.Device
		kept := b.opts.envOptions()
		for i, e := range opts.envOptions() {
			*e.v = *kept[i].v
		}
		b.opts, b.cfg = opts, ck.Config
		b.dir, b.files = ck.Dir, slices.Clone(ck.Files)
		c := b.cfg
		b.buckets = DefaultGraphBuckets()
		if len(opts.GraphBuckets) > 0 {
			b.buckets = append([]int(nil), opts.GraphBuckets...)
			sort.Ints(b.buckets)
		}
		b.graphStride = min(opts.NumBlocks, 256)
		if opts.GraphMaxBlocks > 0 {
			b.graphStride = min(opts.NumBlocks, opts.GraphMaxBlocks)
		}
		b.qDim, b.kvDim = c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
		b.qkvDim = b.qDim + 2*b.kvDim
		err = b.r.Do(context.Background(), func() error { return b.build(ctx, ck, s) })
	}
	if err != nil {
		s.release()
		return nil, err
	}
	b.spinAfterLoad()
	return b, nil
}

// Abort releases what Start began, for a server that will not call Load
// (its checkpoint failed to open).
func (s *Starter) Abort() {
	if s.used {
		return
	}
	s.used = true
	<-s.initErr
	s.release()
}

// release frees the backend's device state and whatever of the
// background work build did not adopt (build drains the channels it uses
// and leaves nil results behind).
func (s *Starter) release() {
	b := s.b
	b.r.Do(context.Background(), func() error { b.free(); return nil })
	b.r.Close()
	// Each channel holds one value at any time once its goroutine has
	// sent: the original result, or the empty one build left after
	// adopting it.
	(<-s.blas).lib.close()
	(<-s.ring).ring.unmap()
	s.dropPrefault() // not adopted by build
}

// dropPrefault stops populating the in-place copiers' mappings and unmaps
// them, when nothing adopted them (a load that failed or ran no staged
// upload).
func (s *Starter) dropPrefault() {
	if s.pre != nil {
		m, _, _, _ := s.pre.finish()
		s.pre = nil
		m.unmap()
	}
}

// stage reports stage st from start to now, with the process's resident
// memory at its end (rss_mb, rss_anon_mb, rss_file_mb; docs/ARCHITECTURE.md,
// "Stages"), so that the stages say which part of the load and warm-up
// made the RSS after load. A stage reported after its end (stageSpan:
// decoder_tensor_upload) has no reading, which would be a later one's.
func (b *Backend) stage(st trace.Stage, start time.Time, attrs trace.Attrs) {
	end := time.Now()
	if r, err := memstat.Self(); err == nil {
		if attrs == nil {
			attrs = trace.Attrs{}
		}
		attrs["rss_mb"], attrs["rss_anon_mb"], attrs["rss_file_mb"] = memstat.MB(r.Total), memstat.MB(r.Anon), memstat.MB(r.File)
	}
	b.stageSpan(st, start, end, attrs)
}

func (b *Backend) stageSpan(st trace.Stage, start, end time.Time, attrs trace.Attrs) {
	rec := StageRecord{Stage: st, Start: start, End: end, Attrs: attrs}
	b.stages = append(b.stages, rec)
	if b.opts.Stage != nil {
		b.opts.Stage(rec)
	}
}

// initCUDA is the cuda_init stage: driver, device, primary context and the
// compute stream (runner thread).
func (b *Backend) initCUDA() error {
	t0 := time.Now()
	d := b.d
	if err := d.Init(); err != nil {
		return fmt.Errorf("cuda: %w (is the NVIDIA driver loaded? see treni-top doctor)", err)
	}
	var err error
	if b.info, err = d.Device(b.opts.Device); err != nil {
		return fmt.Errorf("cuda: device %d: %w", b.opts.Device, err)
	}
	if b.c, err = d.RetainPrimary(b.opts.Device); err != nil {
		return fmt.Errorf("cuda: device %d context: %w", b.opts.Device, err)
	}
	if b.s, err = b.c.NewStream(); err != nil {
		return err
	}
	b.stage(trace.StageCUDAInit, t0, trace.Attrs{"device": b.info.Name, "ordinal": b.opts.Device, "driver": d.Path})
	return nil
}

// build runs on the runner thread once cuda_init is done. The weight
// copies run on a second thread (staged uploads) while this one loads the
// kernels and cuBLASLt, allocates the KV pool and warms up; the
// decoder_tensor_upload stage therefore overlaps kernel_load, kv_alloc and
// warmup on the time axis.
func (b *Backend) build(ctx context.Context, ck *model.Checkpoint, s *Starter) error {
	t0 := time.Now()
	st, jobs, finish, err := b.layout(ck)
	if err != nil {
		return err
	}
	rr := <-s.ring
	ring := rr.ring
	s.ring <- ringResult{} // adopted: release() finds nothing left to free
	// The ring, and the copy engine the upload thread makes over it, are
	// released after the load, off the way to a ready backend
	// (releaseStaging), or by free on an error path.
	b.staging = &stagingLeft{ring: ring}
	run := &uploadRun{st: st, up: s.up}
	if ring != nil {
		run.up.readers = run.up.ringReaders(ring.slots())
	}
	var upDone <-chan error
	join := func() error {
		if upDone == nil {
			return nil
		}
		err := <-upDone
		upDone = nil
		return err
	}
	defer join() // never leave the upload thread running on an error path
	switch {
	case len(jobs) == 0:
		run.end = time.Now()
	case b.opts.Upload == UploadStaged && rr.err == nil && ring != nil:
		upDone = b.startStaged(ctx, s, ring, jobs, run)
	default:
		if rr.err != nil {
			run.st.fallback = rr.err.Error()
		}
		run.st.chunks, run.st.registered, err = b.copyRegistered(ctx, jobs)
		run.end = time.Now()
		if err != nil {
			return err
		}
	}

	s.dropPrefault() // no staged upload adopted them

	// While the weights travel: the host-converted weights, kernels,
	// cuBLASLt, KV pool, warm-up.
	overlapped := upDone != nil
	err = finish(&run.st)
	if err == nil {
		err = b.loadKernels(s, overlapped)
	}
	if err == nil {
		err = b.allocKV()
	}
	if err == nil && !b.opts.NoLoadWarmup {
		err = b.loadWarmup(ctx, overlapped)
	}
	if upErr := join(); upErr != nil || err != nil {
		return errors.Join(err, upErr)
	}
	b.uploadSec = run.end.Sub(t0).Seconds()
	b.uploadBytes = run.st.bytes
	b.stageSpan(trace.StageDecoderTensorUpload, t0, run.end, b.uploadAttrs(run, ring, rr.ms, s.prefetch))
	// The upload streams are done; make that visible to the compute
	// stream too.
	return b.c.Synchronize()
}

// uploadRun is what build's weight upload did. A staged upload's thread
// writes it (startStaged); build reads it only once that thread is
// joined.
type uploadRun struct {
	st  uploadStats
	up  uploadConfig // the staged upload's threads, as they ran
	end time.Time    // the last copy done; teardown is not upload
	// staged and inPlace are the readers' and the in-place copiers' stats.
	staged  stagedStats
	inPlace inPlaceStats
	// preMS and preGB: the in-place copiers' mappings populated ahead
	// (prefault).
	preMS, preGB float64
}

// startStaged starts the staged upload of jobs through ring on a thread
// of its own and returns its result: readers (and in-place copiers, if
// configured) that take their chunks from one queue, the copy engine's
// streams over the ring. It adopts the mappings Start populated ahead,
// if any. It writes run as it goes.
func (b *Backend) startStaged(ctx context.Context, s *Starter, ring *stagingRing, jobs []copyJob, run *uploadRun) <-chan error {
	chunks := planChunks(jobs, ring.slotBytes, os.Getpagesize())
	run.st.chunks = len(chunks)
	// Mappings populated ahead, if any, are adopted here: populating
	// stops as the upload begins.
	var preMaps fileMaps
	if s.pre != nil {
		var filled int64
		var preErr error
		preMaps, filled, run.preMS, preErr = s.pre.finish()
		s.pre = nil
		run.preGB = float64(filled) / 1e9
		if preErr != nil {
			run.inPlace.refused = preErr.Error()
			run.up.inPlace = 0
		}
	}
	up := &run.up
	return contextThread(b.c, "upload thread", func() error {
		// The back end waits until the ring is page-locked (runStaged).
		q := newChunkQueue(len(chunks), up.readers > 0)
		// Copiers that cannot map the files leave the readers every
		// chunk; the stage says why (inplace_refused).
		inDone := b.startInPlace(chunks, q, up.inPlace, max(1, up.unitMB<<20/ring.slotBytes), preMaps, &run.inPlace)
		if run.inPlace.refused != "" {
			up.readers = max(up.readers, 1)
		}
		// The ring's slots are page-locked one by one as they are
		// first filled (cudaDMA.prepare), by the readers that fill
		// them (or by the copy loop).
		var err error
		if up.readers > 0 {
			var dma *cudaDMA
			streams := 2 // the copy loop alternates between two
			if up.ownCopies {
				streams = up.readers // a stream a reader
			}
			if dma, err = newCudaDMA(b.c, ring, streams); err != nil {
				q.close()
				return errors.Join(err, inDone())
			}
			b.staging.dma = dma // build reads it only after join
			feed := readerFeed{readers: up.readers, perReader: up.perReader, ownCopies: up.ownCopies,
				thread: func(f func() error) <-chan error { return contextThread(b.c, "upload reader", f) }}
			run.staged, err = runStaged(ctx, chunks, q, ring, feed, dma)
			run.st.registered = dma.allRegistered()
		} else {
			run.st.registered = true
		}
		err = errors.Join(err, inDone())
		run.end = time.Now() // the last copy is done; teardown is not upload
		run.st.registered = run.st.registered && run.inPlace.pageable == 0
		return err
	})
}

// uploadAttrs are the decoder_tensor_upload stage's attributes: what was
// copied and how fast, and for a staged upload its ring, readers and
// copiers and, after waiting for it, the cold prefetch.
func (b *Backend) uploadAttrs(run *uploadRun, ring *stagingRing, ringMS float64, prefetch *coldPrefetch) trace.Attrs {
	st, up := run.st, run.up
	attrs := trace.Attrs{
		"bytes": st.bytes, "gb_per_s": float64(st.bytes) / max(b.uploadSec, 1e-9) / 1e9, "tensors": st.tensors,
		"chunks": st.chunks, "registered": st.registered, "converted_bytes": st.converted, "streams": 2, "mode": b.opts.Upload,
	}
	if b.opts.Upload == UploadStaged && ring != nil {
		attrs["read_bytes"] = run.staged.readBytes
		attrs["readers"] = up.readers
		attrs["staging_bytes"] = len(ring.mem)
		attrs["staging_alloc_ms"] = ringMS
		attrs["slot_mb"] = ring.slotBytes >> 20
		attrs["copies_by"] = map[bool]string{true: "readers", false: "copy loop"}[up.ownCopies]
		if d := b.staging.dma; d != nil {
			attrs["streams"] = len(d.streams)
		}
		for k, v := range run.staged.attrs() {
			attrs[k] = v
		}
		for k, v := range run.inPlace.attrs(up.inPlace, up.unitMB) {
			attrs[k] = v
		}
		if run.preMS > 0 {
			attrs["inplace_populated_gb"], attrs["inplace_populate_ms"] = run.preGB, run.preMS
		}
		if prefetch != nil {
			n, ms := prefetch.wait()
			attrs["cold_prefetch_mb"], attrs["cold_prefetch_ms"] = n>>20, ms
		}
	}
	if st.fallback != "" {
		attrs["mode"] = UploadMapped
		attrs["fallback"] = st.fallback
	}
	return attrs
}

// loadKernels is the kernel_load stage: the fatbin's module and a cuBLASLt
// handle over the library Start dlopened in the background.
func (b *Backend) loadKernels(s *Starter, overlapped bool) error {
	t0 := time.Now()
	var err error
	if b.k, err = b.c.LoadKernels(); err != nil {
		return err
	}
	pdl := b.k.SetPDL(b.opts.PDL == PDLOn, b.info)
	narrow := skinnyNarrowN(b.opts.SkinnyNarrow, b.info.SMs)
	b.k.SetSkinnyNarrow(narrow)
	if FlashSupported(b.attnShape()) {
		if b.flashRes, err = b.k.FlashResidency(b.cfg.HeadDim); err != nil {
			return err
		}
		// attn_dec for the decode tiles where the shape has one, unless
		// DecodeAttentionEnv turns it off (flashRes.Dec 0: attn_mma_w1).
		if b.opts.DecodeAttention == DecodeAttentionOn {
			if b.flashRes.Dec, err = b.k.DecodeResidency(b.attnShape()); err != nil {
				return err
			}
		}
	}
	moduleMS := msSince(t0)
	t1 := time.Now()
	br := <-s.blas
	s.blas <- blasResult{} // adopted
	if br.err != nil {
		return br.err
	}
	waitMS := msSince(t1)
	t2 := time.Now()
	if b.blas, err = b.c.newBLASFrom(br.lib); err != nil {
		return err
	}
	b.stage(trace.StageKernelLoad, t0, trace.Attrs{"kernels": len(KernelNames()), "cublaslt": b.blas.Path, "cublaslt_version": b.blas.Version,
		"module_ms": moduleMS, "cublaslt_dlopen_ms": br.ms, "cublaslt_wait_ms": waitMS, "cublaslt_create_ms": msSince(t2),
		"concurrent_with_upload": overlapped, "attention": b.attentionKernel(), "pdl": pdl,
		"skinny_n8": b.opts.SkinnyNarrow, "skinny_n8_max_n": narrow, "skinny_rows": b.opts.SkinnyRows, "attn_mma_blocks_per_sm": []int{b.flashRes.W1, b.flashRes.Mid, b.flashRes.W4}, "attn_dec_blocks_per_sm": b.flashRes.Dec})
	return nil
}

// allocKV is the backend's kv_alloc stage: the paged pool, zeroed so that
// graph padding rows, which attend to block 0, read finite values.
func (b *Backend) allocKV() error {
	t0 := time.Now()
	c := b.cfg
	perLayer := int64(b.opts.NumBlocks) * int64(c.NumKVHeads) * int64(b.opts.BlockSize) * int64(c.HeadDim) * 2
	b.kvBytes = perLayer * 2 * int64(c.NumLayers)
	var err error
	if b.kv, err = b.allocKVMem(b.kvBytes); err != nil {
		return fmt.Errorf("cuda: KV pool of %d blocks (%d bytes; lower the block count): %w", b.opts.NumBlocks, b.kvBytes, err)
	}
	if err := b.s.Memset8Async(b.kv, 0, int(b.kvBytes)); err != nil {
		return err
	}
	if err := b.s.Synchronize(); err != nil {
		return err
	}
	for i := range b.layers {
		b.layers[i].k = b.kv + DevicePtr(int64(2*i)*perLayer)
		b.layers[i].v = b.kv + DevicePtr(int64(2*i+1)*perLayer)
	}
	b.stage(trace.StageKVAlloc, t0, trace.Attrs{"blocks": b.opts.NumBlocks, "block_size": b.opts.BlockSize, "bytes": b.kvBytes})
	return nil
}
