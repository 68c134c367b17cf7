package cuda

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/treni-top/treni-top/engine/sched"
)

// The forward pass: validate a batch, grow the step scratch, then the layer
// loop (enqueueLayers) and the logits.

// validateLogits checks Forward's logits rows: one per sequence, sized
// to the vocabulary where the chunk wants logits.
func validateLogits(bt *sched.Batch, logits [][]float32, V int) error {
	if len(logits) < len(bt.Seqs) {
		return fmt.Errorf("%w: %d logits rows for %d sequences", ErrBadBatch, len(logits), len(bt.Seqs))
	}
	for i := range bt.Seqs {
		if s := &bt.Seqs[i]; s.WantLogits && len(logits[i]) < V {
			return fmt.Errorf("%w: sequence %d logits row has %d entries, vocabulary has %d", ErrBadBatch, s.SeqID, len(logits[i]), V)
		}
	}
	return nil
}

// validate checks the whole batch before any device work.
func (b *Backend) validate(bt *sched.Batch) error {
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
	}
	return nil
}

// scratchSizes are the byte sizes of the step scratch buffers for T
// tokens, in grow's order: x, h, qkv, att, gu, act, lmX, rope.
func (b *Backend) scratchSizes(T int) []int {
	c := b.cfg
	return []int{T * c.HiddenSize * 4, T * c.HiddenSize * 2, T * b.qkvDim * 2, T * b.qDim * 2, T * 2 * c.IntermediateSize * 2, T * c.IntermediateSize * 2, T * c.HiddenSize * 2,
		T * c.HeadDim / 2 * 8}
}

// grow sizes the step scratch for T tokens, rows logits rows and meta
// int32 metadata entries (runner thread).
func (b *Backend) grow(T, rows, meta int) error {
	c := b.cfg
	if T > b.capT || rows > b.capRows || meta > b.capMeta {
		// Captured graphs hold the old buffers' addresses, and so does a
		// graph recorded and not yet installed (scratchGen).
		if err := b.dropGraphs(); err != nil {
			return err
		}
		b.scratchGen++
	}
	if T > b.capT {
		T = max(T, 2*b.capT, 16)
		ptrs := []*DevicePtr{&b.x, &b.h, &b.qkv, &b.att, &b.gu, &b.act, &b.lmX, &b.rope}
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
		if b.flashD != 0 {
			err := b.c.Free(b.flashD)
			b.flashD, b.capScratch = 0, 0
			if err != nil {
				return err
			}
		}
		for i, n := range b.scratchSizes(T) {
			p, err := b.c.Alloc(n)
			if err != nil {
				*ptrs[i] = 0
				return fmt.Errorf("cuda: step scratch for %d tokens: %w", T, err)
			}
			*ptrs[i] = p
		}
		if n := b.flashScratchFor(T); n > 0 {
			p, err := b.c.Alloc(n)
			if err != nil {
				return fmt.Errorf("cuda: attention split scratch for %d tokens: %w", T, err)
			}
			b.flashD, b.capScratch = p, n
		}
		b.capT = T
	}
	if rows > b.capRows {
		// A multiple of 8 keeps the sampling arrays 8-byte aligned.
		rows = (max(rows, 2*b.capRows, 8) + 7) &^ 7
		b.capRows = 0
		for _, p := range []*DevicePtr{&b.logitsD, &b.sampleD} {
			if *p != 0 {
				err := b.c.Free(*p)
				*p = 0
				if err != nil {
					return err
				}
			}
		}
		if b.sampleHost.Ptr != nil {
			err := b.c.FreeHost(b.sampleHost)
			b.sampleHost = HostBuffer{}
			if err != nil {
				return err
			}
		}
		var err error
		if b.logitsD, err = b.c.Alloc(rows * c.VocabSize * 4); err != nil {
			return err
		}
		if b.sampleD, err = b.c.Alloc(rows * sampleDeviceBytesPerRow); err != nil {
			return err
		}
		if b.sampleHost, err = b.c.HostAlloc(rows * sampleBytesPerRow); err != nil {
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
	if bt == nil {
		return fmt.Errorf("%w: nil batch", ErrBadBatch)
	}
	if err := validateLogits(bt, logits, b.cfg.VocabSize); err != nil {
		return err
	}
	return b.step(ctx, bt, &stepOut{logits: logits})
}

// acquire takes the backend for device work: it counts the caller in
// pending while it waits for and holds mu (the background warm-up yields
// to pending work, see warmup.go), and fails with ErrClosed after Close.
// release undoes both.
func (b *Backend) acquire() (release func(), err error) {
	b.pending.Add(1)
	b.mu.Lock()
	release = func() {
		b.lastDone.Store(time.Now().UnixNano())
		b.mu.Unlock()
		b.pending.Add(-1)
	}
	if b.closed {
		release()
		return nil, ErrClosed
	}
	if b.sl.asleep() {
		release()
		return nil, ErrAsleep
	}
	return release, nil
}

// step is Forward and ForwardTokens past their own checks.
func (b *Backend) step(ctx context.Context, bt *sched.Batch, out *stepOut) error {
	release, err := b.acquire()
	if err != nil {
		return err
	}
	defer release()
	if err := b.validate(bt); err != nil {
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
	b.layoutMeta(bt, Tm, tableRows, btStride)
	b.rowSeq = b.rowSeq[:0]
	for i := range bt.Seqs {
		if bt.Seqs[i].WantLogits {
			b.rowSeq = append(b.rowSeq, i)
		}
	}
	if Bk > 0 {
		return b.r.Do(ctx, func() error { return b.forwardGraph(ctx, out, b.rowSeq, Bk) })
	}
	return b.r.Do(ctx, func() error { return b.forward(ctx, bt, out, b.rowSeq, T, btStride) })
}

// metaLen is the int32 metadata of a step of Tm token rows and tableRows
// block-table rows of btStride entries (stepMeta's layout; tiles take at
// most 2 entries per token row).
func metaLen(Tm, tableRows, btStride int) int { return 6*Tm + tableRows*btStride }

// stepMeta lays out a step's int32 metadata in buf (reused when large
// enough): tokens, positions, KV slots and token→sequence rows for Tm token
// rows, then the block tables [tableRows][btStride], then the attention
// tiles (first token row, token count): each chunk cut into runs of at
// most tileTokens tokens, each padding row a tile of its own. The tiles
// come by form: those of at most warpTokens tokens (they run on one warp,
// attn_mma_w1) first, then those of at most midTokens (attn_mma_mid),
// then the others (attn_mma); the last two groups by their last
// position, latest first. Rows past the batch's tokens are graph-bucket
// padding: token 0 at position 0, slot −1 (stores nothing), each
// attending through its own all-zero table row. It returns the metadata
// and the tile counts by form, with the keys the longest mid and big tile
// sees (a decode graph bucket has Tm warp tiles).
func stepMeta(buf []int32, bt *sched.Batch, bs, Tm, tableRows, btStride, tileTokens, warpTokens, midTokens int) ([]int32, FlashTiles) {
	n := metaLen(Tm, tableRows, btStride)
	if cap(buf) < n {
		buf = make([]int32, n)
	}
	m := buf[:n]
	nt := 4*Tm + tableRows*btStride
	tok, pos, slots, seq, tables, tiles := m[:Tm], m[Tm:2*Tm], m[2*Tm:3*Tm], m[3*Tm:4*Tm], m[4*Tm:nt], m[nt:]
	clear(tables)
	clear(tiles)
	tileTokens = max(tileTokens, 1)
	form := func(count int) int {
		switch {
		case count <= warpTokens:
			return 0
		case count <= midTokens:
			return 1
		}
		return 2
	}
	// Count the tiles of each form, then place each form's from its own
	// start.
	var count [3]int
	t := 0
	for i := range bt.Seqs {
		l := len(bt.Seqs[i].Tokens)
		for j0 := 0; j0 < l; j0 += tileTokens {
			count[form(min(tileTokens, l-j0))]++
		}
		t += l
	}
	count[form(1)] += max(Tm-t, 0) // padding rows
	next := [3]int{0, count[0], count[0] + count[1]}
	single := true
	tile := func(first, n int) {
		f := form(n)
		single = single && (f != 0 || n == 1)
		tiles[2*next[f]], tiles[2*next[f]+1] = int32(first), int32(n)
		next[f]++
	}
	t = 0
	for i := range bt.Seqs {
		s := &bt.Seqs[i]
		for j0 := 0; j0 < len(s.Tokens); j0 += tileTokens {
			tile(t+j0, min(tileTokens, len(s.Tokens)-j0))
		}
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
		tile(t, 1)
	}
	// The mid and big tiles, longest first (most keys: latest last
	// position), so that attn_mma starts its longest blocks in its first
	// wave (see the block order in kernels.cu): a block's time grows with
	// its keys, and long blocks started last leave the GPU idle behind
	// them.
	longestFirst := func(from, n int) {
		if n > 1 {
			r := unsafe.Slice((*[2]int32)(unsafe.Pointer(&tiles[2*from])), n)
			slices.SortStableFunc(r, func(a, b [2]int32) int { return cmp.Compare(pos[b[0]+b[1]-1], pos[a[0]+a[1]-1]) })
		}
	}
	longestFirst(count[0], count[1])
	longestFirst(count[0]+count[1], count[2])
	// The keys the first (longest) tile of a group sees.
	keys := func(from, n int) int {
		if n == 0 {
			return 0
		}
		return int(pos[tiles[2*from]+tiles[2*from+1]-1]) + 1
	}
	return m, FlashTiles{Warp: count[0], Mid: count[1], Big: count[2],
		MidKeys: keys(count[0], count[1]), BigKeys: keys(count[0]+count[1], count[2]), Single: single && count[0] > 0}
}

// layoutMeta lays out the step's metadata (stepMeta) in b.hostMeta and
// records the table rows and tiles enqueueLayers needs to find its parts.
func (b *Backend) layoutMeta(bt *sched.Batch, Tm, tableRows, btStride int) {
	tile, warp, mid := b.tileTokens(), b.warpTileTokens(), b.midTileTokens()
	if mid > 0 {
		if n, prefix := midTiles(bt, warp, mid); FlashMidTiling(b.attnShape(), b.flashRes, n, prefix, b.info.SMs) {
			tile = mid
		}
	}
	b.hostMeta, b.metaTiles = stepMeta(b.hostMeta, bt, b.opts.BlockSize, Tm, tableRows, btStride, tile, warp, mid)
	b.metaTableRows = tableRows
}

// midTiles counts the tiles of more than warpTokens tokens that cutting
// the batch's chunks into runs of at most midTokens makes, and returns the
// most earlier keys a chunk longer than midTokens follows, as a multiple
// of its length (FlashMidTiling; a chunk of one mid tile is one either
// way).
func midTiles(bt *sched.Batch, warpTokens, midTokens int) (n int, prefix float64) {
	for i := range bt.Seqs {
		s := &bt.Seqs[i]
		l := len(s.Tokens)
		if l <= warpTokens {
			continue
		}
		n += (l + midTokens - 1) / midTokens
		if l > midTokens {
			prefix = max(prefix, float64(s.Pos)/float64(l))
		}
	}
	return n, prefix
}

// tileTokens is the attention tile of this model (FlashTileTokens), 1 when
// attn_mma does not cover its shape.
func (b *Backend) tileTokens() int {
	if b.useFlash() {
		return FlashTileTokens(b.attnShape())
	}
	return 1
}

func (b *Backend) attnShape() AttnShape {
	return AttnShape{b.cfg.NumHeads, b.cfg.NumKVHeads, b.cfg.HeadDim, b.opts.BlockSize}
}

// flashScratchFor is the split scratch for steps of up to capT token rows:
// room for two splits of every row (a full step of decodes beside a long
// chunk: FlashSplits gives the decodes 2 on the H100), and for the splits
// of steps of few tiles, whose rows × splits stay under capT +
// W1·SMs·warpTokens/KVHeads (at most 16·capT). A step that would need more
// gets fewer splits (flashSplits).
func (b *Backend) flashScratchFor(capT int) int {
	a := b.attnShape()
	if !b.useFlash() {
		return 0
	}
	rows := min(flashMaxSplit*capT, max(2*capT, capT+max(b.flashRes.W1, 1)*max(b.info.SMs, 1)*FlashWarpTokens(a)/a.KVHeads+flashMaxSplit))
	return rows * a.Heads * (a.HeadDim + 2) * 4
}

// flashSplits are the KV splits of a step of T token rows in tiles t:
// FlashSplits, the largest lowered until the partials fit the scratch.
func (b *Backend) flashSplits(T int, t FlashTiles) FlashSplitCounts {
	a := b.attnShape()
	z := FlashSplits(a, b.flashRes, t, b.info.SMs)
	for zs := z.max(); zs > 1 && FlashScratchBytes(a, T, zs) > b.capScratch; zs-- {
		z = FlashSplitCounts{min(z.Warp, zs-1), min(z.Mid, zs-1), min(z.Big, zs-1)}
	}
	return z
}

// upMeta copies the step's metadata to the device (runner thread).
func (b *Backend) upMeta() error {
	m := b.hostMeta
	copy(unsafe.Slice((*int32)(b.metaHost.Ptr), len(m)), m)
	return b.s.CopyHtoDAsync(b.meta, b.metaHost.Ptr, len(m)*4)
}

// padRows is the row count a GEMM over n rows runs with: n itself up to 4
// (decode steps, graph buckets 1, 2, 4), the next power of two up to 256,
// then the next multiple of 64; never past the scratch capacity.
// cuBLASLt picks (and lazily loads) a kernel per shape, and a first
// request of an unseen length paid that on its critical path (tens of ms
// on the H100); with padding, the shapes are a handful the warm-up runs.
// Above 256 rows a GEMM is compute-bound, and a power of two wasted up to
// half of it (a 256-token prefill chunk beside 63 decoding sequences ran
// as 512 rows: 2.7 ms of 5.8 in the gate/up GEMM alone, H100 profile of
// 2026-11-25), so steps that large pad to 64 only. The extra rows compute
// on stale scratch and are never read: every kernel after a GEMM works on
// the step's n rows, and the next step's embedding rewrites the residual
// rows it uses.
func padRows(n, capacity int) int {
	if n <= 4 {
		return n
	}
	if n > 256 {
		return max(n, min((n+63)&^63, capacity))
	}
	p := 8
	for p < n {
		p <<= 1
	}
	return max(n, min(p, capacity))
}

// gemm enqueues y = x·wᵀ (y += with acc) on gemm_skinny or cuBLASLt, as
// gemmOnSkinny decides (runner thread).
func (b *Backend) gemm(y, x, w DevicePtr, M, N, K int, out DType, acc bool) error {
	shape := GemmShape{M: M, N: N, K: K, In: BF16, Out: out}
	if b.gemmOnSkinny(shape, x, w) {
		return b.k.GemmSkinny(b.s, y, x, w, M, N, K, out, acc)
	}
	return b.blasGemm(shape, y, x, w, acc)
}

// blasGemm runs a GEMM on cuBLASLt and remembers that its shape has run.
func (b *Backend) blasGemm(shape GemmShape, y, x, w DevicePtr, acc bool) error {
	if err := b.blas.Gemm(b.s, shape, y, x, w, acc); err != nil {
		return err
	}
	b.warm.ran(shape)
	return nil
}

// gemmOnSkinny says whether a GEMM of shape over x and w runs on
// gemm_skinny: never where it does not fit (SkinnyFits) or under
// GemmCublasLt; always under GemmSkinny; under GemmAuto for at most
// SkinnyAutoRows rows and where skinnyEager says so, and for more (up to
// SkinnyMaxRows) until cuBLASLt has run the shape and the aside thread has
// ended. cuBLASLt loads each shape's kernel on its first launch — tens of
// milliseconds on the H100 — so a server that has just started serves on
// its own kernels and switches as the background warm-up (warmGemms, which
// always runs cuBLASLt, or the aside thread) loads them; a captured graph
// keeps the path it was captured with. Not before the aside thread has
// ended: this thread's first cuBLASLt plan, made while the aside thread
// loads kernels, held a request 34–43 ms, and as a warm-up item 67–91 ms
// (H100 and H200, docs/BENCHMARKS.md, fifteenth session).
func (b *Backend) gemmOnSkinny(shape GemmShape, x, w DevicePtr) bool {
	if b.opts.Gemm == GemmCublasLt || !SkinnyFits(shape.M, shape.N, shape.K, x, w) {
		return false
	}
	return b.skinnyOnceWarm(shape, x, w, !b.capturing) || !b.warm.has(shape) || b.warm.isWarming()
}

// skinnyOnceWarm says whether a GEMM of shape over x and w stays on
// gemm_skinny once cuBLASLt has run its shape and the aside thread has
// ended, in an eager step (eager) or a graph capture: never where it does
// not fit or under GemmCublasLt; always under GemmSkinny; under GemmAuto
// for at most SkinnyAutoRows rows and, in eager steps, where skinnyEager
// says so.
func (b *Backend) skinnyOnceWarm(shape GemmShape, x, w DevicePtr, eager bool) bool {
	if b.opts.Gemm == GemmCublasLt || !SkinnyFits(shape.M, shape.N, shape.K, x, w) {
		return false
	}
	return b.opts.Gemm == GemmSkinny || shape.M <= SkinnyAutoRows || (eager && b.skinnyEager(shape.M, shape.K))
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
	dTiles := dTables + DevicePtr(4*b.metaTableRows*btStride)
	shape := b.attnShape()
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	k, s := b.k, b.s
	flash := b.useFlash()
	var splits FlashSplitCounts
	if flash {
		splits = b.flashSplits(T, b.metaTiles)
	}
	attention := func(l *devLayer) error {
		args := AttentionArgs{Out: b.att, Q: b.qkv, QStride: b.qkvDim, KCache: l.k, VCache: l.v,
			TokSeq: dSeq, Pos: dPos, BlockTables: dTables, BTStride: btStride, T: T, Scale: scale}
		if !flash {
			return k.PagedAttention(s, shape, args)
		}
		return k.FlashAttention(s, shape, FlashArgs{AttentionArgs: args, Tiles: dTiles, TileCounts: b.metaTiles,
			Splits: splits, Scratch: b.flashD, Decode: b.flashRes.Decodes(b.metaTiles)})
	}
	M := padRows(T, b.capT)
	b.prof.mark(s, "embed")
	if err := k.Embed(s, b.x, b.embed, dTok, T, H); err != nil {
		return err
	}
	if err := k.RopeTable(s, b.rope, b.invFreq, dPos, T, c.HeadDim/2); err != nil {
		return err
	}
	for li := range b.layers {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cuda: forward at layer %d: %w", li, err)
		}
		l := &b.layers[li]
		// Which norms and SwiGLU run inside the GEMM after them
		// (fusedOperand); the profile then has no time of their own.
		normQKV := b.fusedOperand(GemmShape{M: M, N: b.qkvDim, K: H, In: BF16, Out: BF16}, b.x, l.qkv, l.attnNorm)
		normGU := b.fusedOperand(GemmShape{M: M, N: 2 * I, K: H, In: BF16, Out: BF16}, b.x, l.gu, l.mlpNorm)
		swigluDown := b.fusedOperand(GemmShape{M: M, N: H, K: I, In: BF16, Out: F32}, b.gu, l.down, 0)
		norm := func(fused bool, nw DevicePtr) error {
			if fused {
				return nil
			}
			return k.RMSNorm(s, b.h, b.x, nw, T, H, eps)
		}
		normed := func(fused bool, y, nw, w DevicePtr, N int) error {
			if fused {
				return k.GemmSkinnyNorm(s, y, b.x, nw, w, M, N, H, eps, BF16)
			}
			return b.gemm(y, b.h, w, M, N, H, BF16, false)
		}
		names := [...]string{"rmsnorm_attn", "gemm_qkv", "qk_norm_rope_store", "attention", "gemm_o", "bias_o", "rmsnorm_mlp", "gemm_gate_up", "swiglu", "gemm_down"}
		steps := [len(names)]func() error{
			func() error { return norm(normQKV, l.attnNorm) },
			func() error { return normed(normQKV, b.qkv, l.attnNorm, l.qkv, b.qkvDim) },
			func() error {
				return k.QKNormRopeStore(s, shape, RopeStoreArgs{QKV: b.qkv, Bias: l.qkvBias, QNorm: l.qNorm, KNorm: l.kNorm,
					Rope: b.rope, Slots: dSlots, KCache: l.k, VCache: l.v, T: T, Eps: eps})
			},
			func() error { return attention(l) },
			// o_proj accumulates straight into the f32 residual (beta = 1).
			func() error { return b.gemm(b.x, b.att, l.o, M, H, b.qDim, F32, true) },
			func() error {
				if l.oBias == 0 {
					return nil
				}
				return k.BiasAddF32(s, b.x, l.oBias, T, H)
			},
			func() error { return norm(normGU, l.mlpNorm) },
			func() error { return normed(normGU, b.gu, l.mlpNorm, l.gu, 2*I) },
			func() error {
				if swigluDown {
					return nil
				}
				return k.SwiGLU(s, b.act, b.gu, T, I)
			},
			func() error {
				if swigluDown {
					return k.GemmSkinnySwiGLU(s, b.x, b.gu, l.down, M, H, I, F32, true)
				}
				return b.gemm(b.x, b.act, l.down, M, H, I, F32, true)
			},
		}
		for i, f := range steps {
			b.prof.mark(s, names[i])
			if err := f(); err != nil {
				return fmt.Errorf("cuda: layer %d: %w", li, err)
			}
		}
	}
	return nil
}

// fusedOperand says whether the GEMM of shape over w takes its operand x
// through the norm (weight nw) or the SwiGLU (nw 0) in front of it
// (GemmSkinnyNorm, GemmSkinnySwiGLU): under FuseOn, where the GEMM runs
// on gemm_skinny anyway (gemmOnSkinny) and the operand fits the block's
// copy (SkinnyFusedFits). A batch-1 decode step then launches 7 kernels
// a layer instead of 10 (attention's split combine counted), but every
// block builds its own copy of the operand
// after the kernel ahead has finished, which under PDL can cost more than
// the separate kernel it replaces (BackendOptions.Fuse).
func (b *Backend) fusedOperand(shape GemmShape, x, w, nw DevicePtr) bool {
	return b.opts.Fuse == FuseOn && SkinnyFusedFits(shape.M, shape.K) && nw%16 == 0 && b.gemmOnSkinny(shape, x, w)
}

// forward is the eager step (runner thread): the layers over the step's
// T token rows, then the LM head over the last token of each chunk that
// wants logits (rowSeq lists those chunks in batch order), delivered by
// emit.
func (b *Backend) forward(ctx context.Context, bt *sched.Batch, out *stepOut, rowSeq []int, T, btStride int) error {
	c := b.cfg
	H := c.HiddenSize
	rows := len(rowSeq)
	// The token rows that want logits (each such chunk's last), after the
	// step's metadata in the same upload: the final norm reads them and
	// gathers their rows for the LM head (one launch; a device copy a row
	// held a 2,048-token step beside 60 decodes ~140 µs on the H100).
	lmRows := len(b.hostMeta)
	t := 0
	for i := range bt.Seqs {
		t += len(bt.Seqs[i].Tokens)
		if bt.Seqs[i].WantLogits {
			b.hostMeta = append(b.hostMeta, int32(t-1))
		}
	}
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
		b.prof.end(s)
		return s.Synchronize()
	}
	b.prof.mark(s, "final_norm_lm_head")
	if err := b.k.RMSNormRows(s, b.lmX, b.x, b.finalNorm, b.meta+DevicePtr(4*lmRows), rows, H, float32(c.RMSNormEps)); err != nil {
		return err
	}
	if err := b.gemm(b.logitsD, b.lmX, b.lmHead, padRows(rows, b.capRows), c.VocabSize, H, F32, false); err != nil {
		return fmt.Errorf("cuda: lm_head: %w", err)
	}
	return b.emit(out, rowSeq)
}

// hostLogits makes the pinned host buffer hold n logits rows. It is sized
// by the rows that come back, not by the device's logits rows: with
// device-side token choice few or none do, and each row of a Qwen3
// vocabulary is 0.6 MB of page-locked, resident memory.
func (b *Backend) hostLogits(n int) error {
	if n <= b.hostRows {
		return nil
	}
	if b.logitsHost.Ptr != nil {
		err := b.c.FreeHost(b.logitsHost)
		b.logitsHost, b.hostRows = HostBuffer{}, 0
		if err != nil {
			return err
		}
	}
	rows := max(n, 2*b.hostRows, 4)
	var err error
	if b.logitsHost, err = b.c.HostAlloc(rows * b.cfg.VocabSize * 4); err != nil {
		return fmt.Errorf("cuda: page-locked host memory for %d logits rows: %w", rows, err)
	}
	b.hostRows = rows
	return nil
}

// fetchLogits copies n logits rows back and waits for the step.
func (b *Backend) fetchLogits(n int) error {
	if err := b.hostLogits(n); err != nil {
		return err
	}
	if err := b.s.CopyDtoHAsync(b.logitsHost.Ptr, b.logitsD, n*b.cfg.VocabSize*4); err != nil {
		return err
	}
	if err := b.s.Synchronize(); err != nil {
		return fmt.Errorf("cuda: forward: %w", err)
	}
	return nil
}
