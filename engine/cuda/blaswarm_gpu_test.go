package cuda

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/trace"
)

// TestGPUGemmPathSwitch follows a GemmAuto backend from cold to warm: a
// 20-token prefill first runs its GEMMs on gemm_skinny (cuBLASLt has run
// nothing), WarmBackground's aside thread then runs every shape on
// cuBLASLt and reports it, the same prefill afterwards runs on cuBLASLt
// with logits that agree, and the background warm-up captures the decode
// graphs of the buckets that moved (their GEMMs settled first).
func TestGPUGemmPathSwitch(t *testing.T) {
	if _, err := LoadDriver(); err != nil {
		t.Skipf("no CUDA driver, GPU test skipped: %v", err)
	}
	ck := synthCheckpoint(t, "qwen3", "tiny", 5, "bf16")
	defer ck.Close()
	var stages []StageRecord
	be, err := NewBackend(ck, BackendOptions{NumBlocks: 64, BlockSize: 16, Gemm: GemmAuto, Stage: func(r StageRecord) { stages = append(stages, r) }})
	if errors.Is(err, ErrNoKernels) {
		t.Skipf("no kernels in this build: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	V := be.VocabSize()
	toks := make([]int32, 20)
	for i := range toks {
		toks[i] = int32(i*13 + 5)
	}
	prefill := func(id uint64, blocks []int32) []float32 {
		rows := [][]float32{make([]float32, V)}
		bt := &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: id, Tokens: toks, Pos: 0, Blocks: blocks, WantLogits: true}}}
		if err := be.Forward(ctx, bt, rows); err != nil {
			t.Fatal(err)
		}
		return rows[0]
	}
	shape32 := be.stepGemms(32, false)[0].shape
	if be.warm.has(shape32) {
		t.Fatal("cuBLASLt ran a 32-row shape before any warm-up")
	}
	cold := prefill(1, []int32{0, 1})
	if be.warm.has(shape32) {
		t.Fatal("a cold 20-token prefill ran on cuBLASLt")
	}

	be.WarmBackground(0)
	<-be.bgDone
	var aside *StageRecord
	for i := range stages {
		if stages[i].Stage == trace.StageWarmup && stages[i].Attrs["kind"] == "cublaslt_aside" {
			aside = &stages[i]
		}
	}
	if aside == nil {
		t.Fatalf("no cublaslt_aside warmup stage in %v", stages)
	}
	if e, ok := aside.Attrs["error"]; ok || aside.Attrs["shapes"] != aside.Attrs["of"] || aside.Attrs["shapes"].(int) == 0 {
		t.Fatalf("aside warm-up: %v (error %v)", aside.Attrs, e)
	}
	t.Logf("STAGE aside warm-up %.1f ms %v", float64(aside.End.Sub(aside.Start).Microseconds())/1000, aside.Attrs)
	// What each shape took: the first (cuBLASLt's one-time
	// initialisation) and the longest, within the stage.
	first, _ := aside.Attrs["first_shape_ms"].(float64)
	longest, _ := aside.Attrs["max_shape_ms"].(float64)
	if stageMS := float64(aside.End.Sub(aside.Start).Microseconds()) / 1000; first <= 0 || longest < first || longest > stageMS || aside.Attrs["max_shape"] == nil {
		t.Errorf("aside shape times %v, want 0 < first ≤ longest ≤ the stage's %.1f ms, and the longest named", aside.Attrs, stageMS)
	}
	if !be.warm.has(shape32) || be.warm.isWarming() {
		t.Fatal("after the aside warm-up the 32-row shapes are not warm, or it still says warming")
	}
	if !be.gemmOnSkinny(GemmShape{M: 1, N: shape32.N, K: shape32.K, In: BF16, Out: BF16}, 0, 0) {
		t.Error("one-row GEMMs left gemm_skinny")
	}
	warm := prefill(2, []int32{2, 3})
	var num, den float64
	for i := range cold {
		d := float64(warm[i] - cold[i])
		num += d * d
		den += float64(cold[i]) * float64(cold[i])
	}
	rel := math.Sqrt(num / den)
	t.Logf("ERR prefill logits, gemm_skinny (cold) vs cuBLASLt (warm): rel_l2 %.2e", rel)
	if rel > 1e-2 || math.IsNaN(rel) {
		t.Errorf("prefill logits moved by %.2e between the GEMM paths (tolerance 1e-2)", rel)
	}
	// Every capture splits into its recording and its instantiation.
	for _, st := range stages {
		if st.Stage != trace.StageGraphCapture {
			continue
		}
		rec, _ := st.Attrs["record_ms"].(float64)
		inst, _ := st.Attrs["instantiate_ms"].(float64)
		if stageMS := float64(st.End.Sub(st.Start).Microseconds()) / 1000; rec <= 0 || inst <= 0 || rec+inst > stageMS+0.01 {
			t.Errorf("graph_capture %v: record %.3f + instantiate %.3f ms, want both > 0 and within the stage's %.3f ms", st.Attrs["bucket"], rec, inst, stageMS)
		}
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	for _, Bk := range []int{1, 2, 8, 16, 32, 64} {
		if be.graphs[Bk] == nil {
			t.Errorf("no decode graph for bucket %d after the background warm-up", Bk)
		}
	}
}
