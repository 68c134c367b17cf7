package cpu

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/treni-top/treni-top/engine/sched"
)

// Tiny shapes: vocab 259 and inter 100 are not multiples of the 4-row
// micro-kernel or the 16-row work item, so the remainder paths run too.
const (
	tHidden, tInter, tLayers, tHeads, tKVHeads, tVocab = 64, 100, 2, 4, 2, 259
	tBlockSize                                         = 4
)

// Tolerances against the float64 reference, as a fraction of the largest
// |logit| of the row (logits here are O(1–10)). float32 activations with
// float32 accumulation over at most a few hundred terms land around 1e-6;
// 1e-4 leaves room for summation-order differences, while any real bug
// (wrong RoPE half, missing bias, off-by-one causal mask) is O(1e-1) or more.
const refRelTol = 1e-4

func tinyModel(a testArch, seed uint64) *testModel {
	return newTestModel(a, tHidden, tInter, tLayers, tHeads, tKVHeads, tVocab, seed)
}

func newTestBackend(t testing.TB, m *testModel, blocks, threads int) *Backend {
	t.Helper()
	b, err := newBackend(m.cfg, m.source(), Options{NumBlocks: blocks, BlockSize: tBlockSize, Threads: threads})
	if err != nil {
		t.Fatalf("newBackend: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// seqState is one sequence of a scripted test: its full token list, its
// block table, and how far it has run.
type seqState struct {
	id     uint64
	tokens []int32
	blocks []int32
	done   int
	ref    [][]float64
}

// errStats accumulates the comparison against the reference.
type errStats struct {
	maxAbs, maxRel float64
	rows           int
}

func (e *errStats) compare(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	scale := 0.0
	for _, v := range want {
		scale = math.Max(scale, math.Abs(v))
	}
	rowAbs := 0.0
	for i, v := range want {
		rowAbs = math.Max(rowAbs, math.Abs(float64(got[i])-v))
	}
	e.maxAbs = math.Max(e.maxAbs, rowAbs)
	e.maxRel = math.Max(e.maxRel, rowAbs/scale)
	e.rows++
	if !(rowAbs <= refRelTol*scale) {
		t.Errorf("%s: max |logit − reference| = %.3g, more than %.0e × max|logit| (%.3g)", what, rowAbs, refRelTol, scale)
	}
}

func randTokens(rng *rand.Rand, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(tVocab))
	}
	return out
}

// runScript steps every sequence through chunks whose sizes come from
// chunkOf (0 means the rest), all live sequences in one batch per step, and
// checks each chunk's last-token logits against the reference.
func runScript(t *testing.T, b *Backend, seqs []*seqState, chunkOf func(step int, s *seqState) int, st *errStats) {
	t.Helper()
	ctx := context.Background()
	for step := 0; ; step++ {
		var bt sched.Batch
		var who []*seqState
		for _, s := range seqs {
			if s.done >= len(s.tokens) {
				continue
			}
			n := chunkOf(step, s)
			if n <= 0 || s.done+n > len(s.tokens) {
				n = len(s.tokens) - s.done
			}
			bt.Seqs = append(bt.Seqs, sched.SeqChunk{SeqID: s.id, Tokens: s.tokens[s.done : s.done+n], Pos: s.done, Blocks: s.blocks, WantLogits: true})
			who = append(who, s)
		}
		if len(who) == 0 {
			return
		}
		logits := make([][]float32, len(who))
		for i := range logits {
			logits[i] = make([]float32, b.VocabSize())
		}
		if err := b.Forward(ctx, &bt, logits); err != nil {
			t.Fatalf("step %d: Forward: %v", step, err)
		}
		for i, s := range who {
			s.done += len(bt.Seqs[i].Tokens)
			st.compare(t, "seq "+string(rune('A'+s.id))+" pos "+itoa(s.done-1), logits[i], s.ref[s.done-1])
		}
	}
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}

// TestMatchesReference covers, per architecture: whole-prompt prefill then
// decode; chunked prefill split at several points; several sequences of
// different lengths batched in one step with random block tables.
func TestMatchesReference(t *testing.T) {
	for ai, a := range testArches {
		t.Run(a.name, func(t *testing.T) {
			for _, kn := range kernelVariants() {
				t.Run(kn.name, func(t *testing.T) {
					m := tinyModel(a, uint64(100+ai))
					b := newTestBackend(t, m, 64, 3) // 64 blocks: enough for all four sequences
					b.k = kn.k
					testAgainstReference(t, a, ai, m, b)
				})
			}
		})
	}
}

type kernelVariant struct {
	name string
	k    kern
}

// kernelVariants are the kernel sets this machine can run: always the
// portable Go loops, plus the assembly where the CPU has AVX2/FMA and
// AVX-512.
func kernelVariants() []kernelVariant {
	out := []kernelVariant{{"go", kern{}}}
	avx2, f16c, avx512 := detectSIMD()
	if avx2 {
		out = append(out, kernelVariant{"avx2", kern{avx2: avx2, f16c: f16c}})
	}
	if avx512 {
		out = append(out, kernelVariant{"avx512", kern{avx2: avx2, f16c: f16c, avx512: avx512}})
	}
	return out
}

func testAgainstReference(t *testing.T, a testArch, ai int, m *testModel, b *Backend) {
	rng := rand.New(rand.NewPCG(uint64(ai), 7))
	const nBlocks = 64
	var st errStats
	// Random, disjoint block tables: sequences never share a block and
	// the blocks are in no particular order.
	perm := rng.Perm(nBlocks)
	lens := []int{13, 1, 22, 7}
	prefix := 0
	mk := func(i int) *seqState {
		n := lens[i]
		nb := (n + tBlockSize - 1) / tBlockSize
		s := &seqState{id: uint64(i), tokens: randTokens(rng, n)}
		for _, p := range perm[prefix : prefix+nb] {
			s.blocks = append(s.blocks, int32(p))
		}
		prefix += nb
		s.ref = m.reference(s.tokens)
		return s
	}
	seqs := []*seqState{mk(0), mk(1), mk(2), mk(3)}

	t.Run("prefill+decode", func(t *testing.T) {
		// Sequence 0 alone: whole prompt but the last 4 tokens, then
		// four single-token decode steps.
		s := *seqs[0]
		s.done = 0
		runScript(t, b, []*seqState{&s}, func(step int, _ *seqState) int {
			if step == 0 {
				return len(s.tokens) - 4
			}
			return 1
		}, &st)
	})
	for _, split := range []int{1, 3, tBlockSize, tBlockSize + 1, 11} {
		t.Run("split"+itoa(split), func(t *testing.T) {
			s := *seqs[2]
			s.done = 0
			runScript(t, b, []*seqState{&s}, func(step int, _ *seqState) int {
				if step == 0 {
					return split
				}
				return 0
			}, &st)
		})
	}
	t.Run("batched", func(t *testing.T) {
		// Mixed steps: prefill chunks of varying size and decodes of
		// other sequences in the same batch.
		batch := make([]*seqState, len(seqs))
		for i, s := range seqs {
			c := *s
			c.done = 0
			batch[i] = &c
		}
		runScript(t, b, batch, func(step int, s *seqState) int {
			return 1 + (int(s.id)*3+step*5)%6
		}, &st)
	})
	t.Logf("%s (%s weights, %s kernels): %d logit rows, max abs error %.3g, max error relative to the row's max |logit| %.3g (tolerance %.0e)",
		a.name, a.dt, kernName(b.k), st.rows, st.maxAbs, st.maxRel, refRelTol)
}

func kernName(k kern) string {
	if k.avx512 {
		return "avx512"
	}
	if k.avx2 {
		return "avx2"
	}
	return "go"
}

// TestThreadsBitIdentical: each output row is computed by one worker in a
// fixed order, so the thread count must not change a single bit.
func TestThreadsBitIdentical(t *testing.T) {
	m := tinyModel(testArches[0], 5)
	rng := rand.New(rand.NewPCG(1, 2))
	toks := randTokens(rng, 9)
	var out [2][]float32
	for i, threads := range []int{1, 4} {
		b := newTestBackend(t, m, 8, threads)
		logits := [][]float32{make([]float32, tVocab)}
		bt := sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: toks, Blocks: []int32{3, 1, 0}, WantLogits: true}}}
		if err := b.Forward(context.Background(), &bt, logits); err != nil {
			t.Fatal(err)
		}
		out[i] = logits[0]
	}
	for i := range out[0] {
		if out[0][i] != out[1][i] {
			t.Fatalf("logit %d: %v with 1 thread, %v with 4", i, out[0][i], out[1][i])
		}
	}
}

func TestBadInput(t *testing.T) {
	m := tinyModel(testArches[1], 9)
	b := newTestBackend(t, m, 4, 2)
	row := func() [][]float32 { return [][]float32{make([]float32, tVocab)} }
	ok := sched.SeqChunk{SeqID: 1, Tokens: []int32{1, 2, 3, 4, 5}, Blocks: []int32{0, 1}, WantLogits: true}
	cases := []struct {
		name   string
		mod    func(*sched.SeqChunk)
		logits [][]float32
	}{
		{"block table too short", func(s *sched.SeqChunk) { s.Blocks = s.Blocks[:1] }, row()},
		{"block table too short at Pos>0", func(s *sched.SeqChunk) { s.Pos = 4; s.Blocks = s.Blocks[:2] }, row()},
		{"block id past the pool", func(s *sched.SeqChunk) { s.Blocks = []int32{0, 4} }, row()},
		{"negative block id", func(s *sched.SeqChunk) { s.Blocks = []int32{-1, 0} }, row()},
		{"token id = vocab", func(s *sched.SeqChunk) { s.Tokens = []int32{1, tVocab} }, row()},
		{"negative token id", func(s *sched.SeqChunk) { s.Tokens = []int32{-3} }, row()},
		{"empty chunk", func(s *sched.SeqChunk) { s.Tokens = nil }, row()},
		{"negative position", func(s *sched.SeqChunk) { s.Pos = -1 }, row()},
		{"short logits row", func(*sched.SeqChunk) {}, [][]float32{make([]float32, tVocab-1)}},
		{"missing logits rows", func(*sched.SeqChunk) {}, nil},
	}
	for _, c := range cases {
		s := ok
		c.mod(&s)
		err := b.Forward(context.Background(), &sched.Batch{Seqs: []sched.SeqChunk{s}}, c.logits)
		if !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: got %v, want ErrBadBatch", c.name, err)
		}
	}
	if err := b.Forward(context.Background(), nil, nil); !errors.Is(err, ErrBadBatch) {
		t.Errorf("nil batch: got %v, want ErrBadBatch", err)
	}
	// The good chunk still works after all the refusals.
	if err := b.Forward(context.Background(), &sched.Batch{Seqs: []sched.SeqChunk{ok}}, row()); err != nil {
		t.Errorf("valid chunk after refusals: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Forward(ctx, &sched.Batch{Seqs: []sched.SeqChunk{ok}}, row()); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v, want context.Canceled", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Forward(context.Background(), &sched.Batch{Seqs: []sched.SeqChunk{ok}}, row()); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: got %v, want ErrClosed", err)
	}
}

func TestBadCheckpoint(t *testing.T) {
	a := testArches[0]
	opts := Options{NumBlocks: 4, BlockSize: 4, Threads: 1}
	m := tinyModel(a, 3)
	delete(m.tensors, "model.layers.1.self_attn.k_norm.weight")
	if _, err := newBackend(m.cfg, m.source(), opts); err == nil {
		t.Error("missing k_norm: no error")
	}
	m = tinyModel(a, 3)
	tq := m.tensors["model.layers.0.self_attn.q_proj.weight"]
	tq.data = tq.data[:len(tq.data)-2]
	m.tensors["model.layers.0.self_attn.q_proj.weight"] = tq
	if _, err := newBackend(m.cfg, m.source(), opts); !errors.Is(err, errShape) {
		t.Errorf("truncated q_proj: got %v, want errShape", err)
	}
	m = tinyModel(a, 3)
	m.cfg.heads = 3
	if _, err := newBackend(m.cfg, m.source(), opts); err == nil {
		t.Error("heads not a multiple of kv heads: no error")
	}
	m = tinyModel(a, 3)
	if _, err := newBackend(m.cfg, m.source(), Options{NumBlocks: 0, BlockSize: 4}); err == nil {
		t.Error("zero blocks: no error")
	}
}

func TestKVBytes(t *testing.T) {
	m := tinyModel(testArches[0], 1)
	b := newTestBackend(t, m, 10, 1)
	want := int64(10 * tBlockSize * tLayers * tKVHeads * testArches[0].headDim * 2 * 4)
	if got := b.KVBytes(); got != want {
		t.Errorf("KVBytes = %d, want %d", got, want)
	}
}

func TestHalfToFloat(t *testing.T) {
	cases := map[uint16]float32{
		0x0000: 0, 0x3c00: 1, 0xc000: -2, 0x3555: 0.333251953125,
		0x7bff: 65504, 0x0001: 5.960464477539063e-08, 0x03ff: 6.097555160522461e-05,
		0x7c00: float32(math.Inf(1)), 0xfc00: float32(math.Inf(-1)),
	}
	for h, want := range cases {
		if got := halfToFloat(h); got != want {
			t.Errorf("halfToFloat(%#04x) = %v, want %v", h, got, want)
		}
	}
	if got := halfToFloat(0x7e00); !math.IsNaN(float64(got)) {
		t.Errorf("halfToFloat(NaN) = %v", got)
	}
}
