package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// Attention picks the attention kernel: AttentionFlash (default: the
	// tensor-core attn_mma where it covers the shape, paged_attention
	// otherwise), AttentionFlash4 or AttentionPaged; AttentionEnv
	// overrides it.
	Attention string
	// Gemm picks who runs the GEMMs: GemmAuto (the default), GemmCublasLt
	// or GemmSkinny; GemmEnv overrides it. See gemmOnSkinny.
	Gemm string
	// Fuse is FuseOff (the default) or FuseOn: whether the GEMMs of decode
	// steps of a few rows take their operand through the RMSNorm or
	// SwiGLU in front of them (fusedOperand); FuseEnv overrides it. Off
	// by default: on the H100 it made the 4B-shaped batch-1 step slower
	// (4.02 against 3.85 ms) and the 0.6B-shaped one faster (1.14 against
	// 1.20 ms), same call; docs/BENCHMARKS.md.
	Fuse string
	// PDL is PDLOn (the default) or PDLOff: whether kernels launch with
	// programmatic dependent launch where the device and driver allow it
	// (Kernels.SetPDL); PDLEnv overrides it.
	PDL string
	// SkinnyNarrow is SkinnyNarrowAuto (the default), SkinnyNarrowOn or
	// SkinnyNarrowOff: which GEMMs of up to 8 rows gemm_skinny runs on
	// blocks of 8 output features (Kernels.SetSkinnyNarrow): by default
	// those whose 16-feature blocks would be at most 1.5 per SM
	// (SkinnyNarrowAuto); SkinnyNarrowEnv overrides it.
	SkinnyNarrow string
	// SkinnyRows is SkinnyRows16 (the default) or SkinnyRows8: the most
	// rows GemmAuto keeps on gemm_skinny in eager steps once cuBLASLt has
	// run the shape (see skinnyEager); SkinnyRowsEnv overrides it.
	SkinnyRows string
	// DecodeAttention is DecodeAttentionOn (the default) or
	// DecodeAttentionOff: whether a step whose warp tiles each hold one
	// token (a decode step) runs them on attn_dec, where the shape has it
	// (FlashDecodeKernel), rather than attn_mma_w1; DecodeAttentionEnv
	// overrides it.
	DecodeAttention string
	// RunnerSpin is RunnerSpinOn (the default) or RunnerSpinOff: whether,
	// once loaded and with four or more Go processors, the backend's CUDA
	// thread and its callers poll for each other's hand-over instead of
	// blocking at once (Runner.SetSpin; a core busy while a step runs,
	// the GPU's wait between steps shorter); RunnerSpinEnv overrides it.
	RunnerSpin string
	// NoLoadWarmup skips the warm-up that runs while the weights upload
	// (the batch-1 decode step's cuBLASLt plans and lazily loaded kernels,
	// and its graph's capture; see warmup.go); those costs then fall on
	// the first request.
	NoLoadWarmup bool
	// SleepMode allocates the weights and the KV pool through the
	// driver's virtual memory API (vmm.go), so that Sleep can give their
	// memory back and Wake take it again at the same addresses, keeping
	// the captured decode graphs (sleep.go). Off: plain cuMemAlloc.
	SleepMode bool
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
	mu   sync.Mutex
	r    *Runner
	d    *Driver
	c    *Context
	k    *Kernels
	blas *BLAS
	// warm says which GEMM shapes cuBLASLt has run (blaswarm.go); it is
	// shared with the thread that warms cuBLASLt beside the steps.
	warm   blasWarmth
	s      *Stream
	cfg    model.Config
	opts   BackendOptions
	closed bool
	stages []StageRecord
	info   DeviceInfo

	qDim, kvDim, qkvDim int
	weights, smalls     DevicePtr // the two weight allocations
	weightsBytes        int64
	smallsBytes         int
	dir                 string       // the checkpoint's directory (a level-2 wake reads it again)
	files               []model.File // its weight files as loaded
	sl                  sleepState   // sleep mode (sleep.go)
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
	rope                    DevicePtr // the step's RoPE cos/sin, f32 [capT][HeadDim/2][2] (RopeTable)
	lmX, logitsD, meta      DevicePtr
	metaHost, logitsHost    HostBuffer
	hostMeta                []int32
	rowSeq                  []int     // the step's logits rows: row j is sequence rowSeq[j]
	hostRows                int       // logits rows logitsHost holds
	sampleD                 DevicePtr // token choice arrays for capRows rows (tokens.go)
	sampleHost              HostBuffer
	flashD                  DevicePtr // attn_mma's split partials, capScratch bytes (flashScratchFor)
	capScratch              int
	flashRes                FlashResidency // attn_mma blocks a multiprocessor holds (loadKernels)
	staging                 *stagingLeft   // what the staged upload left to release (releaseStaging)
	metaTableRows           int            // block-table rows of the metadata in hostMeta
	metaTiles               FlashTiles     // attention tiles of the metadata in hostMeta, by form

	// Decode graphs per batch-size bucket, captured lazily.
	buckets       []int
	graphStride   int // block-table entries per sequence in graph steps
	graphs        map[int]*Graph
	graphsOff     bool // a capture failed: eager steps only
	graphLaunches int
	capturing     bool           // a decode graph is being captured (runner thread; gemmOnSkinny)
	recorded      *recordedGraph // recorded by a background item, to instantiate off the runner (b.mu)
	scratchGen    int            // counts the step scratch's reallocations (grow; runner thread)

	// pending counts calls waiting for or holding mu to run device work;
	// the background warm-up (warmup.go) runs only while it is 0.
	pending  atomic.Int32
	lastDone atomic.Int64 // when the last such call let go of mu (Unix ns; 0: none yet)
	bgCancel context.CancelFunc
	bgDone   chan struct{}

	prof *stepProfiler // the GPU profiling test's only (profile.go)
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
	return s.Load(context.Background(), ck, opts)
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

// Attention kernels of BackendOptions.Attention.
const (
	AttentionFlash = "flash"
	// AttentionFlash4 is attn_mma on its two-m-tile four-warp form only
	// (the one-warp and mid forms for short tiles off), for comparisons.
	AttentionFlash4 = "flash4"
	AttentionPaged  = "paged"
)

// AttentionEnv overrides BackendOptions.Attention when set (flash, flash4
// or paged), so benchmarks can compare the kernels on one binary.
const AttentionEnv = "TRENI_CUDA_ATTENTION"

// attentionMode resolves BackendOptions.Attention and AttentionEnv.
func attentionMode(opt string) (string, error) {
	return envChoice("attention kernel", AttentionEnv, opt, AttentionFlash, AttentionPaged, AttentionFlash4)
}

// useFlash says whether steps run attn_mma (FlashAttention).
func (b *Backend) useFlash() bool {
	return (b.opts.Attention == AttentionFlash || b.opts.Attention == AttentionFlash4) && FlashSupported(b.attnShape())
}

// warpTileTokens is the most tokens a tile may hold to run on one warp
// (attn_mma_w1), 0 when no tile does.
func (b *Backend) warpTileTokens() int {
	if b.opts.Attention != AttentionFlash || !b.useFlash() {
		return 0
	}
	return FlashWarpTokens(b.attnShape())
}

// midTileTokens is the most tokens a tile may hold to run on the mid
// form (attn_mma_mid), 0 when no tile does.
func (b *Backend) midTileTokens() int {
	if b.warpTileTokens() == 0 {
		return 0
	}
	return FlashMidTokens(b.attnShape())
}

// attentionKernel names the attention kernel steps run, for the stages.
func (b *Backend) attentionKernel() string {
	switch {
	case !b.useFlash():
		return "paged_attention"
	case b.warpTileTokens() == 0:
		return "attn_mma (two-m-tile four-warp blocks only)"
	}
	return "attn_mma"
}

// GEMM paths of BackendOptions.Gemm.
const (
	// GemmAuto runs the GEMMs of at most SkinnyAutoRows rows (and those
	// skinnyEager names) on gemm_skinny, and those of up to SkinnyMaxRows
	// rows there too until
	// cuBLASLt has run their shape once (in the background warm-up), so
	// that no request waits for cuBLASLt's lazily loaded kernels; the
	// rest on cuBLASLt.
	GemmAuto = "auto"
	// GemmCublasLt runs every GEMM on cuBLASLt (the comparison).
	GemmCublasLt = "cublaslt"
	// GemmSkinny runs every GEMM gemm_skinny fits on it.
	GemmSkinny = "skinny"
)

// GemmEnv overrides BackendOptions.Gemm when set (auto, cublaslt or
// skinny), so benchmarks can compare the paths on one binary.
const GemmEnv = "TRENI_CUDA_GEMM"

// Settings of BackendOptions.Fuse.
const (
	FuseOn  = "on"
	FuseOff = "off"
)

// FuseEnv overrides BackendOptions.Fuse when set (on or off), so
// benchmarks can compare fused and unfused steps on one binary.
const FuseEnv = "TRENI_CUDA_FUSE"

// fuseMode resolves BackendOptions.Fuse and FuseEnv.
func fuseMode(opt string) (string, error) {
	return envChoice("kernel fusion", FuseEnv, opt, FuseOff, FuseOn)
}

// Settings of BackendOptions.PDL.
const (
	PDLOn  = "on"
	PDLOff = "off"
)

// PDLEnv overrides BackendOptions.PDL when set (on or off), so
// benchmarks can compare launches with and without programmatic
// dependent launch on one binary.
const PDLEnv = "TRENI_CUDA_PDL"

// pdlMode resolves BackendOptions.PDL and PDLEnv.
func pdlMode(opt string) (string, error) {
	return envChoice("programmatic dependent launch", PDLEnv, opt, PDLOn, PDLOff)
}

// Settings of BackendOptions.RunnerSpin.
const (
	RunnerSpinOn  = "on"
	RunnerSpinOff = "off"
)

// RunnerSpinEnv overrides BackendOptions.RunnerSpin when set (on or off),
// so benchmarks can compare the two on one binary.
const RunnerSpinEnv = "TRENI_CUDA_RUNNER_SPIN"

// runnerSpinMode resolves BackendOptions.RunnerSpin and RunnerSpinEnv.
func runnerSpinMode(opt string) (string, error) {
	return envChoice("CUDA thread polling", RunnerSpinEnv, opt, RunnerSpinOn, RunnerSpinOff)
}

// The spinning runner's poll budgets: the CUDA thread waits this long for
// the next call (a decode loop's next step comes tens of µs after the
// last), and a step's caller this long for its result (a decode step of a
// few ms; a longer prefill step blocks after it).
const (
	runnerNextSpin   = 200 * time.Microsecond
	runnerResultSpin = 20 * time.Millisecond
)

// spinAfterLoad turns the runner's polling on for a loaded backend under
// RunnerSpinOn. Not during the load: its upload readers want every core
// (a load with a polling runner ran slower on the H100, docs/BENCHMARKS.md).
func (b *Backend) spinAfterLoad() {
	if runnerPolls(b.opts.RunnerSpin, runtime.GOMAXPROCS(0)) {
		b.r.SetSpin(runnerNextSpin, runnerResultSpin)
	}
}

// runnerPolls says whether the runner polls under mode with procs Go
// processors: only with cores to spare. The CUDA thread polls without
// yielding (its goroutine is locked to the thread), so with one or two
// processors it would hold the processor the caller needs to hand it the
// next call.
func runnerPolls(mode string, procs int) bool { return mode == RunnerSpinOn && procs >= 4 }

// Settings of BackendOptions.SkinnyNarrow.
const (
	SkinnyNarrowAutoMode = "auto"
	SkinnyNarrowOn       = "on"
	SkinnyNarrowOff      = "off"
)

// SkinnyNarrowEnv overrides BackendOptions.SkinnyNarrow when set (auto,
// on or off), so benchmarks can compare the block shapes on one binary.
const SkinnyNarrowEnv = "TRENI_CUDA_SKINNY_N8"

// skinnyNarrowMode resolves BackendOptions.SkinnyNarrow and
// SkinnyNarrowEnv.
func skinnyNarrowMode(opt string) (string, error) {
	return envChoice("gemm_skinny block width", SkinnyNarrowEnv, opt, SkinnyNarrowAutoMode, SkinnyNarrowOn, SkinnyNarrowOff)
}

// skinnyNarrowN is the largest N mode runs on 8-feature blocks on a GPU
// of sms multiprocessors.
func skinnyNarrowN(mode string, sms int) int {
	switch mode {
	case SkinnyNarrowOn:
		return 1 << 30
	case SkinnyNarrowOff:
		return 0
	}
	return SkinnyNarrowAuto(sms)
}

// Settings of BackendOptions.DecodeAttention.
const (
	DecodeAttentionOn  = "on"
	DecodeAttentionOff = "off"
)

// DecodeAttentionEnv overrides BackendOptions.DecodeAttention when set (on
// or off), so benchmarks can compare attn_dec with attn_mma_w1 on one
// binary.
const DecodeAttentionEnv = "TRENI_CUDA_ATTN_DEC"

// decodeAttentionMode resolves BackendOptions.DecodeAttention and
// DecodeAttentionEnv.
func decodeAttentionMode(opt string) (string, error) {
	return envChoice("decode attention", DecodeAttentionEnv, opt, DecodeAttentionOn, DecodeAttentionOff)
}

// Settings of BackendOptions.SkinnyRows.
const (
	SkinnyRows16 = "16"
	SkinnyRows8  = "8"
)

// SkinnyRowsEnv overrides BackendOptions.SkinnyRows when set (16 or 8), so
// benchmarks can compare the paths of 9–16-row GEMMs on one binary.
const SkinnyRowsEnv = "TRENI_CUDA_SKINNY_ROWS"

// skinnyRowsMode resolves BackendOptions.SkinnyRows and SkinnyRowsEnv.
func skinnyRowsMode(opt string) (string, error) {
	return envChoice("gemm_skinny rows", SkinnyRowsEnv, opt, SkinnyRows16, SkinnyRows8)
}

// SkinnyAutoRows is the most rows GemmAuto gives gemm_skinny once
// cuBLASLt is warm, in every step: where it streams the weights at least
// as fast as cuBLASLt on the lent H100 (docs/BENCHMARKS.md). Eager steps
// keep more on it (skinnyEager).
const SkinnyAutoRows = 8

// skinnyEagerK is the largest K whose GEMMs of 9–16 rows an eager step
// keeps on gemm_skinny under SkinnyRows16.
const skinnyEagerK = 4096

// skinnyEager says whether GemmAuto keeps a GEMM of M rows and K inputs
// on gemm_skinny in an eager step (not a graph capture: skinnyOnceWarm)
// once cuBLASLt has run its shape: under SkinnyRows16, 9–16 rows where
// K ≤ skinnyEagerK.
//
// Why eager steps only: the 1k prefix hit (one eager step of 9 token
// rows, GEMMs padded to 16) answered in 5.00–5.10 ms against 5.33 on
// cuBLASLt (H100, same call; 4.39 against 4.63 on an H200), while the
// 16-stream decode step, a graph, was 0.1 ms slower with these GEMMs on
// gemm_skinny (H200: TPOT 4.45 against 4.34 ms), so graphs keep cuBLASLt.
// Our reading: at 16 rows cuBLASLt runs o_proj as a split-K GEMM and a
// reduction, two launches where gemm_skinny needs one, which an eager step
// pays on the host and a graph does not.
//
// Why K ≤ 4,096: every block of gemm_skinny_m16 reads all M rows of X,
// and down_proj's (K = 9,728, 311 KB at 16 rows) no longer stays in L1:
// 26.1 µs against cuBLASLt's 23.2 at 9 rows (H100,
// TestGPUGemmSkinnyStream; docs/BENCHMARKS.md).
func (b *Backend) skinnyEager(M, K int) bool {
	return M > SkinnyAutoRows && M <= 16 && K <= skinnyEagerK && b.opts.SkinnyRows != SkinnyRows8
}

// gemmMode resolves BackendOptions.Gemm and GemmEnv.
func gemmMode(opt string) (string, error) {
	return envChoice("GEMM path", GemmEnv, opt, GemmAuto, GemmCublasLt, GemmSkinny)
}

// uploadMode resolves BackendOptions.Upload and UploadEnv.
func uploadMode(opt string) (string, error) {
	return envChoice("upload mode", UploadEnv, opt, UploadStaged, UploadMapped)
}

// envChoice resolves an option that the environment variable env
// overrides when set: "" is choices[0] (the default), any other value must
// be one of choices.
func envChoice(what, env, opt string, choices ...string) (string, error) {
	if v := os.Getenv(env); v != "" {
		opt = v
	}
	if opt == "" {
		return choices[0], nil
	}
	if slices.Contains(choices, opt) {
		return opt, nil
	}
	return "", fmt.Errorf("cuda: %s %q is not one of %s (check %s)", what, opt, strings.Join(choices, ", "), env)
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
	b.stopBackground()
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

// ownAllocs are the device allocations the backend owns, each freed once
// by free (the other DevicePtr fields point into these:
// TestOwnAllocsCoverDeviceFields keeps the two lists apart).
func (b *Backend) ownAllocs() []*DevicePtr {
	return []*DevicePtr{&b.weights, &b.smalls, &b.kv, &b.x, &b.h, &b.qkv, &b.att, &b.gu, &b.act, &b.rope, &b.lmX, &b.logitsD,
		&b.meta, &b.sampleD, &b.flashD}
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
	keep(b.releaseStaging())
	keep(b.c.Synchronize())
	keep(b.dropGraphs())
	keep(b.freeSleep())
	for _, p := range b.ownAllocs() {
		if *p != 0 {
			keep(b.c.Free(*p))
		}
	}
	if b.metaHost.Ptr != nil {
		keep(b.c.FreeHost(b.metaHost))
	}
	if b.logitsHost.Ptr != nil {
		keep(b.c.FreeHost(b.logitsHost))
	}
	if b.sampleHost.Ptr != nil {
		keep(b.c.FreeHost(b.sampleHost))
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
