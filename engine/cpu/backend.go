package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/treni-top/treni-top/engine/sched"
)

// ErrBadBatch is returned (wrapped) by Forward when the batch cannot be run
// as given: a token id outside the vocabulary, a block table that does not
// cover the chunk, a block id outside the pool, a logits row too short. The
// step is refused before any KV is written.
var ErrBadBatch = errors.New("cpu: invalid batch")

// ErrClosed is returned by Forward after Close.
var ErrClosed = errors.New("cpu: backend is closed")

// Options sizes the backend.
type Options struct {
	// NumBlocks is the number of KV blocks in the pool.
	NumBlocks int
	// BlockSize is the number of positions per KV block.
	BlockSize int
	// Threads is the number of workers (the calling goroutine included);
	// 0 means runtime.GOMAXPROCS(0).
	Threads int
}

// Backend is the pure-Go CPU implementation of sched.Backend. Forward is
// serialised by a mutex: the scratch buffers and the worker pool belong to
// one step at a time.
type Backend struct {
	mu     sync.Mutex
	cfg    config
	w      *weights
	opts   Options
	pool   runner
	closed bool
	src    source     // where the weights came from (a level-2 wake loads them again)
	sl     sleepState // sleep mode (sleep.go)

	// KV storage, float32: the attention inner loop then reads KV without
	// conversion, and the CPU backend is the numerical reference for the
	// CUDA one, so it keeps full precision. It costs
	// NumBlocks × BlockSize × layers × kvHeads × headDim × 2 (K and V) × 4
	// bytes, e.g. 112 KiB per position for a Qwen3-0.6B shape (28 layers, 8
	// KV heads of 128) — 1.75 GiB for 16 Ki positions — but it is an
	// anonymous mapping, so only blocks actually written cost RSS.
	//
	// Layout, block-major so that RSS grows with the blocks in use:
	// [block][layer][K|V][kvHead][slot][headDim].
	kv          *kvMem
	kvFloats    int64
	blockStride int // floats per block (all layers)
	layerStride int // floats per layer within a block
	headStride  int // floats per (K or V, kv head) within a layer: BlockSize × headDim

	k  kern
	s  scratch
	mm matmulTask
	tk tokenTask
	at attnTask
	st sampleTask
}

// scratch holds the per-step buffers. They only grow (to the largest batch
// seen), so steady-state steps allocate nothing.
type scratch struct {
	tokens   int
	x        []float32   // residual stream [T][hidden]
	h        []float32   // normed activations [T][hidden]
	qkv      []float32   // [T][(heads+2·kvHeads)·headDim]
	att      []float32   // attention output [T][heads·headDim]
	gu       []float32   // gate and up projections [T][2·inter]
	act      []float32   // SwiGLU output [T][inter]
	cos, sin []float32   // RoPE tables [T][headDim/2]
	tokSeq   []int32     // chunk index of each token
	tokPos   []int32     // position of each token
	dstQKV   [][]float32 // per token: its row of qkv
	dstX     [][]float32 // per token: its row of x
	dstGU    [][]float32 // per token: its row of gu
	lmX      []float32   // final-normed rows that want logits
	lmDst    [][]float32
	wbuf     [][]float32 // per worker: four converted weight rows
	scores   [][]float32 // per worker: attention scores
}

func newBackend(cfg config, src source, opts Options) (*Backend, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if opts.NumBlocks <= 0 || opts.BlockSize <= 0 {
		return nil, fmt.Errorf("cpu: need a positive KV block count and block size, got %d blocks of %d positions", opts.NumBlocks, opts.BlockSize)
	}
	if opts.Threads <= 0 {
		opts.Threads = runtime.GOMAXPROCS(0)
	}
	w, err := loadWeights(&cfg, src)
	if err != nil {
		return nil, err
	}
	b := &Backend{cfg: cfg, w: w, opts: opts, src: src}
	b.headStride = opts.BlockSize * cfg.headDim
	b.layerStride = 2 * cfg.kvHeads * b.headStride
	perBlock := int64(cfg.layers) * int64(b.layerStride)
	// 1<<40 floats (4 TiB) is far past any machine; the check keeps the
	// multiplication from overflowing into a small, wrong mapping.
	if perBlock > (1<<40)/int64(opts.NumBlocks) {
		return nil, fmt.Errorf("cpu: KV cache of %d blocks × %d floats is too large", opts.NumBlocks, perBlock)
	}
	b.blockStride = int(perBlock)
	b.kvFloats = perBlock * int64(opts.NumBlocks)
	if b.kv, err = allocKV(b.kvFloats); err != nil {
		return nil, err
	}
	b.pool = newPool(opts.Threads)
	maxCols := max(cfg.hidden, cfg.inter, cfg.heads*cfg.headDim)
	b.s.wbuf = make([][]float32, opts.Threads)
	b.s.scores = make([][]float32, opts.Threads)
	for i := range b.s.wbuf {
		b.s.wbuf[i] = make([]float32, 4*maxCols)
	}
	b.k.avx2, b.k.f16c, b.k.avx512 = detectSIMD()
	b.mm.b = b
	b.at.b = b
	b.tk.b = b
	b.st.b = b
	b.st.smp = []*sched.Sampler{{}}
	return b, nil
}

// VocabSize is the length of a logits row.
func (b *Backend) VocabSize() int { return b.cfg.vocab }

// BlockSize is the number of positions per KV block.
func (b *Backend) BlockSize() int { return b.opts.BlockSize }

// NumBlocks is the number of KV blocks in the pool.
func (b *Backend) NumBlocks() int { return b.opts.NumBlocks }

// Name is "cpu".
func (b *Backend) Name() string { return "cpu" }

// Threads is the number of workers a step runs on.
func (b *Backend) Threads() int { return b.opts.Threads }

// KVBytes is the size of the KV pool's address space. Resident memory is
// lower until blocks are written: the pool is mapped lazily.
func (b *Backend) KVBytes() int64 { return b.kvFloats * 4 }

// WeightBytesPerToken is the weight bytes one decode step reads (all layer
// matrices and the lm_head, in their stored dtype): divided by the memory
// copy bandwidth it gives the floor time of a decode step.
func (b *Backend) WeightBytesPerToken() int64 { return b.w.bytesPerToken() }

// Close stops the workers and releases the KV pool. The weights belong to
// the checkpoint, which the caller closes. Close is idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	b.pool.close()
	return b.kv.free()
}

var (
	_ sched.TokenBackend = (*Backend)(nil)
	_ sched.BlockCopier  = (*Backend)(nil)
)

// CopyBlocks copies whole KV blocks (every layer, K and V): the scheduler
// gives a sequence a private copy of a shared prefix block before writing
// into it. Blocks are contiguous in the pool, so each is one copy.
func (b *Backend) CopyBlocks(ctx context.Context, src, dst []int32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return err
	}
	if len(src) != len(dst) {
		return fmt.Errorf("%w: %d source blocks for %d destinations", ErrBadBatch, len(src), len(dst))
	}
	nb := int32(b.opts.NumBlocks)
	for i := range src {
		if src[i] < 0 || src[i] >= nb || dst[i] < 0 || dst[i] >= nb {
			return fmt.Errorf("%w: copy of block %d to %d outside the pool of %d", ErrBadBatch, src[i], dst[i], nb)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cpu: copy blocks: %w", err)
	}
	bs := b.blockStride
	for i := range src {
		s, d := int(src[i])*bs, int(dst[i])*bs
		copy(b.kv.f[d:d+bs], b.kv.f[s:s+bs])
	}
	return nil
}

// validate checks the whole batch before any work so that a bad chunk fails
// the step without half-written KV.
func (b *Backend) validate(bt *sched.Batch, logits [][]float32) error {
	if len(logits) < len(bt.Seqs) {
		return fmt.Errorf("%w: %d logits rows for %d sequences", ErrBadBatch, len(logits), len(bt.Seqs))
	}
	bs, nb := b.opts.BlockSize, b.opts.NumBlocks
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
			if tok < 0 || int(tok) >= b.cfg.vocab {
				return fmt.Errorf("%w: sequence %d token %d is id %d, vocabulary has %d", ErrBadBatch, s.SeqID, j, tok, b.cfg.vocab)
			}
		}
		if s.WantLogits && len(logits[i]) < b.cfg.vocab {
			return fmt.Errorf("%w: sequence %d logits row has %d entries, vocabulary has %d", ErrBadBatch, s.SeqID, len(logits[i]), b.cfg.vocab)
		}
	}
	return nil
}

// grow sizes the scratch buffers for a step of t tokens.
func (b *Backend) grow(t int) {
	s := &b.s
	if t <= s.tokens {
		return
	}
	// Round up so a slowly growing batch does not reallocate every step.
	t = max(t, 2*s.tokens)
	c := &b.cfg
	qkvDim := (c.heads + 2*c.kvHeads) * c.headDim
	s.tokens = t
	s.x = make([]float32, t*c.hidden)
	s.h = make([]float32, t*c.hidden)
	s.qkv = make([]float32, t*qkvDim)
	s.att = make([]float32, t*c.heads*c.headDim)
	s.gu = make([]float32, t*2*c.inter)
	s.act = make([]float32, t*c.inter)
	s.cos = make([]float32, t*c.headDim/2)
	s.sin = make([]float32, t*c.headDim/2)
	s.tokSeq = make([]int32, t)
	s.tokPos = make([]int32, t)
	s.dstQKV = make([][]float32, t)
	s.dstX = make([][]float32, t)
	s.dstGU = make([][]float32, t)
	s.lmDst = make([][]float32, t)
	s.lmX = make([]float32, t*c.hidden)
}

// Forward runs one step: every token of every chunk goes through each
// weight matrix together, so a step reads the weights once whatever the
// batch size.
func (b *Backend) Forward(ctx context.Context, bt *sched.Batch, logits [][]float32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.forward(ctx, bt, logits)
}

// ForwardTokens runs one step like Forward and chooses each wanted token
// here, with sched.Sampler (the device kernel's rule and generator), so a
// seeded request draws the same tokens as through Forward and the
// scheduler's own sampling. Rows the caller does not want back are
// computed into the backend's scratch; random draws are spread over the
// worker pool, whose goroutines are idle once the lm_head is done.
func (b *Backend) ForwardTokens(ctx context.Context, bt *sched.Batch, choice []sched.TokenChoice, tokens []int32, logits [][]float32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bt == nil {
		return fmt.Errorf("%w: nil batch", ErrBadBatch)
	}
	n := len(bt.Seqs)
	if len(choice) < n || len(tokens) < n || len(logits) < n {
		return fmt.Errorf("%w: %d choices, %d token slots and %d logits rows for %d sequences", ErrBadBatch, len(choice), len(tokens), len(logits), n)
	}
	st := &b.st
	st.rows = st.rows[:0]
	for i := range bt.Seqs {
		row := logits[i]
		if row == nil && bt.Seqs[i].WantLogits {
			for len(st.scratch) <= i {
				st.scratch = append(st.scratch, make([]float32, b.cfg.vocab))
			}
			row = st.scratch[i]
		}
		st.rows = append(st.rows, row)
	}
	if err := b.forward(ctx, bt, st.rows); err != nil {
		return err
	}
	st.items = st.items[:0]
	for i, sq := range bt.Seqs {
		if !sq.WantLogits {
			continue
		}
		if choice[i].Greedy() {
			tokens[i] = st.smp[0].Sample(st.rows[i][:b.cfg.vocab], choice[i])
			continue
		}
		st.items = append(st.items, i)
	}
	st.choice, st.tokens = choice, tokens
	for len(st.smp) < b.opts.Threads {
		st.smp = append(st.smp, &sched.Sampler{})
	}
	b.pool.run(st, len(st.items))
	st.choice, st.tokens = nil, nil
	return nil
}

// forward is Forward with b.mu held.
func (b *Backend) forward(ctx context.Context, bt *sched.Batch, logits [][]float32) error {
	if err := b.usable(); err != nil {
		return err
	}
	if bt == nil {
		return fmt.Errorf("%w: nil batch", ErrBadBatch)
	}
	if err := b.validate(bt, logits); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cpu: forward: %w", err)
	}
	T := bt.Tokens()
	if T == 0 {
		return nil
	}
	b.grow(T)
	c := &b.cfg
	s := &b.s
	H, hd, half := c.hidden, c.headDim, c.headDim/2
	qDim, kvDim := c.heads*hd, c.kvHeads*hd
	qkvDim := qDim + 2*kvDim

	// Token metadata, embeddings and RoPE tables, once per step.
	t := 0
	for i := range bt.Seqs {
		sq := &bt.Seqs[i]
		for j, tok := range sq.Tokens {
			pos := sq.Pos + j
			s.tokSeq[t], s.tokPos[t] = int32(i), int32(pos)
			// row converts into x for bf16/f16 and returns a view for f32;
			// the copy covers the latter and is a no-op move for the former.
			xr := s.x[t*H : (t+1)*H]
			copy(xr, b.k.row(&b.w.embed, int(tok), xr))
			cs, sn := s.cos[t*half:(t+1)*half], s.sin[t*half:(t+1)*half]
			for k, f := range c.invFreq {
				a := float64(pos) * f
				cs[k], sn[k] = float32(math.Cos(a)), float32(math.Sin(a))
			}
			t++
		}
	}
	b.at.batch = bt
	b.at.T = T
	for t := 0; t < T; t++ {
		s.dstQKV[t] = s.qkv[t*qkvDim : (t+1)*qkvDim]
		s.dstX[t] = s.x[t*H : (t+1)*H]
		s.dstGU[t] = s.gu[t*2*c.inter : (t+1)*2*c.inter]
	}
	b.tk.batch = bt
	for li := range b.w.layers {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cpu: forward at layer %d: %w", li, err)
		}
		l := &b.w.layers[li]
		b.tk.layer = li

		// Attention block: norm, fused Q/K/V projection, per-head QK norm
		// and RoPE with the K/V store, attention, O projection into the
		// residual.
		b.tk.phase = phaseAttnNorm
		b.pool.run(&b.tk, T)
		b.mm.set(s.h, H, T, s.dstQKV[:T], false)
		b.mm.add(&l.q, l.qBias, 0)
		b.mm.add(&l.k, l.kBias, qDim)
		b.mm.add(&l.v, l.vBias, qDim+kvDim)
		b.pool.run(&b.mm, b.mm.items())
		b.tk.phase = phaseRopeStore
		b.pool.run(&b.tk, T)
		b.at.layer = li
		b.pool.run(&b.at, T*c.kvHeads)
		b.mm.set(s.att, qDim, T, s.dstX[:T], true)
		b.mm.add(&l.o, l.oBias, 0)
		b.pool.run(&b.mm, b.mm.items())

		// MLP block: norm, fused gate/up projection, SwiGLU, down
		// projection into the residual.
		b.tk.phase = phaseMLPNorm
		b.pool.run(&b.tk, T)
		b.mm.set(s.h, H, T, s.dstGU[:T], false)
		b.mm.add(&l.gate, nil, 0)
		b.mm.add(&l.up, nil, c.inter)
		b.pool.run(&b.mm, b.mm.items())
		b.tk.phase = phaseSwiGLU
		b.pool.run(&b.tk, T)
		b.mm.set(s.act, c.inter, T, s.dstX[:T], true)
		b.mm.add(&l.down, nil, 0)
		b.pool.run(&b.mm, b.mm.items())
	}

	// Final norm and lm_head, only for the rows that want logits.
	n := 0
	t = 0
	for i := range bt.Seqs {
		sq := &bt.Seqs[i]
		t += len(sq.Tokens)
		if !sq.WantLogits {
			continue
		}
		last := t - 1
		rmsNorm(s.lmX[n*H:(n+1)*H], s.x[last*H:(last+1)*H], b.w.finalNorm, float32(c.eps))
		s.lmDst[n] = logits[i][:c.vocab]
		n++
	}
	if n > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cpu: forward before lm_head: %w", err)
		}
		b.mm.set(s.lmX, H, n, s.lmDst[:n], false)
		b.mm.add(&b.w.lmHead, nil, 0)
		b.pool.run(&b.mm, b.mm.items())
	}
	return nil
}
