package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/trace"
)

// ErrBadBatch is returned (wrapped) by Backend.Forward when the batch cannot
// be run as given; the step is refused before any device work.
var ErrBadBatch = errors.New("cuda: invalid batch")

// ErrClosed is returned by Backend.Forward after Close.
var ErrClosed = errors.New("cuda: backend is closed")

// BackendOptions sizes the CUDA backend.
type BackendOptions struct {
	// NumBlocks is the number of KV blocks in the device pool.
	NumBlocks int
	// BlockSize is the number of positions per KV block.
	BlockSize int
	// Device is the CUDA device ordinal.
	Device int
	// NoGraphs turns decode CUDA graphs off (every step launches eagerly).
	NoGraphs bool
	// GraphBuckets are the decode batch sizes graphs are captured for
	// (lazily, on first use); nil means DefaultGraphBuckets(). A decode step
	// of B sequences replays the smallest bucket ≥ B with padding rows.
	GraphBuckets []int
	// GraphMaxBlocks is the block-table width of graph steps (default 256,
	// i.e. 256 × BlockSize positions); longer sequences decode eagerly.
	GraphMaxBlocks int
	// Upload is how the weights reach the device: UploadStaged (default)
	// or UploadMapped; UploadEnv overrides it.
	Upload string
	// ColdPageCache says most weight bytes are not in the page cache (the
	// caller checked, e.g. Checkpoint.Residency): the staged upload then
	// reads with fewer streams, as storage prefers.
	ColdPageCache bool
	// NoLoadWarmup skips the warm-up that runs while the weights upload
	// (eager prefill passes that build the cuBLASLt plans and load their
	// kernels, and the batch-1 decode graph's capture); those costs then
	// fall on the first request.
	NoLoadWarmup bool
	// Stage, when set, is called with each cold stage of NewBackend as it
	// ends (cuda_init, kernel_load, decoder_tensor_upload, kv_alloc), and
	// with graph_capture from inside Forward when a decode bucket is first
	// captured; it runs on the backend's CUDA thread and must not call the
	// backend. The same records are kept in Backend.Stages.
	Stage func(StageRecord)
}

// StageRecord is one cold stage of the backend's construction.
type StageRecord struct {
	Stage      trace.Stage
	Start, End time.Time
	Attrs      trace.Attrs
}

// KVBytesPerBlock is the device KV storage one block takes for checkpoint
// config c (bf16 K and V for every layer and KV head), so a server can size
// NumBlocks from free device memory before calling NewBackend.
func KVBytesPerBlock(c model.Config, blockSize int) int64 {
	return int64(blockSize) * int64(c.NumLayers) * int64(c.NumKVHeads) * int64(c.HeadDim) * 2 * 2
}

type devLayer struct {
	attnNorm, mlpNorm DevicePtr // f32 [H]
	qkv               DevicePtr // bf16 [qDim+2·kvDim, H]: q, k, v rows fused
	qkvBias           DevicePtr // f32 [qDim+2·kvDim] or 0
	o                 DevicePtr // bf16 [H, qDim]
	oBias             DevicePtr // f32 [H] or 0
	qNorm, kNorm      DevicePtr // f32 [hd] or 0
	gu                DevicePtr // bf16 [2I, H]: gate, up rows fused
	down              DevicePtr // bf16 [H, I]
	k, v              DevicePtr // this layer's KV pools
}

// Backend is the CUDA implementation of sched.Backend: weights in device
// memory (bf16), a paged bf16 KV pool on the device driven by the
// scheduler's block tables, the kernels of kernels.cu and cuBLASLt GEMMs.
// Every CUDA call runs on the backend's Runner thread; Forward is
// serialised by a mutex.
type Backend struct {
	mu     sync.Mutex
	r      *Runner
	d      *Driver
	c      *Context
	k      *Kernels
	blas   *BLAS
	s      *Stream
	cfg    model.Config
	opts   BackendOptions
	closed bool
	stages []StageRecord
	info   DeviceInfo

	qDim, kvDim, qkvDim int
	weights, smalls     DevicePtr // the two weight allocations
	weightsBytes        int64
	embed, lmHead       DevicePtr
	finalNorm, invFreq  DevicePtr
	layers              []devLayer
	kv                  DevicePtr
	kvBytes             int64
	uploadBytes         int64
	uploadSec           float64

	// Step scratch, grown to the largest step seen.
	capT, capRows, capMeta  int
	x, h, qkv, att, gu, act DevicePtr
	lmX, logitsD, meta      DevicePtr
	metaHost, logitsHost    HostBuffer
	hostMeta                []int32

	// Decode graphs per batch-size bucket, captured lazily.
	buckets       []int
	graphStride   int // block-table entries per sequence in graph steps
	graphs        map[int]*Graph
	graphsOff     bool // a capture failed: eager steps only
	graphLaunches int
}

// NewBackend builds a CUDA backend over an opened checkpoint: it loads the
// driver, retains device opts.Device's primary context, loads the kernels
// and cuBLASLt, uploads the weights (bf16; f16/f32 checkpoints are converted
// on the host) and allocates the KV pool. The checkpoint may be closed once
// NewBackend returns: the weights then live on the device only. It is
// Start followed by Load; a server that wants the driver's initialisation
// to overlap its own loading calls those two itself.
func NewBackend(ck *model.Checkpoint, opts BackendOptions) (*Backend, error) {
	if err := checkOptions(ck, opts); err != nil {
		return nil, err
	}
	s, err := Start(opts)
	if err != nil {
		return nil, err
	}
	return s.Load(ck, opts)
}

// checkOptions refuses what no device work can fix.
func checkOptions(ck *model.Checkpoint, opts BackendOptions) error {
	if ck == nil {
		return errors.New("cuda: nil checkpoint")
	}
	c := ck.Config
	switch c.Arch {
	case model.ArchQwen3, model.ArchQwen2, model.ArchLlama:
	default:
		return fmt.Errorf("cuda: architecture %q is not supported (qwen3, qwen2, llama)", c.Arch)
	}
	if opts.NumBlocks <= 0 || opts.BlockSize <= 0 {
		return fmt.Errorf("cuda: need a positive KV block count and block size, got %d blocks of %d positions", opts.NumBlocks, opts.BlockSize)
	}
	if err := (AttnShape{c.NumHeads, c.NumKVHeads, c.HeadDim, opts.BlockSize}).validate(); err != nil {
		return fmt.Errorf("cuda: %s cannot run on these kernels: %w", ck.Dir, err)
	}
	return nil
}

// uploadMode resolves BackendOptions.Upload and UploadEnv.
func uploadMode(opt string) (string, error) {
	if v := os.Getenv(UploadEnv); v != "" {
		opt = v
	}
	switch opt {
	case "", UploadStaged:
		return UploadStaged, nil
	case UploadMapped:
		return UploadMapped, nil
	}
	return "", fmt.Errorf("cuda: upload mode %q is not one of %s, %s (check %s)", opt, UploadStaged, UploadMapped, UploadEnv)
}

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
	used    bool
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

// Start loads the driver library (failing at once, with ErrNoDriver, on a
// machine without one) and starts bringing device opts.Device up. Only
// opts.Device, opts.Upload and opts.Stage are used here.
func Start(opts BackendOptions) (*Starter, error) {
	mode, err := uploadMode(opts.Upload)
	if err != nil {
		return nil, err
	}
	d, err := LoadDriver()
	if err != nil {
		return nil, err
	}
	opts.Upload = mode
	b := &Backend{opts: opts, r: NewRunner(), graphs: map[int]*Graph{}, d: d}
	s := &Starter{b: b, initErr: make(chan error, 1), blas: make(chan blasResult, 1), ring: make(chan ringResult, 1)}
	// Both goroutines send exactly once into buffered channels that Load
	// or Abort drain.
	go func() {
		t := time.Now()
		lib, err := openBLASLib()
		s.blas <- blasResult{lib, err, msSince(t)}
	}()
	go func() {
		if mode != UploadStaged {
			s.ring <- ringResult{}
			return
		}
		t := time.Now()
		r, err := newStagingRing(stagingReaders(false)+stagingSlack, stagingSlotBytes)
		s.ring <- ringResult{r, err, msSince(t)}
	}()
	go func() { s.initErr <- b.r.Do(context.Background(), b.initCUDA) }()
	return s, nil
}

// Load finishes the backend over ck with opts (opts.Device and opts.Upload
// are the ones Start was given). On error everything Start began is
// released.
func (s *Starter) Load(ck *model.Checkpoint, opts BackendOptions) (*Backend, error) {
	if s.used {
		return nil, errors.New("cuda: Starter.Load called twice")
	}
	s.used = true
	b := s.b
	err := checkOptions(ck, opts)
	if initErr := <-s.initErr; err == nil {
		err = initErr
	}
	if err == nil {
		opts.Device, opts.Upload = b.opts.Device, b.opts.Upload
		b.opts, b.cfg = opts, ck.Config
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
		err = b.r.Do(context.Background(), func() error { return b.build(ck, s) })
	}
	if err != nil {
		s.release()
		return nil, err
	}
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
}

func (b *Backend) stage(st trace.Stage, start time.Time, attrs trace.Attrs) {
	b.stageSpan(st, start, time.Now(), attrs)
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
func (b *Backend) build(ck *model.Checkpoint, s *Starter) error {
	t0 := time.Now()
	st, jobs, finish, err := b.layout(ck)
	if err != nil {
		return err
	}
	rr := <-s.ring
	ring := rr.ring
	s.ring <- ringResult{} // adopted: release() finds nothing left to free
	defer ring.unmap()
	var (
		upDone <-chan error
		upEnd  time.Time
		staged stagedStats
		regMS  float64
	)
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
		upEnd = time.Now()
	case b.opts.Upload == UploadStaged && rr.err == nil && ring != nil:
		chunks := planChunks(jobs, ring.slotBytes)
		st.chunks = len(chunks)
		upDone = uploadThread(b.c, func() error {
			t := time.Now()
			// Page-locked, the ring is copied from at full bandwidth; if
			// the driver refuses, the copies still work (pageable).
			st.registered = b.c.HostRegister(ring.ptr(), len(ring.mem), false) == nil
			regMS = msSince(t)
			if st.registered {
				defer b.c.HostUnregister(ring.ptr())
			}
			dma, err := newCudaDMA(b.c, ring.slots())
			if err != nil {
				return err
			}
			defer dma.destroy()
			staged, err = runStaged(chunks, ring, stagingReaders(b.opts.ColdPageCache), dma)
			upEnd = time.Now() // the last copy is done; teardown is not upload
			return err
		})
	default:
		if rr.err != nil {
			st.fallback = rr.err.Error()
		}
		st.chunks, st.registered, err = b.copyRegistered(jobs)
		upEnd = time.Now()
		if err != nil {
			return err
		}
	}

	// While the weights travel: the host-converted weights, kernels,
	// cuBLASLt, KV pool, warm-up.
	overlapped := upDone != nil
	err = finish(&st)
	if err == nil {
		err = b.loadKernels(s, overlapped)
	}
	if err == nil {
		err = b.allocKV()
	}
	warmed := false
	if err == nil && !b.opts.NoLoadWarmup {
		warmed, err = b.loadWarmup(context.Background(), overlapped)
	}
	if upErr := join(); upErr != nil || err != nil {
		return errors.Join(err, upErr)
	}
	b.uploadSec = upEnd.Sub(t0).Seconds()
	b.uploadBytes = st.bytes
	attrs := trace.Attrs{
		"bytes": st.bytes, "gb_per_s": float64(st.bytes) / max(b.uploadSec, 1e-9) / 1e9, "tensors": st.tensors,
		"chunks": st.chunks, "registered": st.registered, "converted_bytes": st.converted, "streams": 2, "mode": b.opts.Upload,
	}
	if b.opts.Upload == UploadStaged && ring != nil {
		attrs["read_bytes"] = staged.readBytes
		attrs["readers"] = stagingReaders(b.opts.ColdPageCache)
		attrs["staging_bytes"] = len(ring.mem)
		attrs["staging_alloc_ms"] = rr.ms
		attrs["staging_register_ms"] = regMS
	}
	if st.fallback != "" {
		attrs["mode"] = UploadMapped
		attrs["fallback"] = st.fallback
	}
	b.stageSpan(trace.StageDecoderTensorUpload, t0, upEnd, attrs)
	if warmed {
		// The warm-up wrote K and V of dummy tokens: zero the pool again
		// (graph padding rows attend to block 0 and must read finite
		// values).
		if err := b.s.Memset8Async(b.kv, 0, int(b.kvBytes)); err != nil {
			return err
		}
	}
	// The upload streams are done; make that visible to the compute
	// stream too.
	return b.c.Synchronize()
}

// loadKernels is the kernel_load stage: the fatbin's module and a cuBLASLt
// handle over the library Start dlopened in the background.
func (b *Backend) loadKernels(s *Starter, overlapped bool) error {
	t0 := time.Now()
	var err error
	if b.k, err = b.c.LoadKernels(); err != nil {
		return err
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
		"concurrent_with_upload": overlapped})
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
	if b.kv, err = b.c.Alloc(int(b.kvBytes)); err != nil {
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

// warmupPrefill are the step sizes the load warm-up runs once each: the
// GEMM row counts padRows produces from 8 to 256 (the decode graph adds 1;
// 2 and 4, the next graph buckets, were left out after measuring: their 8
// extra plans lengthened the warm-up past the 0.6B-shaped upload by 50 ms).
// cuBLASLt chooses and lazily loads a kernel per shape; after the warm-up a
// step of any length up to 256 finds its plans built and kernels loaded.
// The first is also the scratch size set aside for prefill chunks.
var warmupPrefill = [...]int{256, 128, 64, 32, 16, 8}

// loadWarmup runs dummy eager prefills of warmupPrefill lengths and one
// batch-1 decode step, capturing its graph, while the weights are still
// uploading: the weights read are partly stale, which does not matter for
// what is being warmed (plans, lazily loaded kernels, scratch buffers, the
// graph's recording). It reports whether it ran; the caller re-zeroes the
// KV pool afterwards.
func (b *Backend) loadWarmup(ctx context.Context, overlapped bool) (bool, error) {
	c := b.cfg
	bs := b.opts.BlockSize
	maxT := min(warmupPrefill[0], b.opts.NumBlocks*bs-1)
	if maxT < 1 {
		return false, nil
	}
	t0 := time.Now()
	// Size the scratch for the largest warm-up prefill and the metadata
	// of the largest graph bucket, so that the first requests neither
	// allocate nor drop a captured graph.
	meta := 4*maxT + (maxT+bs-1)/bs
	if !b.opts.NoGraphs && len(b.buckets) > 0 {
		Bk := b.buckets[len(b.buckets)-1]
		meta = max(meta, 4*Bk+Bk*b.graphStride)
	}
	if err := b.grow(maxT, 8, meta); err != nil {
		return false, err
	}
	blocks := make([]int32, (maxT+bs)/bs)
	for i := range blocks {
		blocks[i] = int32(i)
	}
	row := [][]float32{make([]float32, c.VocabSize)}
	passes := 0
	for _, T := range warmupPrefill {
		if T > maxT {
			continue
		}
		toks := make([]int32, T)
		for i := range toks {
			toks[i] = int32(i % c.VocabSize)
		}
		bt := &sched.Batch{Seqs: []sched.SeqChunk{{Tokens: toks, Blocks: blocks, WantLogits: true}}}
		stride := (T + bs - 1) / bs
		b.hostMeta = stepMeta(b.hostMeta, bt, bs, T, 1, stride)
		if err := b.forward(ctx, bt, row, T, 1, stride); err != nil {
			return true, fmt.Errorf("cuda: load warm-up prefill of %d tokens: %w", T, err)
		}
		passes++
	}
	graphs := 0
	if Bk := b.bucket(1); !b.opts.NoGraphs && !b.graphsOff && Bk > 0 && maxT >= 2 {
		bt := &sched.Batch{Seqs: []sched.SeqChunk{{Tokens: []int32{1}, Pos: 1, Blocks: blocks, WantLogits: true}}}
		b.hostMeta = stepMeta(b.hostMeta, bt, bs, Bk, Bk, b.graphStride)
		if err := b.forwardGraph(ctx, row, 1, Bk); err != nil {
			return true, fmt.Errorf("cuda: load warm-up decode step: %w", err)
		}
		graphs = len(b.graphs)
	}
	b.stage(trace.StageWarmup, t0, trace.Attrs{"kind": "load", "prefill_passes": passes, "gemm_plans": b.blas.Plans(),
		"graphs": graphs, "concurrent_with_upload": overlapped})
	return true, nil
}

// uploadStats describes the weight upload.
type uploadStats struct {
	bytes, converted int64
	tensors, chunks  int
	registered       bool
	fallback         string // why the staged path was not taken
}

// copyJob is one tensor's bytes headed for the device.
type copyJob struct {
	src  []byte // in the checkpoint's mmap (the mapped path reads these)
	file string
	off  int64 // src's offset in file (the staged path reads these)
	n    int
	dst  DevicePtr
}

const uploadChunk = 64 << 20

// layout places every weight on the device and returns the copies still
// to do. Matrices go into one allocation at 256-byte aligned offsets, q/k/v
// and gate/up fused by placing their rows back to back; bf16 matrices are
// left to the caller as copy jobs (staged or mapped, see upload.go). finish,
// which the caller runs once those copies are under way, converts and
// copies the rest on the host: the norm weights and biases (f32, one copy)
// and the matrices of f16/f32 checkpoints. Nothing here reads weight bytes.
func (b *Backend) layout(ck *model.Checkpoint) (st uploadStats, jobs []copyJob, finish func(*uploadStats) error, err error) {
	c := b.cfg
	H, I := c.HiddenSize, c.IntermediateSize
	get := func(name string, shape ...int) (*model.Tensor, error) {
		t, ok := ck.Tensors[name]
		if !ok {
			return nil, fmt.Errorf("cuda: checkpoint %s has no tensor %s", ck.Dir, name)
		}
		n := 1
		for _, s := range shape {
			n *= s
		}
		if len(t.Shape) != len(shape) || t.DType.Size() == 0 || len(t.Data) != n*t.DType.Size() {
			return nil, fmt.Errorf("cuda: tensor %s has shape %v (%s, %d bytes), want %v", name, t.Shape, t.DType, len(t.Data), shape)
		}
		for i := range shape {
			if t.Shape[i] != shape[i] {
				return nil, fmt.Errorf("cuda: tensor %s has shape %v, want %v", name, t.Shape, shape)
			}
		}
		return t, nil
	}

	// Lay out the matrix allocation.
	type mat struct {
		t   *model.Tensor
		off int64
	}
	var mats []mat
	var wsize int64
	place := func(t *model.Tensor) int64 {
		off := wsize
		wsize += (int64(len(t.Data)/t.DType.Size())*2 + 255) &^ 255
		mats = append(mats, mat{t, off})
		return off
	}
	// Fused matrices need their parts contiguous: place them with no gap
	// (each part's row count times the row size is a multiple of 2 bytes;
	// alignment only matters at the start).
	placeFused := func(ts ...*model.Tensor) int64 {
		off := wsize
		for _, t := range ts {
			mats = append(mats, mat{t, wsize})
			wsize += int64(len(t.Data)/t.DType.Size()) * 2
		}
		wsize = (wsize + 255) &^ 255
		return off
	}
	// Small f32 vectors (norm weights, biases), uploaded in one copy by
	// finish: only their places are decided here, so that no byte of the
	// weight files is read before the bulk upload has started (on a cold
	// page cache, faulting these scattered tensors in through the mapping
	// took 0.8 s on the H100 host).
	smallsN := 0 // f32 elements
	type smallRef struct {
		dst *DevicePtr
		off int
	}
	type smallPart struct {
		t   *model.Tensor
		off int
	}
	var refs []smallRef
	var parts []smallPart
	addSmall := func(dst *DevicePtr, ts ...*model.Tensor) {
		refs = append(refs, smallRef{dst, smallsN})
		for _, t := range ts {
			parts = append(parts, smallPart{t, smallsN})
			smallsN += len(t.Data) / t.DType.Size()
		}
		smallsN = (smallsN + 63) &^ 63 // 256-byte alignment
	}

	embedT, err := get("model.embed_tokens.weight", c.VocabSize, H)
	if err != nil {
		return st, nil, nil, err
	}
	embedOff := place(embedT)
	lmOff := embedOff
	if !c.TieWordEmbeddings {
		lm, err := get("lm_head.weight", c.VocabSize, H)
		if err != nil {
			return st, nil, nil, err
		}
		lmOff = place(lm)
	}
	fn, err := get("model.norm.weight", H)
	if err != nil {
		return st, nil, nil, err
	}
	addSmall(&b.finalNorm, fn)
	type layerOffs struct{ qkv, o, gu, down int64 }
	offs := make([]layerOffs, c.NumLayers)
	b.layers = make([]devLayer, c.NumLayers)
	for i := 0; i < c.NumLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		var ts [7]*model.Tensor
		for j, spec := range []struct {
			name       string
			rows, cols int
		}{
			{"self_attn.q_proj.weight", b.qDim, H}, {"self_attn.k_proj.weight", b.kvDim, H}, {"self_attn.v_proj.weight", b.kvDim, H},
			{"self_attn.o_proj.weight", H, b.qDim}, {"mlp.gate_proj.weight", I, H}, {"mlp.up_proj.weight", I, H},
			{"mlp.down_proj.weight", H, I},
		} {
			if ts[j], err = get(p+spec.name, spec.rows, spec.cols); err != nil {
				return st, nil, nil, err
			}
		}
		offs[i] = layerOffs{qkv: placeFused(ts[0], ts[1], ts[2]), o: place(ts[3]), gu: placeFused(ts[4], ts[5]), down: place(ts[6])}
		l := &b.layers[i]
		an, err := get(p+"input_layernorm.weight", H)
		if err != nil {
			return st, nil, nil, err
		}
		addSmall(&l.attnNorm, an)
		mn, err := get(p+"post_attention_layernorm.weight", H)
		if err != nil {
			return st, nil, nil, err
		}
		addSmall(&l.mlpNorm, mn)
		if c.QKVBias {
			qb, err := get(p+"self_attn.q_proj.bias", b.qDim)
			if err != nil {
				return st, nil, nil, err
			}
			kb, err := get(p+"self_attn.k_proj.bias", b.kvDim)
			if err != nil {
				return st, nil, nil, err
			}
			vb, err := get(p+"self_attn.v_proj.bias", b.kvDim)
			if err != nil {
				return st, nil, nil, err
			}
			addSmall(&l.qkvBias, qb, kb, vb)
		}
		if c.OProjBias {
			ob, err := get(p+"self_attn.o_proj.bias", H)
			if err != nil {
				return st, nil, nil, err
			}
			addSmall(&l.oBias, ob)
		}
		if c.QKNorm {
			qn, err := get(p+"self_attn.q_norm.weight", c.HeadDim)
			if err != nil {
				return st, nil, nil, err
			}
			kn, err := get(p+"self_attn.k_norm.weight", c.HeadDim)
			if err != nil {
				return st, nil, nil, err
			}
			addSmall(&l.qNorm, qn)
			addSmall(&l.kNorm, kn)
		}
	}

	b.weightsBytes = wsize
	if b.weights, err = b.c.Alloc(int(wsize)); err != nil {
		return st, nil, nil, fmt.Errorf("cuda: weights need %d bytes of device memory: %w", wsize, err)
	}
	b.embed, b.lmHead = b.weights+DevicePtr(embedOff), b.weights+DevicePtr(lmOff)
	for i := range b.layers {
		l := &b.layers[i]
		l.qkv, l.o = b.weights+DevicePtr(offs[i].qkv), b.weights+DevicePtr(offs[i].o)
		l.gu, l.down = b.weights+DevicePtr(offs[i].gu), b.weights+DevicePtr(offs[i].down)
	}
	inv := c.InvFreq()
	if b.smalls, err = b.c.Alloc(smallsN*4 + len(inv)*8); err != nil {
		return st, nil, nil, err
	}
	for _, r := range refs {
		*r.dst = b.smalls + DevicePtr(r.off*4)
	}
	b.invFreq = b.smalls + DevicePtr(smallsN*4)

	// Matrices: bf16 left to the caller's copy jobs, others to finish.
	var convert []*model.Tensor
	var convertDst []DevicePtr
	for _, m := range mats {
		dst := b.weights + DevicePtr(m.off)
		st.tensors++
		if m.t.DType == model.BF16 {
			jobs = append(jobs, copyJob{src: m.t.Data, file: m.t.File, off: m.t.Offset, n: len(m.t.Data), dst: dst})
			st.bytes += int64(len(m.t.Data))
			continue
		}
		convert, convertDst = append(convert, m.t), append(convertDst, dst)
	}
	finish = func(st *uploadStats) error {
		smalls := make([]float32, smallsN)
		for _, p := range parts {
			copy(smalls[p.off:], toF32(p.t))
		}
		if err := b.c.CopyHtoD(b.smalls, unsafe.Pointer(&smalls[0]), len(smalls)*4); err != nil {
			return err
		}
		if err := b.c.CopyHtoD(b.invFreq, unsafe.Pointer(&inv[0]), len(inv)*8); err != nil {
			return err
		}
		for i, t := range convert {
			conv := toBF16(t)
			if err := b.c.CopyHtoD(convertDst[i], unsafe.Pointer(&conv[0]), len(conv)*2); err != nil {
				return fmt.Errorf("cuda: upload %s: %w", t.Name, err)
			}
			st.bytes += int64(len(conv) * 2)
			st.converted += int64(len(conv) * 2)
		}
		return nil
	}
	return st, jobs, finish, nil
}

// copyRegistered copies jobs grouped by file through page-aligned chunks
// of the mapping, each registered with cuMemHostRegister (read-only) before
// its copies are enqueued and unregistered once they finish. When
// registration is refused (an old driver, a locked-memory limit), it falls
// back to pageable copies and says so in the result.
func (b *Backend) copyRegistered(jobs []copyJob) (chunks int, registered bool, err error) {
	if len(jobs) == 0 {
		return 0, false, nil
	}
	var streams [2]*Stream
	for i := range streams {
		if streams[i], err = b.c.NewStream(); err != nil {
			return 0, false, err
		}
		defer streams[i].Destroy()
	}
	addr := func(j copyJob) uintptr { return uintptr(unsafe.Pointer(&j.src[0])) }
	byFile := map[string][]copyJob{}
	var files []string
	for _, j := range jobs {
		if _, ok := byFile[j.file]; !ok {
			files = append(files, j.file)
		}
		byFile[j.file] = append(byFile[j.file], j)
	}
	const page = 4096
	type pending struct {
		p  unsafe.Pointer
		ev *Event
	}
	var inflight []pending
	retire := func(all bool) error {
		for len(inflight) > 0 && (all || len(inflight) >= 2) {
			pd := inflight[0]
			inflight = inflight[1:]
			if err := pd.ev.Synchronize(); err != nil {
				return err
			}
			pd.ev.Destroy()
			if pd.p != nil {
				if err := b.c.HostUnregister(pd.p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	registered = true
	for _, f := range files {
		js := byFile[f]
		sort.Slice(js, func(a, c int) bool { return addr(js[a]) < addr(js[c]) })
		first := js[0]
		lo := addr(first) &^ (page - 1)
		base := unsafe.Add(unsafe.Pointer(&first.src[0]), -int(addr(first)-lo))
		last := js[len(js)-1]
		hi := (addr(last) + uintptr(len(last.src)) + page - 1) &^ (page - 1)
		ji := 0
		for cs := lo; cs < hi; cs += uploadChunk {
			ce := min(cs+uploadChunk, hi)
			if err := retire(false); err != nil {
				return chunks, registered, err
			}
			cp := unsafe.Add(base, int(cs-lo))
			reg := registered
			if reg {
				if err := b.c.HostRegister(cp, int(ce-cs), true); err != nil {
					// Fall back to pageable copies for the rest.
					registered, reg = false, false
				}
			}
			s := streams[chunks%2]
			for k := ji; k < len(js); k++ {
				a, e := addr(js[k]), addr(js[k])+uintptr(len(js[k].src))
				if a >= ce {
					break
				}
				from, to := max(a, cs), min(e, ce)
				if from < to {
					src := unsafe.Pointer(&js[k].src[from-a])
					if err := s.CopyHtoDAsync(js[k].dst+DevicePtr(from-a), src, int(to-from)); err != nil {
						return chunks, registered, fmt.Errorf("cuda: upload weights: %w", err)
					}
				}
				if e <= ce && k == ji {
					ji++
				}
			}
			ev, err := b.c.NewEvent()
			if err != nil {
				return chunks, registered, err
			}
			if err := ev.Record(s); err != nil {
				return chunks, registered, err
			}
			var p unsafe.Pointer
			if reg {
				p = cp
			}
			inflight = append(inflight, pending{p, ev})
			chunks++
		}
	}
	return chunks, registered, retire(true)
}

// toF32 converts a small tensor (norm weight, bias) to float32.
func toF32(t *model.Tensor) []float32 {
	n := len(t.Data) / t.DType.Size()
	out := make([]float32, n)
	for i := range out {
		switch t.DType {
		case model.F32:
			out[i] = math.Float32frombits(uint32(t.Data[4*i]) | uint32(t.Data[4*i+1])<<8 | uint32(t.Data[4*i+2])<<16 | uint32(t.Data[4*i+3])<<24)
		case model.BF16:
			out[i] = math.Float32frombits((uint32(t.Data[2*i]) | uint32(t.Data[2*i+1])<<8) << 16)
		case model.F16:
			out[i] = halfToFloat(uint16(t.Data[2*i]) | uint16(t.Data[2*i+1])<<8)
		}
	}
	return out
}

// toBF16 converts an f16 or f32 matrix to bf16 (round to nearest even).
func toBF16(t *model.Tensor) []uint16 {
	f := toF32(t)
	out := make([]uint16, len(f))
	for i, v := range f {
		u := math.Float32bits(v)
		if u&0x7fffffff > 0x7f800000 {
			out[i] = 0x7fc0
			continue
		}
		u += 0x7fff + (u>>16)&1
		out[i] = uint16(u >> 16)
	}
	return out
}

// halfToFloat converts one IEEE binary16 value.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	f := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// VocabSize is the length of a logits row.
func (b *Backend) VocabSize() int { return b.cfg.VocabSize }

// BlockSize is the number of positions per KV block.
func (b *Backend) BlockSize() int { return b.opts.BlockSize }

// NumBlocks is the number of KV blocks in the device pool.
func (b *Backend) NumBlocks() int { return b.opts.NumBlocks }

// Name is "cuda".
func (b *Backend) Name() string { return "cuda" }

// Device describes the GPU the backend runs on.
func (b *Backend) Device() DeviceInfo { return b.info }

// KVBytes is the size of the device KV pool.
func (b *Backend) KVBytes() int64 { return b.kvBytes }

// Stages are the cold stages NewBackend went through, in order.
// Graph captures happen lazily inside Forward and are appended here too.
func (b *Backend) Stages() []StageRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]StageRecord(nil), b.stages...)
}

// UploadStats is the weight upload: bytes copied and their rate in GB/s
// (10^9 bytes per second).
func (b *Backend) UploadStats() (bytes int64, gbPerS float64) {
	if b.uploadSec <= 0 {
		return b.uploadBytes, 0
	}
	return b.uploadBytes, float64(b.uploadBytes) / b.uploadSec / 1e9
}

var _ sched.Backend = (*Backend)(nil)

// Close releases the device memory, the kernels, cuBLASLt and the context,
// and stops the runner. It is idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.r.Do(context.Background(), func() error { return b.free() })
	b.r.Close()
	return err
}

// free runs on the runner thread and releases whatever was created.
func (b *Backend) free() error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if b.c == nil {
		return nil
	}
	keep(b.c.Synchronize())
	keep(b.dropGraphs())
	for _, p := range []DevicePtr{b.weights, b.smalls, b.kv, b.x, b.h, b.qkv, b.att, b.gu, b.act, b.lmX, b.logitsD, b.meta} {
		if p != 0 {
			keep(b.c.Free(p))
		}
	}
	if b.metaHost.Ptr != nil {
		keep(b.c.FreeHost(b.metaHost))
	}
	if b.logitsHost.Ptr != nil {
		keep(b.c.FreeHost(b.logitsHost))
	}
	if b.blas != nil {
		keep(b.blas.Close())
	}
	if b.k != nil {
		keep(b.k.Close())
	}
	if b.s != nil {
		keep(b.s.Destroy())
	}
	keep(b.c.Release())
	b.c = nil
	return errors.Join(errs...)
}

// validate checks the whole batch before any device work.
func (b *Backend) validate(bt *sched.Batch, logits [][]float32) error {
	if len(logits) < len(bt.Seqs) {
		return fmt.Errorf("%w: %d logits rows for %d sequences", ErrBadBatch, len(logits), len(bt.Seqs))
	}
	bs, nb, V := b.opts.BlockSize, b.opts.NumBlocks, b.cfg.VocabSize
	for i := range bt.Seqs {
		s := &bt.Seqs[i]
		if len(s.Tokens) == 0 {
			return fmt.Errorf("%w: sequence %d has an empty chunk", ErrBadBatch, s.SeqID)
		}
		if s.Pos < 0 {
			return fmt.Errorf("%w: sequence %d starts at negative position %d", ErrBadBatch, s.SeqID, s.Pos)
		}
		end := s.Pos + len(s.Tokens)
		if need := (end + bs - 1) / bs; len(s.Blocks) < need {
			return fmt.Errorf("%w: sequence %d needs %d KV blocks for positions [0,%d), block table has %d", ErrBadBatch, s.SeqID, need, end, len(s.Blocks))
		}
		for j := 0; j*bs < end; j++ {
			if blk := s.Blocks[j]; blk < 0 || int(blk) >= nb {
				return fmt.Errorf("%w: sequence %d block table entry %d is block %d, pool has %d", ErrBadBatch, s.SeqID, j, blk, nb)
			}
		}
		for j, tok := range s.Tokens {
			if tok < 0 || int(tok) >= V {
				return fmt.Errorf("%w: sequence %d token %d is id %d, vocabulary has %d", ErrBadBatch, s.SeqID, j, tok, V)
			}
		}
		if s.WantLogits && len(logits[i]) < V {
			return fmt.Errorf("%w: sequence %d logits row has %d entries, vocabulary has %d", ErrBadBatch, s.SeqID, len(logits[i]), V)
		}
	}
	return nil
}

// grow sizes the step scratch for T tokens, rows logits rows and meta
// int32 metadata entries (runner thread).
func (b *Backend) grow(T, rows, meta int) error {
	c := b.cfg
	if T > b.capT || rows > b.capRows || meta > b.capMeta {
		// Captured graphs hold the old buffers' addresses.
		if err := b.dropGraphs(); err != nil {
			return err
		}
	}
	if T > b.capT {
		T = max(T, 2*b.capT, 16)
		ptrs := []*DevicePtr{&b.x, &b.h, &b.qkv, &b.att, &b.gu, &b.act, &b.lmX}
		b.capT = 0
		for _, p := range ptrs {
			if *p != 0 {
				err := b.c.Free(*p)
				*p = 0
				if err != nil {
					return err
				}
			}
		}
		sizes := []int{T * c.HiddenSize * 4, T * c.HiddenSize * 2, T * b.qkvDim * 2, T * b.qDim * 2, T * 2 * c.IntermediateSize * 2, T * c.IntermediateSize * 2, T * c.HiddenSize * 2}
		for i, n := range sizes {
			p, err := b.c.Alloc(n)
			if err != nil {
				*ptrs[i] = 0
				return fmt.Errorf("cuda: step scratch for %d tokens: %w", T, err)
			}
			*ptrs[i] = p
		}
		b.capT = T
	}
	if rows > b.capRows {
		rows = max(rows, 2*b.capRows, 8)
		b.capRows = 0
		if b.logitsD != 0 {
			if err := b.c.Free(b.logitsD); err != nil {
				return err
			}
			b.logitsD = 0
		}
		if b.logitsHost.Ptr != nil {
			if err := b.c.FreeHost(b.logitsHost); err != nil {
				return err
			}
			b.logitsHost = HostBuffer{}
		}
		var err error
		if b.logitsD, err = b.c.Alloc(rows * c.VocabSize * 4); err != nil {
			return err
		}
		if b.logitsHost, err = b.c.HostAlloc(rows * c.VocabSize * 4); err != nil {
			return err
		}
		b.capRows = rows
	}
	if meta > b.capMeta {
		meta = max(meta, 2*b.capMeta, 1024)
		b.capMeta = 0
		if b.meta != 0 {
			if err := b.c.Free(b.meta); err != nil {
				return err
			}
			b.meta = 0
		}
		if b.metaHost.Ptr != nil {
			if err := b.c.FreeHost(b.metaHost); err != nil {
				return err
			}
			b.metaHost = HostBuffer{}
		}
		var err error
		if b.meta, err = b.c.Alloc(meta * 4); err != nil {
			return err
		}
		if b.metaHost, err = b.c.HostAlloc(meta * 4); err != nil {
			return err
		}
		b.capMeta = meta
	}
	return nil
}

// Forward runs one step (sched.Backend): every token of every chunk goes
// through each layer together; K and V are stored at each token's slot of
// its sequence's blocks; the logits of the chunks that want them are copied
// back. A pure decode step (one token per sequence, every one wanting
// logits) replays a CUDA graph of the batch-size bucket at or above its
// size, captured on the bucket's first use, unless NoGraphs is set.
func (b *Backend) Forward(ctx context.Context, bt *sched.Batch, logits [][]float32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if bt == nil {
		return fmt.Errorf("%w: nil batch", ErrBadBatch)
	}
	if err := b.validate(bt, logits); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cuda: forward: %w", err)
	}
	T, B := bt.Tokens(), len(bt.Seqs)
	if T == 0 {
		return nil
	}
	bs := b.opts.BlockSize
	btStride := 1
	rows := 0
	for i := range bt.Seqs {
		s := &bt.Seqs[i]
		btStride = max(btStride, (s.Pos+len(s.Tokens)+bs-1)/bs)
		if s.WantLogits {
			rows++
		}
	}
	// Graph steps use the bucket's fixed layout: Bk token rows (padding
	// rows store nothing: slot −1) and block tables of graphStride entries.
	Bk := 0
	if !b.opts.NoGraphs && !b.graphsOff && T == B && rows == B && btStride <= b.graphStride {
		Bk = b.bucket(B)
	}
	Tm, tableRows := T, B
	if Bk > 0 {
		Tm, tableRows, btStride = Bk, Bk, b.graphStride
	}
	b.hostMeta = stepMeta(b.hostMeta, bt, bs, Tm, tableRows, btStride)
	if Bk > 0 {
		return b.r.Do(ctx, func() error { return b.forwardGraph(ctx, logits, B, Bk) })
	}
	return b.r.Do(ctx, func() error { return b.forward(ctx, bt, logits, T, rows, btStride) })
}

// stepMeta lays out a step's int32 metadata in buf (reused when large
// enough): tokens, positions, KV slots and token→sequence rows for Tm token
// rows, then the block tables [tableRows][btStride]. Rows past the batch's
// tokens are graph-bucket padding: token 0 at position 0, slot −1 (stores
// nothing), each attending through its own all-zero table row.
func stepMeta(buf []int32, bt *sched.Batch, bs, Tm, tableRows, btStride int) []int32 {
	n := 4*Tm + tableRows*btStride
	if cap(buf) < n {
		buf = make([]int32, n)
	}
	m := buf[:n]
	tok, pos, slots, seq, tables := m[:Tm], m[Tm:2*Tm], m[2*Tm:3*Tm], m[3*Tm:4*Tm], m[4*Tm:]
	clear(tables)
	t := 0
	for i := range bt.Seqs {
		s := &bt.Seqs[i]
		for j, id := range s.Tokens {
			p := s.Pos + j
			tok[t], pos[t], seq[t] = id, int32(p), int32(i)
			slots[t] = s.Blocks[p/bs]*int32(bs) + int32(p%bs)
			t++
		}
		copy(tables[i*btStride:(i+1)*btStride], s.Blocks[:min(len(s.Blocks), btStride)])
	}
	for ; t < Tm; t++ {
		tok[t], pos[t], seq[t], slots[t] = 0, 0, int32(t), -1
	}
	return m
}

// DefaultGraphBuckets are the decode batch sizes graphs are captured for
// (a fresh slice each call).
func DefaultGraphBuckets() []int { return []int{1, 2, 4, 8, 16, 32, 64, 128, 256} }

// bucket is the smallest graph bucket holding n sequences, 0 if none.
func (b *Backend) bucket(n int) int {
	for _, k := range b.buckets {
		if k >= n {
			return k
		}
	}
	return 0
}

// GraphLaunches counts decode steps that replayed a captured graph.
func (b *Backend) GraphLaunches() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.graphLaunches
}

// upMeta copies the step's metadata to the device (runner thread).
func (b *Backend) upMeta() error {
	m := b.hostMeta
	copy(unsafe.Slice((*int32)(b.metaHost.Ptr), len(m)), m)
	return b.s.CopyHtoDAsync(b.meta, b.metaHost.Ptr, len(m)*4)
}

// padRows is the row count a GEMM over n rows runs with: n itself up to 4
// (decode steps, graph buckets 1, 2, 4), else the next power of two, at
// most the scratch capacity. cuBLASLt picks (and lazily loads) a kernel per
// shape, and a first request of an unseen length paid that on its critical
// path (tens of ms on the H100); with padding, the shapes are the handful
// the load warm-up runs. The extra rows compute on stale scratch and are
// never read: every kernel after a GEMM works on the step's n rows, and
// the next step's embedding rewrites the residual rows it uses. A GEMM at
// these sizes streams the weights once however many rows it has, so the
// padding costs no measurable time.
func padRows(n, capacity int) int {
	if n <= 4 {
		return n
	}
	p := 8
	for p < n {
		p <<= 1
	}
	return max(n, min(p, capacity))
}

func (b *Backend) gemm(y, x, w DevicePtr, M, N, K int, out DType, acc bool) error {
	return b.blas.Gemm(b.s, GemmShape{M: M, N: N, K: K, In: BF16, Out: out}, y, x, w, acc)
}

// enqueueLayers enqueues the embedding and every layer for T token rows
// whose metadata sits at b.meta in the layout Forward writes (runner
// thread). The residual stream ends in b.x.
func (b *Backend) enqueueLayers(ctx context.Context, T, btStride int) error {
	c := b.cfg
	H, I := c.HiddenSize, c.IntermediateSize
	eps := float32(c.RMSNormEps)
	dTok, dPos, dSlots, dSeq := b.meta, b.meta+DevicePtr(4*T), b.meta+DevicePtr(8*T), b.meta+DevicePtr(12*T)
	dTables := b.meta + DevicePtr(16*T)
	shape := AttnShape{c.NumHeads, c.NumKVHeads, c.HeadDim, b.opts.BlockSize}
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	k, s := b.k, b.s
	M := padRows(T, b.capT)
	if err := k.Embed(s, b.x, b.embed, dTok, T, H); err != nil {
		return err
	}
	for li := range b.layers {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cuda: forward at layer %d: %w", li, err)
		}
		l := &b.layers[li]
		steps := []func() error{
			func() error { return k.RMSNorm(s, b.h, b.x, l.attnNorm, T, H, eps) },
			func() error { return b.gemm(b.qkv, b.h, l.qkv, M, b.qkvDim, H, BF16, false) },
			func() error {
				return k.QKNormRopeStore(s, shape, RopeStoreArgs{QKV: b.qkv, Bias: l.qkvBias, QNorm: l.qNorm, KNorm: l.kNorm,
					InvFreq: b.invFreq, Pos: dPos, Slots: dSlots, KCache: l.k, VCache: l.v, T: T, Eps: eps})
			},
			func() error {
				return k.PagedAttention(s, shape, AttentionArgs{Out: b.att, Q: b.qkv, QStride: b.qkvDim, KCache: l.k, VCache: l.v,
					TokSeq: dSeq, Pos: dPos, BlockTables: dTables, BTStride: btStride, T: T, Scale: scale})
			},
			// o_proj accumulates straight into the f32 residual (beta = 1).
			func() error { return b.gemm(b.x, b.att, l.o, M, H, b.qDim, F32, true) },
			func() error {
				if l.oBias == 0 {
					return nil
				}
				return k.BiasAddF32(s, b.x, l.oBias, T, H)
			},
			func() error { return k.RMSNorm(s, b.h, b.x, l.mlpNorm, T, H, eps) },
			func() error { return b.gemm(b.gu, b.h, l.gu, M, 2*I, H, BF16, false) },
			func() error { return k.SwiGLU(s, b.act, b.gu, T, I) },
			func() error { return b.gemm(b.x, b.act, l.down, M, H, I, F32, true) },
		}
		for _, f := range steps {
			if err := f(); err != nil {
				return fmt.Errorf("cuda: layer %d: %w", li, err)
			}
		}
	}
	return nil
}

// forward is the eager step (runner thread).
func (b *Backend) forward(ctx context.Context, bt *sched.Batch, logits [][]float32, T, rows, btStride int) error {
	c := b.cfg
	H, V := c.HiddenSize, c.VocabSize
	if err := b.grow(T, max(rows, 1), len(b.hostMeta)); err != nil {
		return err
	}
	if err := b.upMeta(); err != nil {
		return err
	}
	if err := b.enqueueLayers(ctx, T, btStride); err != nil {
		return err
	}
	s := b.s
	if rows == 0 {
		return s.Synchronize()
	}
	// Final norm over every row (cheap), then gather the rows that want
	// logits and run the LM head on them only.
	if err := b.k.RMSNorm(s, b.h, b.x, b.finalNorm, T, H, float32(c.RMSNormEps)); err != nil {
		return err
	}
	n, t := 0, 0
	for i := range bt.Seqs {
		sq := &bt.Seqs[i]
		t += len(sq.Tokens)
		if !sq.WantLogits {
			continue
		}
		if err := s.CopyDtoDAsync(b.lmX+DevicePtr(n*H*2), b.h+DevicePtr((t-1)*H*2), H*2); err != nil {
			return err
		}
		n++
	}
	if err := b.gemm(b.logitsD, b.lmX, b.lmHead, padRows(n, b.capRows), V, H, F32, false); err != nil {
		return fmt.Errorf("cuda: lm_head: %w", err)
	}
	if err := b.fetchLogits(n); err != nil {
		return err
	}
	host := unsafe.Slice((*float32)(b.logitsHost.Ptr), n*V)
	n = 0
	for i := range bt.Seqs {
		if bt.Seqs[i].WantLogits {
			copy(logits[i][:V], host[n*V:(n+1)*V])
			n++
		}
	}
	return nil
}

// fetchLogits copies n logits rows back and waits for the step.
func (b *Backend) fetchLogits(n int) error {
	if err := b.s.CopyDtoHAsync(b.logitsHost.Ptr, b.logitsD, n*b.cfg.VocabSize*4); err != nil {
		return err
	}
	if err := b.s.Synchronize(); err != nil {
		return fmt.Errorf("cuda: forward: %w", err)
	}
	return nil
}

// enqueueDecode is a whole decode step over Bk rows in the graph layout:
// layers, final norm and LM head on every row (runner thread).
func (b *Backend) enqueueDecode(ctx context.Context, Bk int) error {
	c := b.cfg
	if err := b.enqueueLayers(ctx, Bk, b.graphStride); err != nil {
		return err
	}
	if err := b.k.RMSNorm(b.s, b.h, b.x, b.finalNorm, Bk, c.HiddenSize, float32(c.RMSNormEps)); err != nil {
		return err
	}
	return b.gemm(b.logitsD, b.h, b.lmHead, Bk, c.VocabSize, c.HiddenSize, F32, false)
}

// forwardGraph runs a decode step of B sequences through bucket Bk's graph,
// capturing it first when the bucket is new: that step runs eagerly in the
// graph's layout (which also builds the GEMM plans the capture needs), then
// the same sequence is captured for the next steps (runner thread).
func (b *Backend) forwardGraph(ctx context.Context, logits [][]float32, B, Bk int) error {
	V := b.cfg.VocabSize
	if err := b.grow(Bk, Bk, len(b.hostMeta)); err != nil {
		return err
	}
	if err := b.upMeta(); err != nil {
		return err
	}
	g := b.graphs[Bk]
	if g != nil {
		if err := g.Launch(b.s); err != nil {
			return err
		}
		b.graphLaunches++
	} else if err := b.enqueueDecode(ctx, Bk); err != nil {
		return err
	}
	if err := b.fetchLogits(B); err != nil {
		return err
	}
	host := unsafe.Slice((*float32)(b.logitsHost.Ptr), B*V)
	for i := 0; i < B; i++ {
		copy(logits[i][:V], host[i*V:(i+1)*V])
	}
	if g == nil {
		b.capture(Bk)
	}
	return nil
}

// capture records bucket Bk's decode graph. A failure turns graphs off
// for this backend (eager steps stay correct) and is reported as a
// graph_capture stage with the error.
func (b *Backend) capture(Bk int) {
	t0 := time.Now()
	err := b.s.BeginCapture()
	if err == nil {
		err = b.enqueueDecode(context.Background(), Bk)
		g, err2 := b.s.EndCapture()
		if err == nil && err2 == nil {
			b.graphs[Bk] = g
		} else if g != nil {
			g.Destroy()
		}
		err = errors.Join(err, err2)
	}
	attrs := trace.Attrs{"bucket": Bk, "layers": len(b.layers), "buckets_captured": len(b.graphs)}
	if err != nil {
		b.graphsOff = true
		attrs["error"] = err.Error()
	}
	b.stage(trace.StageGraphCapture, t0, attrs)
}

// dropGraphs destroys the captured graphs (their buffers were reallocated).
func (b *Backend) dropGraphs() error {
	var errs []error
	for k, g := range b.graphs {
		errs = append(errs, g.Destroy())
		delete(b.graphs, k)
	}
	return errors.Join(errs...)
}
