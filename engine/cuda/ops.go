package cuda

import (
	"errors"
	"fmt"
	"math"
)

// KernelNames lists every kernel of kernels/kernels.cu that Kernels binds
// (a fresh slice each call).
func KernelNames() []string {
	return []string{
		"embed_bf16", "rmsnorm", "add_rmsnorm", "add_f32", "bias_add_bf16", "bias_add_f32", "swiglu",
		"rope_table", "qk_norm_rope_store", "paged_attention", "attn_mma_hd64", "attn_mma_hd128", "attn_mma_w1_hd64",
		"attn_mma_w1_hd128", "attn_mma_mid_hd64", "attn_mma_mid_hd128", "attn_dec_g2", "attn_dec_g4", "attn_combine",
		"gemm_skinny_m8", "gemm_skinny_m16", "gemm_skinny_m32", "gemm_skinny_m64",
		"gemm_skinny_m8_norm", "gemm_skinny_m8_swiglu", "gemm_skinny_n8_m8",
		"argmax_f32", "sample_part", "sample_pick",
	}
}

// Launch shapes; they must match the kernels' assumptions (kernels.cu).
const (
	rowThreads    = 256 // norms, embedding, SwiGLU, bias add
	ropeHeads     = 4   // ROPE_HEADS: qk_norm_rope_store's heads (warps) per block
	attnThreads   = 128 // ATT_THREADS
	attnMaxDim    = 256 // 64 × ATT_PAIRS
	flashWarps    = 4   // FA_WARPS: the four-warp attn_mma's warps
	flashRows     = 32  // FA_ROWS: query rows a warp of the four-warp attn_mma owns
	flashKeys     = 32  // FA_KEYS: the four-warp attn_mma's key tile
	flashMaxSplit = 16  // the most KV splits Flash launches
	// flashSplitKeys is the fewest keys a split of the mid or the
	// two-m-tile attn_mma gets (FlashSplits): four of the latter's key
	// tiles, two of the former's.
	flashSplitKeys = 4 * flashKeys
	sampleThreads  = 1024 // SAMPLE_THREADS: argmax_f32's and sample_pick's block
	// sampleSegs is SAMPLE_SEGS, the segments sample_part cuts a row
	// into, and samplePartThreads its block (SAMPLE_PART_THREADS).
	sampleSegs        = 32
	samplePartThreads = 256
	// SamplePartBytesPerRow is the scratch sample_part fills for a row
	// (SampleArgs.Part): per segment its max, index and mass.
	SamplePartBytesPerRow = sampleSegs * 3 * 4
	skinnyThreads         = 256 // GS_WARPS · 32: gemm_skinny's block
	// SkinnyMaxRows is the most rows gemm_skinny takes (its widest form,
	// gemm_skinny_m64).
	SkinnyMaxRows = 64
)

// ErrBadLaunch is wrapped by a kernel wrapper's error when its arguments
// cannot be launched (a size out of the kernel's range).
var ErrBadLaunch = errors.New("cuda: invalid kernel arguments")

// Kernels is the loaded fatbin with typed launchers for each kernel. The
// launchers share one argument block, so a Kernels belongs to one thread
// (the runner's), like its Context. Pointers are device addresses.
type Kernels struct {
	m    *Module
	fn   map[string]*Function
	args *Args
	// pdl launches every kernel with programmatic dependent launch
	// (SetPDL).
	pdl bool
	// narrowN is the largest N that GemmSkinny of up to 8 rows runs on
	// 8-feature blocks (SetSkinnyNarrow); 0: never.
	narrowN int
}

// SetSkinnyNarrow makes GemmSkinny run GEMMs of up to 8 rows and at most
// maxN outputs on blocks of 8 output features (gemm_skinny_n8_m8) rather
// than 16, twice the blocks: for N/16 too few to give every SM its share
// of the weight stream. 0 turns it off.
func (k *Kernels) SetSkinnyNarrow(maxN int) { k.narrowN = maxN }

// SkinnyNarrowAuto is the largest N the backend runs on 8-feature blocks
// by default on a GPU of sms multiprocessors: where 16-feature blocks
// would be at most 1.5 per SM. On the H100 (132 SMs) that takes the 4B
// o_proj and down_proj (N = 2,560: 160 blocks → 320) and the 0.6B ones
// (1,024), which streamed their weights 7–15% faster at one row, and
// leaves the 0.6B qkv (4,096: 256 blocks), which was 7% slower on them
// (TestGPUGemmSkinnyStream, docs/BENCHMARKS.md).
func SkinnyNarrowAuto(sms int) int { return 24 * sms }

// SetPDL turns programmatic dependent launch on or off for the kernels
// launched from now on: each may then be scheduled while the kernel ahead
// of it in the stream finishes, and waits for it on the device
// (KERNEL_ENTRY). That shortens the gaps between the ~360 kernels of a
// batch-1 decode step: 3.5% of the 4B-shaped step and 10% of the
// 0.6B-shaped one on the H100 (docs/BENCHMARKS.md). Only where the driver has
// cuLaunchKernelEx and the device is compute capability 9.0 or later
// (griddepcontrol is sm_90 PTX); it reports whether PDL is now on.
func (k *Kernels) SetPDL(on bool, dev DeviceInfo) bool {
	k.pdl = on && dev.CCMajor >= 9 && k.m.c.d.HasPDL()
	return k.pdl
}

// LoadKernels loads KernelImage() (the embedded fatbin or FatbinEnv) and
// resolves every kernel in KernelNames.
func (c *Context) LoadKernels() (*Kernels, error) {
	img, err := KernelImage()
	if err != nil {
		return nil, err
	}
	return c.LoadKernelsFrom(img)
}

// LoadKernelsFrom is LoadKernels with the image given.
func (c *Context) LoadKernelsFrom(image []byte) (*Kernels, error) {
	m, err := c.LoadModule(image)
	if err != nil {
		return nil, fmt.Errorf("load treni-top kernels (is the fatbin built for this GPU's architecture? run make kernels): %w", err)
	}
	k := &Kernels{m: m, fn: map[string]*Function{}, args: NewArgs(20)}
	for _, n := range KernelNames() {
		f, err := m.Function(n)
		if err != nil {
			k.Close()
			return nil, fmt.Errorf("fatbin lacks a kernel (rebuild it with make kernels): %w", err)
		}
		k.fn[n] = f
	}
	for _, hd := range []int{64, 128} {
		_, _, w4 := flashKernels(hd)
		if err := k.fn[w4].SetMaxDynamicShared(flashSharedBytes(hd)); err != nil {
			k.Close()
			return nil, err
		}
	}
	return k, nil
}

// Close unloads the module.
func (k *Kernels) Close() error {
	if k == nil || k.m == nil {
		return nil
	}
	k.args.Free()
	err := k.m.Unload()
	k.m = nil
	return err
}

func (k *Kernels) launch(name string, grid, block Dim3, s *Stream) error {
	return k.launchShared(name, grid, block, 0, s)
}

// launchShared is launch with smem bytes of dynamic shared memory.
func (k *Kernels) launchShared(name string, grid, block Dim3, smem int, s *Stream) error {
	if k.pdl {
		return k.fn[name].LaunchPDL(grid, block, uint32(smem), s, k.args)
	}
	return k.fn[name].Launch(grid, block, uint32(smem), s, k.args)
}

func positive(what string, vs ...int) error {
	for _, v := range vs {
		if v <= 0 || v > 1<<31-1 {
			return fmt.Errorf("%w: %s has size %d", ErrBadLaunch, what, v)
		}
	}
	return nil
}

// Embed gathers rows of a bf16 table [V,H] for tokens (int32 [T]) into the
// f32 residual x [T,H].
func (k *Kernels) Embed(s *Stream, x, table, tokens DevicePtr, T, H int) error {
	if err := positive("embed", T, H); err != nil {
		return err
	}
	k.args.Reset().Ptr(x).Ptr(table).Ptr(tokens).I32(int32(H))
	return k.launch("embed_bf16", Dim3{uint32(T), 1, 1}, Dim3{rowThreads, 1, 1}, s)
}

// RMSNorm writes out[t] = RMSNorm(x[t])·w: x f32 [T,H], w f32 [H], out bf16.
func (k *Kernels) RMSNorm(s *Stream, out, x, w DevicePtr, T, H int, eps float32) error {
	return k.RMSNormRows(s, out, x, w, 0, T, H, eps)
}

// RMSNormRows writes out[j] = RMSNorm(x[rows[j]])·w for the n rows listed
// in rows (int32 [n] on the device), or for x's first n rows when rows is
// 0: the final norm of the rows that want logits and their gather for the
// LM head in one launch.
func (k *Kernels) RMSNormRows(s *Stream, out, x, w, rows DevicePtr, n, H int, eps float32) error {
	if err := positive("rmsnorm", n, H); err != nil {
		return err
	}
	k.args.Reset().Ptr(out).Ptr(x).Ptr(w).I32(int32(H)).F32(eps).Ptr(rows)
	return k.launch("rmsnorm", Dim3{uint32(n), 1, 1}, Dim3{normThreads(H), 1, 1}, s)
}

// normThreads is rmsnorm's block size for rows of H: two float4 of the
// row a thread (its register form, kernels.cu), in whole warps, 64 to
// 1,024 threads. Each row is one block either way.
func normThreads(H int) uint32 {
	n := (H/4 + 1) / 2
	return uint32(min(max((n+31)&^31, 64), 1024))
}

// AddRMSNorm adds d (f32 [T,H]) into the residual x, then writes
// out = RMSNorm(x)·w (bf16).
func (k *Kernels) AddRMSNorm(s *Stream, x, d, out, w DevicePtr, T, H int, eps float32) error {
	if err := positive("add_rmsnorm", T, H); err != nil {
		return err
	}
	k.args.Reset().Ptr(x).Ptr(d).Ptr(out).Ptr(w).I32(int32(H)).F32(eps)
	return k.launch("add_rmsnorm", Dim3{uint32(T), 1, 1}, Dim3{rowThreads, 1, 1}, s)
}

// AddF32 adds d into x, n f32 elements.
func (k *Kernels) AddF32(s *Stream, x, d DevicePtr, n int) error {
	if err := positive("add_f32", n); err != nil {
		return err
	}
	k.args.Reset().Ptr(x).Ptr(d).I32(int32(n))
	return k.launch("add_f32", Dim3{uint32((n + rowThreads - 1) / rowThreads), 1, 1}, Dim3{rowThreads, 1, 1}, s)
}

// BiasAddBF16 adds the f32 bias b [cols] to every row of y (bf16 [rows,cols]).
func (k *Kernels) BiasAddBF16(s *Stream, y, b DevicePtr, rows, cols int) error {
	if err := positive("bias_add_bf16", rows, cols); err != nil {
		return err
	}
	k.args.Reset().Ptr(y).Ptr(b).I32(int32(cols))
	return k.launch("bias_add_bf16", Dim3{uint32(rows), 1, 1}, Dim3{rowThreads, 1, 1}, s)
}

// BiasAddF32 adds the f32 bias b [cols] to every row of x (f32 [rows,cols]).
func (k *Kernels) BiasAddF32(s *Stream, x, b DevicePtr, rows, cols int) error {
	if err := positive("bias_add_f32", rows, cols); err != nil {
		return err
	}
	k.args.Reset().Ptr(x).Ptr(b).I32(int32(cols))
	return k.launch("bias_add_f32", Dim3{uint32(rows), 1, 1}, Dim3{rowThreads, 1, 1}, s)
}

// SwiGLU writes out[t] = silu(gate[t])·up[t] from the fused gate|up
// projection gu (bf16 [T,2I]) into out (bf16 [T,I]).
func (k *Kernels) SwiGLU(s *Stream, out, gu DevicePtr, T, I int) error {
	if err := positive("swiglu", T, I); err != nil {
		return err
	}
	k.args.Reset().Ptr(out).Ptr(gu).I32(int32(I))
	// About 128 blocks in all: a row of a small step over many blocks.
	// A thread takes 8 columns when I allows (swiglu in kernels.cu).
	per := 1
	if I%8 == 0 {
		per = 8
	}
	cols := max(1, min((I+rowThreads*per-1)/(rowThreads*per), 128/T))
	return k.launch("swiglu", Dim3{uint32(T), uint32(cols), 1}, Dim3{rowThreads, 1, 1}, s)
}

// AttnShape is the attention geometry of a model.
type AttnShape struct {
	Heads, KVHeads, HeadDim, BlockSize int
}

func (a AttnShape) validate() error {
	if err := positive("attention shape", a.Heads, a.KVHeads, a.HeadDim, a.BlockSize); err != nil {
		return err
	}
	if a.Heads%a.KVHeads != 0 || a.HeadDim%2 != 0 || a.HeadDim > attnMaxDim {
		return fmt.Errorf("%w: %d heads over %d KV heads of dim %d (need a multiple, an even dim ≤ %d)", ErrBadLaunch, a.Heads, a.KVHeads, a.HeadDim, attnMaxDim)
	}
	return nil
}

// RopeTable writes the step's RoPE angles, cs f32 [T][half][2] = (cos,
// sin) of pos[t]·invFreq[i] (invFreq f64 [half], pos int32 [T]), that
// QKNormRopeStore reads in every layer.
func (k *Kernels) RopeTable(s *Stream, cs, invFreq, pos DevicePtr, T, half int) error {
	if err := positive("rope_table", T, half); err != nil {
		return err
	}
	k.args.Reset().Ptr(cs).Ptr(invFreq).Ptr(pos).I32(int32(half))
	return k.launch("rope_table", Dim3{uint32(T), 1, 1}, Dim3{uint32(min(half, 128)+31) &^ 31, 1, 1}, s)
}

// RopeStoreArgs are the buffers of QKNormRopeStore.
type RopeStoreArgs struct {
	QKV DevicePtr // bf16 [T][(Heads+2·KVHeads)·HeadDim], q rotated in place
	// Bias (f32 [(Heads+2·KVHeads)·HeadDim]), QNorm and KNorm (f32
	// [HeadDim]) are 0 when the model has none.
	Bias, QNorm, KNorm DevicePtr
	Rope               DevicePtr // f32 [T][HeadDim/2][2], from RopeTable
	Slots              DevicePtr // int32 [T]; a negative slot stores nothing
	KCache, VCache     DevicePtr // this layer's bf16 caches
	T                  int
	Eps                float32
}

// QKNormRopeStore applies the q/k/v bias, Qwen3's per-head q/k RMSNorm and
// neox RoPE, and stores K and V at each token's slot of the paged cache.
func (k *Kernels) QKNormRopeStore(s *Stream, a AttnShape, p RopeStoreArgs) error {
	if err := a.validate(); err != nil {
		return err
	}
	if err := positive("qk_norm_rope_store tokens", p.T); err != nil {
		return err
	}
	k.args.Reset().Ptr(p.QKV).Ptr(p.Bias).Ptr(p.QNorm).Ptr(p.KNorm).Ptr(p.Rope).Ptr(p.Slots).
		Ptr(p.KCache).Ptr(p.VCache).I32(int32(a.Heads)).I32(int32(a.KVHeads)).I32(int32(a.HeadDim)).
		I32(int32(a.BlockSize)).F32(p.Eps)
	heads := a.Heads + 2*a.KVHeads
	return k.launch("qk_norm_rope_store", Dim3{uint32(p.T), uint32((heads + ropeHeads - 1) / ropeHeads), 1}, Dim3{32 * ropeHeads, 1, 1}, s)
}

// AttentionArgs are the buffers of PagedAttention.
type AttentionArgs struct {
	Out            DevicePtr // bf16 [T][Heads·HeadDim]
	Q              DevicePtr // bf16, row stride QStride elements
	QStride        int
	KCache, VCache DevicePtr
	TokSeq, Pos    DevicePtr // int32 [T]: each token's sequence row and position
	BlockTables    DevicePtr // int32 [seqs][BTStride]
	BTStride       int
	T              int
	Scale          float32 // usually 1/sqrt(HeadDim)
}

// PagedAttention runs causal GQA attention for every token of the step over
// its sequence's cached positions [0, pos] (prefill chunks and decode alike).
func (k *Kernels) PagedAttention(s *Stream, a AttnShape, p AttentionArgs) error {
	if err := a.validate(); err != nil {
		return err
	}
	if err := positive("paged_attention", p.T, p.QStride, p.BTStride); err != nil {
		return err
	}
	k.args.Reset().Ptr(p.Out).Ptr(p.Q).I32(int32(p.QStride)).Ptr(p.KCache).Ptr(p.VCache).Ptr(p.TokSeq).
		Ptr(p.Pos).Ptr(p.BlockTables).I32(int32(p.BTStride)).I32(int32(a.Heads)).I32(int32(a.KVHeads)).
		I32(int32(a.HeadDim)).I32(int32(a.BlockSize)).F32(p.Scale)
	return k.launch("paged_attention", Dim3{uint32(p.T), uint32(a.Heads), 1}, Dim3{attnThreads, 1, 1}, s)
}

// FlashSupported reports whether attn_mma covers shape a: head dim 64 or
// 128 and at most 16 query heads per KV head (a warp's 16 rows hold at
// least one token's group). Other shapes use PagedAttention.
func FlashSupported(a AttnShape) bool {
	return a.validate() == nil && (a.HeadDim == 64 || a.HeadDim == 128) && a.Heads/a.KVHeads <= 16
}

// FlashTileTokens is how many consecutive tokens of one sequence an
// attn_mma tile holds for shape a: 32/G per warp of the four-warp form,
// G = Heads/KVHeads.
func FlashTileTokens(a AttnShape) int { return flashWarps * (flashRows / (a.Heads / a.KVHeads)) }

// flashSharedBytes is the dynamic shared memory of the four-warp attn_mma
// for head dim hd (FA_SMEM_BYTES): its Q rows and one K and one V tile,
// each row padded by 8 bf16.
func flashSharedBytes(hd int) int { return (flashWarps*flashRows + 2*flashKeys) * (hd + 8) * 2 }

// FlashWarpTokens is the most tokens a tile may hold to run on one warp
// (attn_mma_w1): 16/G.
func FlashWarpTokens(a AttnShape) int { return 16 / (a.Heads / a.KVHeads) }

// FlashMidTokens is the most tokens a tile may hold to run on the mid form
// (attn_mma_mid: four warps of 16 rows): 4·(16/G).
func FlashMidTokens(a AttnShape) int { return flashWarps * FlashWarpTokens(a) }

// FlashTiles are a step's attention tiles by the attn_mma form they run on
// (in this order in the tile list): Warp on one-warp blocks (attn_mma_w1),
// Mid on four warps of one m-tile (attn_mma_mid), Big on four warps of two
// m-tiles (attn_mma); MidKeys and BigKeys are the keys the longest tile of
// the last two groups sees. Single says there are warp tiles and each
// holds one token (a decode step's), so attn_dec may run them
// (FlashDecodeKernel).
type FlashTiles struct {
	Warp, Mid, Big, MidKeys, BigKeys int
	Single                           bool
}

// N is the number of tiles.
func (t FlashTiles) N() int { return t.Warp + t.Mid + t.Big }

// FlashSplitCounts are the KV splits (gridDim.z, 1..16) of a step's
// attn_mma launches, one for each form.
type FlashSplitCounts struct{ Warp, Mid, Big int }

// max is the splits a row the shared scratch holds: the largest.
func (z FlashSplitCounts) max() int { return max(z.Warp, z.Mid, z.Big) }

// FlashResidency is how many attn_mma blocks of each form one
// multiprocessor holds at once: W1 one-warp blocks, Mid and W4 four-warp
// ones (of one and of two m-tiles a warp); Dec the attn_dec blocks of the
// shape's kernel (0: none, see FlashDecodeKernel). Registers and shared memory
// decide it, so it is the driver's answer for the loaded kernels
// (Kernels.FlashResidency), not a constant that a kernel change would
// leave stale (on the H100, 8, 2 and 2 for head dim 128 as built in
// November 2026).
type FlashResidency struct{ W1, Mid, W4, Dec int }

// Decodes says whether attn_dec runs the warp tiles of a step in tiles t:
// they are single tokens and attn_dec is loaded (Dec > 0). FlashSplits
// sizes their launch by it, and the backend sets FlashArgs.Decode by it.
func (r FlashResidency) Decodes(t FlashTiles) bool { return t.Single && r.Dec > 0 }

// decThreads is DEC_WARPS · 32: attn_dec's block.
const decThreads = 128

// FlashDecodeKernel is the attn_dec kernel for shape a (head dim 128, a
// GQA group of 2 or 4), "" when there is none: attn_mma_w1 then runs the
// decode tiles.
func FlashDecodeKernel(a AttnShape) string {
	if a.HeadDim != 128 || a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 {
		return ""
	}
	switch a.Heads / a.KVHeads {
	case 2:
		return "attn_dec_g2"
	case 4:
		return "attn_dec_g4"
	}
	return ""
}

// DecodeResidency is how many attn_dec blocks of a's kernel one
// multiprocessor holds, 0 when a has none.
func (k *Kernels) DecodeResidency(a AttnShape) (int, error) {
	name := FlashDecodeKernel(a)
	if name == "" {
		return 0, nil
	}
	return k.fn[name].ResidentBlocks(decThreads, 0)
}

// flashKernels are attn_mma's one-warp, mid and four-warp kernels for head
// dim hd (64 or 128; FlashSupported).
func flashKernels(hd int) (w1, mid, w4 string) {
	if hd == 64 {
		return "attn_mma_w1_hd64", "attn_mma_mid_hd64", "attn_mma_hd64"
	}
	return "attn_mma_w1_hd128", "attn_mma_mid_hd128", "attn_mma_hd128"
}

// FlashResidency asks the driver how many blocks of each attn_mma form
// for head dim hd fit on a multiprocessor.
func (k *Kernels) FlashResidency(hd int) (FlashResidency, error) {
	w1, mid, w4 := flashKernels(hd)
	var r FlashResidency
	var err error
	if r.W1, err = k.fn[w1].ResidentBlocks(32, 0); err != nil {
		return r, err
	}
	if r.Mid, err = k.fn[mid].ResidentBlocks(flashWarps*32, 0); err != nil {
		return r, err
	}
	if r.W4, err = k.fn[w4].ResidentBlocks(flashWarps*32, flashSharedBytes(hd)); err != nil {
		return r, err
	}
	if r.W1 < 1 || r.Mid < 1 || r.W4 < 1 {
		return r, fmt.Errorf("%w: attn_mma for head dim %d fits %d one-warp, %d mid and %d four-warp blocks on a multiprocessor",
			ErrBadLaunch, hd, r.W1, r.Mid, r.W4)
	}
	return r, nil
}

// FlashSplits are the KV splits (attn_mma's gridDim.z) of a step's
// launches, for its tiles t on a GPU of sms multiprocessors holding res
// blocks of each form. The launches run one after the other, so each is
// sized on its own: as many splits as still fit its blocks in one wave of
// resident blocks, at most flashMaxSplit, at least 1; a mid or big split
// also keeps at least flashSplitKeys keys (a big block first copies its
// 128 query rows, 32 KB at head dim 128, to shared memory; a split with
// fewer keys than that is mostly overhead). One wave: a second,
// part-filled wave cost the 64-sequence decode step's attention more than
// the longer key ranges of fewer splits (H100 ncu: 1.45 waves, 52% of
// DRAM bandwidth). Each its own: with one count for all, 63 decodes
// beside a 256-token chunk took the chunk's 4 and ran two waves of
// one-warp blocks (docs/BENCHMARKS.md). The warp launch's count depends
// on the tile counts only, so a decode graph's bucket always gets the
// same value.
func FlashSplits(a AttnShape, res FlashResidency, t FlashTiles, sms int) FlashSplitCounts {
	fill := func(perSM, blocks int) int {
		if blocks <= 0 {
			return 1
		}
		return min(max(1, max(perSM, 1)*sms/(blocks*a.KVHeads)), flashMaxSplit)
	}
	keyed := func(perSM, blocks, keys int) int { return max(1, min(fill(perSM, blocks), keys/flashSplitKeys)) }
	warp := res.W1
	if res.Decodes(t) {
		warp = res.Dec
	}
	return FlashSplitCounts{Warp: fill(warp, t.Warp), Mid: keyed(res.Mid, t.Mid, t.MidKeys), Big: keyed(res.W4, t.Big, t.BigKeys)}
}

// FlashMidTiling says whether a step cuts its chunks into mid tiles
// (FlashMidTokens) rather than two-m-tile ones (FlashTileTokens), given
// midTiles, the tiles of more than FlashWarpTokens tokens the mid cut
// makes, and prefix, the most earlier keys a chunk longer than one mid
// tile follows, as a multiple of its own length: when the tiles fit one
// wave of mid blocks over the KV heads and prefix is at most 3, or two
// waves and at most ½. Such a step holds a prompt or chunk of up to
// ~1,000 tokens (G = 4, an H100) whose keys are mostly its own, so its
// tiles' key counts range from a few to all of them: on two-m-tile tiles
// (at most one wave) every block starts at once and the step waits for
// the one with the most keys (a split keeps at least flashSplitKeys keys,
// so splits cannot even them out), while twice as many mid blocks of half
// the rows, longest first, do. Behind a longer context the tiles see
// about as many keys, the two-m-tile form's splits fill the wave evenly,
// and its two m-tiles a warp win. H100, attention ms over 36 layers
// (docs/BENCHMARKS.md, tenth session), mid against two-m-tile tiles:
//
//	256 tokens at 0          1.29 / 1.41   one wave
//	512 at 0                 1.28 / 2.56   one wave
//	256 at 768 (+63 decodes) 6.69 / 6.90   one wave, prefix 3
//	512 at 15,872           33.2 / 26.8    one wave, prefix 31
//	1,024 at 0               2.76 / 3.40   two waves
//	1,024 at 3,072          15.2 / 12.8    two waves, prefix 3
//	1,024 at 15,360         64.0 / 49.7    two waves, prefix 15
//
// Longer steps fill the GPU either way, and there the two-m-tile form
// wins (2 × 1,024 tokens: 4.46 against 5.71 ms).
func FlashMidTiling(a AttnShape, res FlashResidency, midTiles int, prefix float64, sms int) bool {
	wave := res.Mid * sms
	switch blocks := midTiles * a.KVHeads; {
	case midTiles <= 0 || wave <= 0:
		return false
	case blocks <= wave:
		return prefix <= 3
	case blocks <= 2*wave:
		return prefix <= 0.5
	}
	return false
}

// FlashScratchBytes is the split scratch attn_mma needs for T token rows
// split z ways (0 when z is 1): per (token, head, split) the fp32 output
// row and its (max, sum).
func FlashScratchBytes(a AttnShape, T, z int) int {
	if z <= 1 {
		return 0
	}
	return T * a.Heads * z * (a.HeadDim + 2) * 4
}

// FlashArgs are the buffers of FlashAttention beyond PagedAttention's.
type FlashArgs struct {
	AttentionArgs
	// Tiles is int32 [TileCounts.N()][2]: first token row, token count;
	// the warp tiles (at most FlashWarpTokens tokens each) first, then
	// the mid (at most FlashMidTokens), then the big ones.
	Tiles      DevicePtr
	TileCounts FlashTiles
	Splits     FlashSplitCounts // FlashSplits
	// Scratch holds FlashScratchBytes(shape, T, the largest split count)
	// bytes when that is more than one split.
	Scratch DevicePtr
	// Decode runs the warp tiles on attn_dec (FlashDecodeKernel) rather
	// than attn_mma_w1; TileCounts.Single must hold.
	Decode bool
}

// FlashAttention is PagedAttention on the tensor cores (attn_mma in
// kernels.cu): one block per (tile, KV head, split) — one warp for each
// warp tile, four for the others — the tile's tokens and the GQA group's
// heads sharing every K/V row read, then attn_combine when the keys were
// split. Tiles list runs of at most FlashTileTokens(a) consecutive tokens
// of one sequence, covering every token once.
func (k *Kernels) FlashAttention(s *Stream, a AttnShape, p FlashArgs) error {
	if !FlashSupported(a) {
		return fmt.Errorf("%w: attn_mma takes head dim 64 or 128 and at most 16 heads per KV head, not %+v", ErrBadLaunch, a)
	}
	t, z := p.TileCounts, p.Splits
	if err := positive("attn_mma", p.T, p.QStride, p.BTStride, t.N(), z.Warp, z.Mid, z.Big); err != nil {
		return err
	}
	zs := z.max() // the scratch's splits a row
	if zs > flashMaxSplit || (zs > 1 && p.Scratch == 0) {
		return fmt.Errorf("%w: %+v KV splits (at most %d, with scratch)", ErrBadLaunch, z, flashMaxSplit)
	}
	if t.Warp < 0 || t.Mid < 0 || t.Big < 0 {
		return fmt.Errorf("%w: tile counts %+v", ErrBadLaunch, t)
	}
	acc := p.Scratch
	ml := acc + DevicePtr(p.T*a.Heads*zs*a.HeadDim*4)
	launch := func(name string, first, n, z, warps, smem int) error {
		if n == 0 {
			return nil
		}
		k.args.Reset().Ptr(p.Out).Ptr(acc).Ptr(ml).Ptr(p.Q).I32(int32(p.QStride)).Ptr(p.KCache).Ptr(p.VCache).
			Ptr(p.TokSeq).Ptr(p.Pos).Ptr(p.BlockTables).I32(int32(p.BTStride)).Ptr(p.Tiles + DevicePtr(8*first)).I32(int32(a.Heads)).
			I32(int32(a.KVHeads)).I32(int32(a.BlockSize)).F32(p.Scale * float32(math.Log2E)).I32(int32(zs))
		return k.launchShared(name, Dim3{uint32(n), uint32(a.KVHeads), uint32(z)}, Dim3{uint32(warps) * 32, 1, 1}, smem, s)
	}
	w1, mid, w4 := flashKernels(a.HeadDim)
	if p.Decode {
		dec := FlashDecodeKernel(a)
		if dec == "" || !t.Single {
			return fmt.Errorf("%w: attn_dec takes head dim 128, groups of 2 or 4 and one token a warp tile, not %+v, %+v", ErrBadLaunch, a, t)
		}
		if err := launch(dec, 0, t.Warp, z.Warp, decThreads/32, 0); err != nil {
			return err
		}
	} else if err := launch(w1, 0, t.Warp, z.Warp, 1, 0); err != nil {
		return err
	}
	if err := launch(mid, t.Warp, t.Mid, z.Mid, flashWarps, 0); err != nil {
		return err
	}
	if err := launch(w4, t.Warp+t.Mid, t.Big, z.Big, flashWarps, flashSharedBytes(a.HeadDim)); err != nil {
		return err
	}
	if zs == 1 {
		return nil
	}
	rows := p.T * a.Heads
	k.args.Reset().Ptr(p.Out).Ptr(acc).Ptr(ml).I32(int32(rows)).I32(int32(a.HeadDim)).I32(int32(zs))
	return k.launch("attn_combine", Dim3{uint32(combineBlocks(rows)), 1, 1}, Dim3{combineThreads, 1, 1}, s)
}

// attn_combine's launch: a warp a (token, head) row, the grid's warps
// walking the rows, at most combineMaxBlocks blocks. Most rows of a
// prefill step were written whole by one split and cost the warp one
// look at their (max, sum) pairs; a block a row spent 80 µs a layer of a
// 2,048-token step launching blocks that exited at once (H100,
// docs/BENCHMARKS.md, fourteenth session).
const (
	combineThreads   = 256
	combineMaxBlocks = 2048
)

// combineBlocks is attn_combine's grid for rows rows.
func combineBlocks(rows int) int {
	return min((rows+combineThreads/32-1)/(combineThreads/32), combineMaxBlocks)
}

// SkinnyFits says whether gemm_skinny takes a GEMM of M rows, N outputs
// and K inputs over x and w: M ≤ SkinnyMaxRows, N a multiple of 16, K of
// 32, and both operands 16-byte aligned (each lane loads 16 bytes).
func SkinnyFits(M, N, K int, x, w DevicePtr) bool {
	return M >= 1 && M <= SkinnyMaxRows && N > 0 && N%16 == 0 && K > 0 && K%32 == 0 && x%16 == 0 && w%16 == 0
}

// GemmSkinny enqueues y = x·wᵀ (x bf16 [M,K], w bf16 [N,K]) on the
// tensor cores without cuBLASLt (gemm_skinny in kernels.cu): y is bf16
// when out is BF16, f32 otherwise, and accumulate adds into an f32 y
// (beta = 1). The shape must satisfy SkinnyFits.
func (k *Kernels) GemmSkinny(s *Stream, y, x, w DevicePtr, M, N, K int, out DType, accumulate bool) error {
	return k.gemmSkinny(s, "", y, x, w, 0, M, N, K, 0, out, accumulate)
}

// skinnyStaged is how many bf16 elements a fused gemm_skinny operand may
// take, its rows padded by 8 (GS_XS in kernels.cu): 8 rows of 2,560.
const skinnyStaged = 8 * (2560 + 8)

// SkinnyFusedFits says whether gemm_skinny's fused operand forms
// (GemmSkinnyNorm, GemmSkinnySwiGLU) take M rows of K: at most 8 rows,
// within the block's shared-memory copy of the operand.
func SkinnyFusedFits(M, K int) bool { return M >= 1 && M <= 8 && M*(K+8) <= skinnyStaged }

// GemmSkinnyNorm enqueues y = RMSNorm(x)·nw · wᵀ for the f32 residual x
// [M,K] and its norm weight nw (f32 [K]) in one launch, the norm rounded to
// bf16 as RMSNorm rounds it: a decode step's norm then needs no kernel of
// its own. SkinnyFits and SkinnyFusedFits must hold, nw 16-byte aligned.
func (k *Kernels) GemmSkinnyNorm(s *Stream, y, x, nw, w DevicePtr, M, N, K int, eps float32, out DType) error {
	if !SkinnyFusedFits(M, K) || nw%16 != 0 {
		return fmt.Errorf("%w: gemm_skinny's RMSNorm operand takes up to 8 rows within %d elements and a 16-byte aligned weight, not %dx%d", ErrBadLaunch, skinnyStaged, M, K)
	}
	return k.gemmSkinny(s, "gemm_skinny_m8_norm", y, x, w, nw, M, N, K, eps, out, false)
}

// GemmSkinnySwiGLU enqueues y = SwiGLU(gu)·wᵀ for the fused gate|up
// projection gu (bf16 [M,2K]) in one launch, bit for bit SwiGLU then
// GemmSkinny. SkinnyFits and SkinnyFusedFits must hold.
func (k *Kernels) GemmSkinnySwiGLU(s *Stream, y, gu, w DevicePtr, M, N, K int, out DType, accumulate bool) error {
	if !SkinnyFusedFits(M, K) {
		return fmt.Errorf("%w: gemm_skinny's SwiGLU operand takes up to 8 rows within %d elements, not %dx%d", ErrBadLaunch, skinnyStaged, M, K)
	}
	return k.gemmSkinny(s, "gemm_skinny_m8_swiglu", y, gu, w, 0, M, N, K, 0, out, accumulate)
}

// gemmSkinny launches the gemm_skinny kernel name ("" picks the bf16
// operand's form by M).
func (k *Kernels) gemmSkinny(s *Stream, name string, y, x, w, nw DevicePtr, M, N, K int, eps float32, out DType, accumulate bool) error {
	if !SkinnyFits(M, N, K, x, w) {
		return fmt.Errorf("%w: gemm_skinny takes 1–%d rows, N%%16 = 0, K%%32 = 0 and 16-byte aligned operands, not %dx%dx%d", ErrBadLaunch, SkinnyMaxRows, M, N, K)
	}
	mode := int32(1)
	switch {
	case out == BF16 && accumulate:
		return fmt.Errorf("%w: gemm_skinny accumulates into f32 only", ErrBadLaunch)
	case out == BF16:
		mode = 0
	case out != F32:
		return fmt.Errorf("%w: gemm_skinny writes bf16 or f32, not %v", ErrBadLaunch, out)
	case accumulate:
		mode = 2
	}
	grid := uint32(N / 16)
	if name == "" {
		switch {
		case M <= 8 && N <= k.narrowN:
			name, grid = "gemm_skinny_n8_m8", uint32(N/8)
		case M <= 8:
			name = "gemm_skinny_m8"
		case M <= 16:
			name = "gemm_skinny_m16"
		case M <= 32:
			name = "gemm_skinny_m32"
		default:
			name = "gemm_skinny_m64"
		}
	}
	k.args.Reset().Ptr(y).Ptr(x).Ptr(w).I32(int32(M)).I32(int32(N)).I32(int32(K)).I32(mode).Ptr(nw).F32(eps)
	return k.launch(name, Dim3{grid, 1, 1}, Dim3{skinnyThreads, 1, 1}, s)
}

// Argmax writes out[r] (int32) = argmax of logits row r (f32, rows of
// stride elements, the first V of which count), lowest index on ties.
func (k *Kernels) Argmax(s *Stream, out, logits DevicePtr, rows, V, stride int) error {
	if err := positive("argmax", rows, V, stride); err != nil {
		return err
	}
	k.args.Reset().Ptr(out).Ptr(logits).I32(int32(V)).I32(int32(stride))
	return k.launch("argmax_f32", Dim3{uint32(rows), 1, 1}, Dim3{sampleThreads, 1, 1}, s)
}

// SampleArgs are the per-row device arrays of Sample.
type SampleArgs struct {
	Out         DevicePtr // int32 [rows]
	Logits      DevicePtr // f32 [rows][Stride]
	V, Stride   int
	Rows        int
	Temperature DevicePtr // f32 [rows]; <= 0 is greedy
	TopK        DevicePtr // int32 [rows]; <= 0 or >= V disables
	TopP        DevicePtr // f32 [rows]; >= 1 disables
	Seed        DevicePtr // u64 [rows]
	Counter     DevicePtr // u64 [rows], incremented by each draw
	// Part is scratch of SamplePartBytesPerRow bytes a row, 4-byte
	// aligned (what sample_part hands sample_pick).
	Part DevicePtr
}

// Sample draws one token per row with temperature, top-k and top-p from a
// counter-based RNG (sample_part then sample_pick in kernels.cu;
// sched.Sampler is its host twin): sample_part reads each row in
// sampleSegs segments at once, and sample_pick finds the token from their
// maxima and masses.
func (k *Kernels) Sample(s *Stream, p SampleArgs) error {
	if err := positive("sample", p.Rows, p.V, p.Stride); err != nil {
		return err
	}
	if p.Part == 0 || p.Part%4 != 0 {
		return fmt.Errorf("%w: sampling needs a 4-byte aligned scratch of %d bytes a row, got %#x", ErrBadLaunch, SamplePartBytesPerRow, p.Part)
	}
	k.args.Reset().Ptr(p.Part).Ptr(p.Logits).I32(int32(p.V)).I32(int32(p.Stride)).Ptr(p.Temperature).Ptr(p.TopK).Ptr(p.TopP)
	if err := k.launch("sample_part", Dim3{uint32(p.Rows), sampleSegs, 1}, Dim3{samplePartThreads, 1, 1}, s); err != nil {
		return err
	}
	k.args.Reset().Ptr(p.Out).Ptr(p.Part).Ptr(p.Logits).I32(int32(p.V)).I32(int32(p.Stride)).Ptr(p.Temperature).
		Ptr(p.TopK).Ptr(p.TopP).Ptr(p.Seed).Ptr(p.Counter)
	return k.launch("sample_pick", Dim3{uint32(p.Rows), 1, 1}, Dim3{sampleThreads, 1, 1}, s)
}
