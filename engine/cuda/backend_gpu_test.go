package cuda

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/engine/cpu"
	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/trace"
)

// tolLogits bounds ‖gpu−cpu‖/‖cpu‖ per logits row. The CPU backend keeps
// every activation in f32; the CUDA backend rounds the GEMM inputs and
// outputs (normed hidden state, q/k/v, attention output, gate/up, SwiGLU)
// to bf16 as transformers does, which moves logits by about 1% of their
// norm on random-weight models.
const tolLogits = 3e-2

func TestGPUBackendMatchesCPU(t *testing.T) {
	if _, err := LoadDriver(); err != nil {
		t.Skipf("no CUDA driver, GPU test skipped: %v", err)
	}
	cases := []struct{ arch, preset string }{{"qwen3", "tiny"}, {"qwen2", "tiny"}, {"llama", "tiny"}}
	if os.Getenv("TRENI_CUDA_BIG") != "" {
		cases = append(cases, struct{ arch, preset string }{"qwen3", "demo"}, struct{ arch, preset string }{"llama", "demo"})
	}
	// Real model shapes (qwen3 presets, e.g. "0.6b,4b"): slow on the CPU
	// reference, so only when asked (scripts/gpu-cuda-check.sh does).
	for _, p := range strings.Split(os.Getenv("TRENI_CUDA_SHAPES"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			cases = append(cases, struct{ arch, preset string }{"qwen3", p})
		}
	}
	for _, c := range cases {
		backendVsCPU(t, c.arch, c.preset)
	}
}

func backendVsCPU(t *testing.T, arch, preset string) {
	ck := synthCheckpoint(t, arch, preset, 11, "bf16")
	defer ck.Close()
	const NB, BS = 64, 16
	ref, err := cpu.New(ck, cpu.Options{NumBlocks: NB, BlockSize: BS})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	gb := newTestBackend(t, ck, BackendOptions{NumBlocks: NB, BlockSize: BS})
	defer gb.Close()
	// The default attention is attn_mma wherever it covers the shape (an
	// option lost between Start and Load once ran every step on
	// paged_attention).
	if want := FlashSupported(gb.attnShape()); gb.useFlash() != want {
		t.Fatalf("%s-%s: attention kernel %s, want attn_mma: %v", arch, preset, gb.attentionKernel(), want)
	}
	if gb.k.pdl != (gb.info.CCMajor >= 9 && gb.d.HasPDL()) {
		t.Fatalf("%s-%s: programmatic dependent launch %v on compute %d.%d", arch, preset, gb.k.pdl, gb.info.CCMajor, gb.info.CCMinor)
	}
	// An eager twin on the other attention kernel: the same steps without
	// decode graphs, through paged_attention, each kernel launched after
	// the one before has ended (PDL off), and the norms and SwiGLU of its
	// steps of up to 8 rows folded into their GEMMs (Fuse on, not the
	// default).
	ge, err := NewBackend(ck, BackendOptions{NumBlocks: NB, BlockSize: BS, NoGraphs: true, Attention: AttentionPaged, PDL: PDLOff, Fuse: FuseOn})
	if err != nil {
		t.Fatal(err)
	}
	defer ge.Close()
	if ge.useFlash() || ge.k.pdl || ge.opts.Fuse != FuseOn || gb.opts.Fuse != FuseOff {
		t.Fatalf("%s-%s: Attention %q, PDL %q or Fuse %q ignored, or fusion on by default", arch, preset, AttentionPaged, PDLOff, FuseOn)
	}
	// The background warm-up runs beside the steps below, which must
	// stay exact: its dummy rows store no K or V.
	gb.WarmBackground(0)
	bytes, gbps := gb.UploadStats()
	t.Logf("UPLOAD %s-%s: %d bytes at %.2f GB/s on %s", arch, preset, bytes, gbps, gb.Device().Name)
	for _, st := range gb.Stages() {
		t.Logf("STAGE %s-%s %-22s %8.2f ms %v", arch, preset, st.Stage, float64(st.End.Sub(st.Start).Microseconds())/1000, st.Attrs)
	}
	V := gb.VocabSize()
	ctx := context.Background()
	// Three sequences with scrambled block tables: A prefills 20 tokens,
	// B 7, C 3; then B continues its prompt (chunked prefill at Pos 7)
	// while A and C decode; then all three decode (a graph of bucket 4
	// with one padding row), fed the CPU's greedy tokens.
	blocksA := []int32{9, 3, 40, 17, 22}
	blocksB := []int32{5, 60, 1, 33, 12}
	blocksC := []int32{2, 50}
	prompt := func(n, seed int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32((i*7919 + seed*104729) % V)
		}
		return p
	}
	rowsOf := func() [][]float32 { return [][]float32{make([]float32, V), make([]float32, V), make([]float32, V)} }
	logC, logG, logE := rowsOf(), rowsOf(), rowsOf()
	posA, posB, posC := 20, 7, 3
	var worst, worstGE float64
	agree, total, nearTies := 0, 0, 0
	for step := 0; step < 24; step++ {
		var bt *sched.Batch
		switch step {
		case 0:
			bt = &sched.Batch{Seqs: []sched.SeqChunk{
				{SeqID: 1, Tokens: prompt(20, 1), Pos: 0, Blocks: blocksA, WantLogits: true},
				{SeqID: 2, Tokens: prompt(7, 2), Pos: 0, Blocks: blocksB, WantLogits: false},
				{SeqID: 3, Tokens: prompt(3, 4), Pos: 0, Blocks: blocksC, WantLogits: true},
			}}
		case 1:
			bt = &sched.Batch{Seqs: []sched.SeqChunk{
				{SeqID: 1, Tokens: []int32{argmax(logC[0])}, Pos: posA, Blocks: blocksA, WantLogits: true},
				{SeqID: 2, Tokens: prompt(5, 3), Pos: posB, Blocks: blocksB, WantLogits: true},
				{SeqID: 3, Tokens: []int32{argmax(logC[2])}, Pos: posC, Blocks: blocksC, WantLogits: true},
			}}
			posA, posB, posC = posA+1, posB+5, posC+1
		default:
			bt = &sched.Batch{Seqs: []sched.SeqChunk{
				{SeqID: 1, Tokens: []int32{argmax(logC[0])}, Pos: posA, Blocks: blocksA, WantLogits: true},
				{SeqID: 2, Tokens: []int32{argmax(logC[1])}, Pos: posB, Blocks: blocksB, WantLogits: true},
				{SeqID: 3, Tokens: []int32{argmax(logC[2])}, Pos: posC, Blocks: blocksC, WantLogits: true},
			}}
			posA, posB, posC = posA+1, posB+1, posC+1
		}
		for i := range logG {
			for j := range logG[i] {
				logG[i][j] = float32(math.NaN())
			}
		}
		if err := ref.Forward(ctx, bt, logC); err != nil {
			t.Fatal(err)
		}
		if err := gb.Forward(ctx, bt, logG); err != nil {
			t.Fatal(err)
		}
		if err := ge.Forward(ctx, bt, logE); err != nil {
			t.Fatal(err)
		}
		// The same step again through ForwardTokens (K and V are stored
		// again with the same values): the tokens chosen on the device
		// must be those of the logits it returns.
		checkTokens(t, gb, bt, logG, step)
		checkTokens(t, ge, bt, logE, step)
		for i, sq := range bt.Seqs {
			if !sq.WantLogits {
				continue
			}
			s := compare(logG[i], f64s(logC[i]))
			worst = max(worst, s.relL2)
			worstGE = max(worstGE, compare(logG[i], f64s(logE[i])).relL2)
			if s.nan > 0 || !(s.relL2 <= tolLogits) {
				t.Errorf("%s-%s step %d seq %d: %d NaN, logits rel_l2 %.3g > %.0e", arch, preset, step, sq.SeqID, s.nan, s.relL2, tolLogits)
			}
			total++
			ac, ag := argmax(logC[i]), argmax(logG[i])
			if ac == ag {
				agree++
				continue
			}
			// A disagreement is allowed only where the CPU's top two lie
			// within the tolerance of each other.
			a, b := top2(logC[i])
			if float64(a-b) <= tolLogits*norm(logC[i])/math.Sqrt(float64(V))*4 {
				nearTies++
				continue
			}
			t.Errorf("%s-%s step %d seq %d: greedy token %d on GPU, %d on CPU (margin %.4g)", arch, preset, step, sq.SeqID, ag, ac, a-b)
		}
	}
	if gb.GraphLaunches() == 0 {
		t.Errorf("%s-%s: no decode step replayed a graph", arch, preset)
	}
	// The twins run different attention kernels, each held to the CPU
	// at tolLogits: they may differ from each other by as much.
	if worstGE > tolLogits {
		t.Errorf("%s-%s: graph (%s) and eager (%s) logits differ by rel_l2 %.3g", arch, preset, gb.attentionKernel(), ge.attentionKernel(), worstGE)
	}
	t.Logf("LOGITS %s-%s vs engine/cpu: worst rel_l2 %.3g (tol %.0e), greedy agreement %d/%d, near-ties %d; graph+%s (PDL %v, unfused) vs eager+%s (PDL off, fused) rel_l2 %.3g, %d graph steps",
		arch, preset, worst, tolLogits, agree, total, nearTies, gb.attentionKernel(), gb.k.pdl, ge.attentionKernel(), worstGE, gb.GraphLaunches())
	checkCopyBlocks(t, gb, blocksA, posA)
	<-gb.bgDone
	bg := false
	for _, st := range gb.Stages() {
		if st.Stage == trace.StageWarmup && st.Attrs["kind"] == "background" {
			bg = true
			if st.Attrs["error"] != nil || st.Attrs["graphs"] == 0 {
				t.Errorf("%s-%s: background warm-up %v", arch, preset, st.Attrs)
			}
		}
	}
	if !bg {
		t.Errorf("%s-%s: no background warmup stage", arch, preset)
	}
	// The background released the staging ring, a piece an item.
	gb.mu.Lock()
	left := gb.staging
	gb.mu.Unlock()
	if left != nil && ((left.ring != nil && left.ring.mem != nil) || left.dma != nil) {
		t.Errorf("%s-%s: the staging ring is still held after the background warm-up", arch, preset)
	}
	for _, st := range gb.Stages()[4:] {
		t.Logf("STAGE %s-%s %-22s %8.2f ms %v", arch, preset, st.Stage, float64(st.End.Sub(st.Start).Microseconds())/1000, st.Attrs)
	}

	// Decode step time at batch 1 (wall clock, logits copied back), graph
	// replay and eager launches.
	const reps = 20
	for _, be := range []*Backend{gb, ge} {
		p := posA
		step := func() {
			bt := &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: []int32{1}, Pos: p, Blocks: blocksA, WantLogits: true}}}
			if err := be.Forward(ctx, bt, logG); err != nil {
				t.Fatal(err)
			}
			p++
		}
		step() // captures bucket 1 on the graph backend
		start := time.Now()
		for i := 0; i < reps; i++ {
			step()
		}
		mode := "graph"
		if be == ge {
			mode = "eager"
		}
		t.Logf("PERF %s-%s decode step, batch 1, %s: %.3f ms", arch, preset, mode, float64(time.Since(start).Microseconds())/1000/reps)
	}
}

func argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

func top2(v []float32) (a, b float32) {
	a, b = float32(math.Inf(-1)), float32(math.Inf(-1))
	for _, x := range v {
		if x > a {
			a, b = x, a
		} else if x > b {
			b = x
		}
	}
	return
}

func norm(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// checkTokens reruns step bt through be.ForwardTokens twice, greedy and
// sampled (temperature 0.8, top-k 5, per-row seeds), asking for every
// wanted row's logits: the greedy token must be the argmax of the row
// returned, which must match want (Forward's logits of the same step) —
// exactly on an eager backend, within graph-vs-eager rounding on a graph
// one, whose first bucket step runs eagerly and later ones replay; the
// sampled token must lie in the row's top 5, and a rerun with the same
// seed and step must draw the same one.
func checkTokens(t *testing.T, be *Backend, bt *sched.Batch, want [][]float32, step int) {
	t.Helper()
	ctx := context.Background()
	V := be.VocabSize()
	n := len(bt.Seqs)
	greedy := make([]sched.TokenChoice, n)
	sampled := make([]sched.TokenChoice, n)
	for i := range sampled {
		sampled[i] = sched.TokenChoice{Temperature: 0.8, TopK: 5, Seed: uint64(42 + i), Step: uint64(step)}
	}
	rows := make([][]float32, n)
	for i, sq := range bt.Seqs {
		if sq.WantLogits {
			rows[i] = make([]float32, V)
			for j := range rows[i] {
				rows[i][j] = float32(math.NaN())
			}
		}
	}
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = -7 // poison: a wanted row must be written
	}
	if err := be.ForwardTokens(ctx, bt, greedy, toks, rows); err != nil {
		t.Fatal(err)
	}
	for i, sq := range bt.Seqs {
		if !sq.WantLogits {
			if toks[i] != -7 {
				t.Errorf("step %d seq %d: token %d written for a chunk that wants none", step, sq.SeqID, toks[i])
			}
			continue
		}
		if got := argmax(rows[i]); toks[i] != got {
			t.Errorf("step %d seq %d: device greedy token %d, argmax of the returned row %d", step, sq.SeqID, toks[i], got)
		}
		s := compare(rows[i], f64s(want[i]))
		tol := 1e-2
		if be.opts.NoGraphs {
			tol = 0
		}
		if s.nan > 0 || s.relL2 > tol {
			t.Errorf("step %d seq %d: ForwardTokens logits vs Forward: %d NaN, rel_l2 %.3g > %g", step, sq.SeqID, s.nan, s.relL2, tol)
		}
	}
	// Sampled, twice, logits for the first sequence only.
	var first []int32
	for rep := 0; rep < 2; rep++ {
		toks2 := make([]int32, n)
		if err := be.ForwardTokens(ctx, bt, sampled, toks2, rows[:1]); err != nil {
			t.Fatal(err)
		}
		for i, sq := range bt.Seqs {
			if sq.WantLogits && !allowed(rows[i], 0.8, 5, 1)[int(toks2[i])] {
				t.Errorf("step %d seq %d: sampled token %d is not in the top 5", step, sq.SeqID, toks2[i])
			}
		}
		if rep == 0 {
			first = toks2
		} else {
			for i, sq := range bt.Seqs {
				if sq.WantLogits && first[i] != toks2[i] {
					t.Errorf("step %d seq %d: same seed and step drew %d then %d", step, sq.SeqID, first[i], toks2[i])
				}
			}
		}
	}
}

// checkCopyBlocks copies sequence A's blocks (positions [0, pos)) to
// unused blocks and decodes the same token at pos through both tables in
// one step: the two rows must agree (same K/V history, same arithmetic),
// and a copy with a block outside the pool must be refused.
func checkCopyBlocks(t *testing.T, be *Backend, blocksA []int32, pos int) {
	t.Helper()
	ctx := context.Background()
	bs := be.BlockSize()
	used := (pos + bs) / bs // blocks holding [0, pos]
	dst := []int32{41, 42, 43, 44, 45, 46}[:used]
	if err := be.CopyBlocks(ctx, blocksA[:used], dst); err != nil {
		t.Fatal(err)
	}
	if err := be.CopyBlocks(ctx, []int32{0}, []int32{int32(be.NumBlocks())}); !errors.Is(err, ErrBadBatch) {
		t.Errorf("copy to a block past the pool: got %v, want ErrBadBatch", err)
	}
	V := be.VocabSize()
	rows := [][]float32{make([]float32, V), make([]float32, V)}
	toks := make([]int32, 2)
	bt := &sched.Batch{Seqs: []sched.SeqChunk{
		{SeqID: 1, Tokens: []int32{5}, Pos: pos, Blocks: blocksA, WantLogits: true},
		{SeqID: 9, Tokens: []int32{5}, Pos: pos, Blocks: dst, WantLogits: true},
	}}
	if err := be.ForwardTokens(ctx, bt, make([]sched.TokenChoice, 2), toks, rows); err != nil {
		t.Fatal(err)
	}
	s := compare(rows[1], f64s(rows[0]))
	if s.nan > 0 || s.relL2 > 1e-6 || toks[0] != toks[1] {
		t.Errorf("decode through copied blocks: rel_l2 %.3g vs the original, tokens %d and %d", s.relL2, toks[0], toks[1])
	}
	t.Logf("COPYBLOCKS %d blocks copied; decode through the copy vs the original: rel_l2 %.3g, tokens %d %d", used, s.relL2, toks[0], toks[1])
}

// TestGPUGraphCapturedWithoutEagerStep: the background warm-up captures a
// decode bucket whose cuBLASLt kernels another handle has loaded (the
// aside thread's, stood in for here) without running the step first,
// after making this thread's plans ("plan" items). Twelve sequences then
// decode through bucket 16's graph, whose GEMMs run on cuBLASLt shapes
// this handle never launched eagerly, against an eager twin.
func TestGPUGraphCapturedWithoutEagerStep(t *testing.T) {
	if _, err := LoadDriver(); err != nil {
		t.Skipf("no CUDA driver, GPU test skipped: %v", err)
	}
	ck := synthCheckpoint(t, "qwen3", "tiny", 11, "bf16")
	defer ck.Close()
	const NB, BS, Bk, seqs = 64, 16, 16, 12
	gb := newTestBackend(t, ck, BackendOptions{NumBlocks: NB, BlockSize: BS})
	defer gb.Close()
	ge := newTestBackend(t, ck, BackendOptions{NumBlocks: NB, BlockSize: BS, NoGraphs: true})
	defer ge.Close()
	ctx := context.Background()
	V := gb.VocabSize()
	// The aside thread's part: the bucket's shapes run once on a handle
	// of their own, which loads their kernels in the context.
	onRunner(t, gb, func() error {
		other, err := gb.c.NewBLAS()
		if err != nil {
			return err
		}
		defer other.Close()
		for _, g := range gb.decodeGemms(Bk) {
			if err := other.Gemm(gb.s, g.shape, g.y, g.x, g.w, g.acc); err != nil {
				return err
			}
		}
		if err := gb.s.Synchronize(); err != nil {
			return err
		}
		for _, g := range gb.decodeGemms(Bk) {
			gb.warm.ran(g.shape)
		}
		return nil
	})
	if !gb.captureReady(Bk) {
		t.Fatalf("bucket %d not ready for a capture without an eager step", Bk)
	}
	plans := gb.blas.Plans()
	for i := range stepGemmCount {
		onRunner(t, gb, func() error { return gb.runWarmItem(ctx, warmItem{what: "plan", rows: Bk, gemm: i}) })
	}
	if got := gb.blas.Plans() - plans; got != len(gb.decodeGemms(Bk)) {
		t.Errorf("the plan items made %d plans, want %d", got, len(gb.decodeGemms(Bk)))
	}
	onRunner(t, gb, func() error { return gb.runWarmItem(ctx, warmItem{what: "graph", rows: Bk}) })
	// As warmBackground does: the item only records; the graph is
	// instantiated on a thread of its own, then installed on the runner.
	gb.mu.Lock()
	rg := gb.recorded
	gb.recorded = nil
	installed := gb.graphs[Bk] != nil
	gb.mu.Unlock()
	if rg == nil || installed {
		t.Fatalf("the graph item left no recorded graph to instantiate (recorded %v, installed %v)", rg != nil, installed)
	}
	inst := NewRunner()
	defer inst.Close()
	gb.instantiateRecorded(inst, rg)
	if gb.graphs[Bk] == nil {
		t.Fatalf("no graph for bucket %d (graphs off: %v)", Bk, gb.graphsOff)
	}
	captured := false
	for _, st := range gb.Stages() {
		if st.Stage == trace.StageGraphCapture && st.Attrs["bucket"] == Bk && st.Attrs["eager_first"] == false && st.Attrs["instantiate_thread"] == "own" {
			captured = st.Attrs["error"] == nil
		}
	}
	if !captured {
		t.Fatalf("bucket %d was not captured without an eager step: %v", Bk, gb.Stages())
	}
	forward := func(bt *sched.Batch) (g, e [][]float32) {
		t.Helper()
		g, e = make([][]float32, len(bt.Seqs)), make([][]float32, len(bt.Seqs))
		for i := range g {
			g[i], e[i] = make([]float32, V), make([]float32, V)
		}
		if err := gb.Forward(ctx, bt, g); err != nil {
			t.Fatal(err)
		}
		if err := ge.Forward(ctx, bt, e); err != nil {
			t.Fatal(err)
		}
		return g, e
	}
	chunks := make([]sched.SeqChunk, seqs)
	for i := range chunks {
		toks := make([]int32, 5)
		for j := range toks {
			toks[j] = int32((i*131 + j*17 + 3) % V)
		}
		chunks[i] = sched.SeqChunk{SeqID: uint64(i + 1), Tokens: toks, Blocks: []int32{int32(i)}, WantLogits: true}
	}
	g, _ := forward(&sched.Batch{Seqs: chunks})
	before := gb.GraphLaunches()
	for step := 0; step < 3; step++ {
		dec := make([]sched.SeqChunk, seqs)
		for i, c := range chunks {
			dec[i] = sched.SeqChunk{SeqID: c.SeqID, Tokens: []int32{argmax(g[i])}, Pos: 5 + step, Blocks: c.Blocks, WantLogits: true}
		}
		var e [][]float32
		g, e = forward(&sched.Batch{Seqs: dec})
		for i := range dec {
			if s := compare(g[i], f64s(e[i])); s.nan > 0 || !(s.relL2 <= tolLogits) {
				t.Errorf("decode step %d seq %d through bucket %d's graph: %d NaN, rel_l2 %.3g against the eager twin", step, dec[i].SeqID, Bk, s.nan, s.relL2)
			}
		}
	}
	if gb.GraphLaunches()-before != 3 {
		t.Errorf("%d of the 3 decode steps replayed a graph", gb.GraphLaunches()-before)
	}
}

// newTestBackend is NewBackend for a GPU test: skipped in a build without
// kernels, fatal on any other error. The caller closes it.
func newTestBackend(t *testing.T, ck *model.Checkpoint, opts BackendOptions) *Backend {
	t.Helper()
	b, err := NewBackend(ck, opts)
	if errors.Is(err, ErrNoKernels) {
		t.Skipf("no kernels in this build: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// onRunner runs f on b's runner thread with b.mu held, as a background
// item runs, and fails the test on its error.
func onRunner(t *testing.T, b *Backend, f func() error) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.r.Do(context.Background(), f); err != nil {
		t.Fatal(err)
	}
}

// TestGPURecordedGraphDiscardedAfterGrow: a graph recorded by a background
// item and instantiated after the step scratch was reallocated (grow) holds
// the old buffers' addresses: it is not installed, graphs stay on, and the
// bucket's next decode step captures it anew and replays it.
func TestGPURecordedGraphDiscardedAfterGrow(t *testing.T) {
	if _, err := LoadDriver(); err != nil {
		t.Skipf("no CUDA driver, GPU test skipped: %v", err)
	}
	ck := synthCheckpoint(t, "qwen3", "tiny", 11, "bf16")
	defer ck.Close()
	const Bk = 2
	gb := newTestBackend(t, ck, BackendOptions{NumBlocks: 64, BlockSize: 16})
	defer gb.Close()
	ctx := context.Background()
	var rg *recordedGraph
	onRunner(t, gb, func() error {
		if err := gb.padDecode(Bk); err != nil {
			return err
		}
		var err error
		rg, err = gb.recordGraph(Bk, nil)
		return err
	})
	onRunner(t, gb, func() error { return gb.grow(2*gb.capT, gb.capRows, gb.capMeta) })
	inst := NewRunner()
	defer inst.Close()
	gb.instantiateRecorded(inst, rg)
	if gb.graphs[Bk] != nil || gb.graphsOff {
		t.Fatalf("a graph recorded before grow was installed (%v) or turned graphs off (%v)", gb.graphs[Bk] != nil, gb.graphsOff)
	}
	V := gb.VocabSize()
	seqs := []sched.SeqChunk{{SeqID: 1, Tokens: []int32{5, 9, 13}, Blocks: []int32{0}, WantLogits: true},
		{SeqID: 2, Tokens: []int32{7, 11}, Blocks: []int32{1}, WantLogits: true}}
	logits := [][]float32{make([]float32, V), make([]float32, V)}
	if err := gb.Forward(ctx, &sched.Batch{Seqs: seqs}, logits); err != nil {
		t.Fatal(err)
	}
	pos := []int{3, 2}
	for step := 0; step < 3; step++ {
		dec := make([]sched.SeqChunk, len(seqs))
		for i := range dec {
			dec[i] = sched.SeqChunk{SeqID: seqs[i].SeqID, Tokens: []int32{int32(argmax(logits[i]))}, Pos: pos[i], Blocks: seqs[i].Blocks, WantLogits: true}
			pos[i]++
		}
		if err := gb.Forward(ctx, &sched.Batch{Seqs: dec}, logits); err != nil {
			t.Fatal(err)
		}
		for i := range logits {
			if s := compare(logits[i], f64s(logits[i])); s.nan > 0 {
				t.Fatalf("step %d seq %d: %d NaN logits", step, i, s.nan)
			}
		}
	}
	if gb.graphs[Bk] == nil || gb.GraphLaunches() == 0 {
		t.Fatalf("bucket %d: graph %v, %d graph launches after three decode steps; want it captured anew and replayed", Bk, gb.graphs[Bk] != nil, gb.GraphLaunches())
	}
}
