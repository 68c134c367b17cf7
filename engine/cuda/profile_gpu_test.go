package cuda

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/sched"
)

// TestGPUStepProfile says where a step's device time goes on a real-sized
// checkpoint (TRENI_PROFILE_MODEL=dir, e.g. the 4B-shaped synth of
// scripts/gpu-cold-bench.sh): per operation, summed over the layers, with
// CUDA events, for the steps the serve benchmark runs — batch-1 decode,
// 64-sequence decode at a 1,100-token context, a 256-token prefill chunk
// at positions 768–1023 beside 63 decoding sequences, a 256-, a 512- and
// a 1,024-token prefill (on mid tiles, FlashMidTiling), chunks behind
// longer contexts (1,024 tokens at 15,360, the last of a 16k prompt, and
// at 3,072; 512 at 15,872), the uncached
// 12-token tails of 64 cached prompts, and the steps of the fresh-prompt
// run (two whole 1,024-token prompts at the default token budget, four at
// a budget of 4,096) — and
// the wall time of a 64-row decode step with logits to the host (Forward)
// against token ids only (ForwardTokens); each step with attn_mma (GEMMs on cuBLASLt,
// then on gemm_skinny where it fits, unfused and then with the norms and
// SwiGLU in front of its GEMMs folded into them where they fit), with
// attn_mma on four-warp blocks only (flash4) and with paged_attention.
// Eager steps (graphs off), KV contents zero: attention costs do not
// depend on the values.
func TestGPUStepProfile(t *testing.T) {
	ck, _ := profileModel(t)
	const BS, seqs, ctxLen = 16, 64, 1100
	perSeq := (ctxLen + 300 + BS - 1) / BS
	NB := perSeq * seqs
	be, err := NewBackend(ck, BackendOptions{NumBlocks: NB, BlockSize: BS, NoGraphs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	V := be.VocabSize()
	tables := make([][]int32, seqs)
	for i := range tables {
		tables[i] = make([]int32, perSeq)
		for j := range tables[i] {
			tables[i][j] = int32(i*perSeq + j)
		}
	}
	decode := func(n, pos int) *sched.Batch {
		bt := &sched.Batch{}
		for i := 0; i < n; i++ {
			bt.Seqs = append(bt.Seqs, sched.SeqChunk{SeqID: uint64(i), Tokens: []int32{int32(i + 1)}, Pos: pos, Blocks: tables[i], WantLogits: true})
		}
		return bt
	}
	mixed := func() *sched.Batch {
		toks := make([]int32, 256)
		for i := range toks {
			toks[i] = int32(i*7 + 3)
		}
		bt := decode(seqs-1, ctxLen)
		bt.Seqs = append(bt.Seqs, sched.SeqChunk{SeqID: 999, Tokens: toks, Pos: 768, Blocks: tables[seqs-1], WantLogits: false})
		return bt
	}
	// n sequences' chunks of length tokens at position pos in one step:
	// chunks(n, 1024, 0) is n whole 1,024-token prompts, what a step of the
	// 64-stream fresh-prompt benchmark runs at a token budget of n·1,024;
	// chunks(64, 12, 848) the uncached 12-token tails of 64 prompts whose
	// first 848 tokens hit the prefix cache, what the 64-stream run on
	// cached prompts prefills (one short tile a sequence at a long context).
	chunks := func(n, length, pos int) *sched.Batch {
		bt := &sched.Batch{}
		for i := 0; i < n; i++ {
			toks := make([]int32, length)
			for j := range toks {
				toks[j] = int32((i*length+j)*7%5000 + 3)
			}
			bt.Seqs = append(bt.Seqs, sched.SeqChunk{SeqID: uint64(100 + i), Tokens: toks, Pos: pos, Blocks: tables[i], WantLogits: true})
		}
		return bt
	}
	// long(length, pos) is one chunk at a long context: the block tables of
	// the first sequences joined into one (perSeq·seqs blocks in all).
	long := func(length, pos int) *sched.Batch {
		var blocks []int32
		for i := 0; len(blocks)*BS < pos+length; i++ {
			blocks = append(blocks, tables[i]...)
		}
		bt := chunks(1, length, pos)
		bt.Seqs[0].Blocks = blocks
		return bt
	}
	rows := make([][]float32, seqs)
	for i := range rows {
		rows[i] = make([]float32, V)
	}
	choice := make([]sched.TokenChoice, seqs)
	toks := make([]int32, seqs)
	cases := []profStep{
		{"decode b1 ctx 60", decode(1, 60)},
		{"decode b64 ctx 1100", decode(seqs, ctxLen)},
		{"prefill 256 @768 + 63 decode ctx 1100", mixed()},
		{"prefill 256 @0", &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: mixed().Seqs[seqs-1].Tokens, Pos: 0, Blocks: tables[0], WantLogits: true}}}},
		{"prefill 512 @0", chunks(1, 512, 0)},
		{"prefill 1024 @0", chunks(1, 1024, 0)},
		{"prefill 64 x 12 @848 (cached prompts)", chunks(seqs, 12, 848)},
		{"prefill 2 x 1024 @0", chunks(2, 1024, 0)},
		{"prefill 4 x 1024 @0", chunks(4, 1024, 0)},
		{"prefill 1024 @15360 (last chunk of a 16k prompt)", long(1024, 15360)},
		{"prefill 1024 @3072", long(1024, 3072)},
		{"prefill 512 @15872", long(512, 15872)},
	}
	const reps = 5
	// Every case with each attention kernel and each GEMM path, side by
	// side in one run.
	// TRENI_PROFILE_DEFAULT_ONLY=1: the serving path's kernels only (the
	// first), for kernel experiments that compare fatbins.
	modes := []struct{ att, gemm, fuse string }{
		{AttentionFlash, GemmCublasLt, FuseOff}, {AttentionFlash, GemmSkinny, FuseOff}, {AttentionFlash, GemmSkinny, FuseOn},
		{AttentionFlash4, GemmCublasLt, FuseOff}, {AttentionPaged, GemmCublasLt, FuseOff},
	}
	if os.Getenv("TRENI_PROFILE_DEFAULT_ONLY") == "1" {
		modes = modes[:1]
	}
	// TRENI_PROFILE_CASES="decode b64 ctx 1100,…": those cases only (names
	// as logged), for kernel experiments that time one step.
	if only := os.Getenv("TRENI_PROFILE_CASES"); only != "" {
		cases = slices.DeleteFunc(cases, func(c profStep) bool { return !slices.Contains(strings.Split(only, ","), c.name) })
		if len(cases) == 0 {
			t.Fatalf("TRENI_PROFILE_CASES=%q names none of the steps (their names are the PROFILE lines')", only)
		}
	}
	var all []profCase
	for _, m := range modes {
		for _, c := range cases {
			all = append(all, profCase{m.att, m.gemm, m.fuse, c.name, c.bt})
		}
	}
	for _, c := range all {
		be.mu.Lock()
		be.opts.Attention, be.opts.Gemm, be.opts.Fuse = c.mode, c.gemm, c.fuse
		be.mu.Unlock()
		// Once unprofiled (plans, lazily loaded kernels), then profiled.
		if err := be.ForwardTokens(ctx, c.bt, choice, toks, nil); err != nil {
			t.Fatal(err)
		}
		be.mu.Lock()
		be.prof = newStepProfiler(be.c)
		be.mu.Unlock()
		start := time.Now()
		for r := 0; r < reps; r++ {
			if err := be.ForwardTokens(ctx, c.bt, choice, toks, nil); err != nil {
				t.Fatal(err)
			}
		}
		wall := float64(time.Since(start).Microseconds()) / 1000 / reps
		be.mu.Lock()
		var ops []opTime
		var steps int
		be.r.Do(ctx, func() error { ops, steps = be.prof.sorted(); be.prof.destroy(); return nil })
		be.prof = nil
		be.mu.Unlock()
		var sum float64
		var parts []string
		for _, o := range ops {
			sum += o.ms
		}
		for _, o := range ops {
			parts = append(parts, fmt.Sprintf("%s %.3f (%.0f%%)", o.name, o.ms/float64(max(steps, 1)), 100*o.ms/max(sum, 1e-9)))
		}
		gemm := c.gemm
		if c.fuse == FuseOn {
			gemm += "+fused"
		}
		t.Logf("PROFILE %-6s %-14s %-40s wall %.3f ms/step, device %.3f ms/step: %s", c.mode, gemm, c.name, wall, sum/float64(max(steps, 1)), strings.Join(parts, ", "))
	}
	// Logits to the host against token ids only, 64 decoding rows.
	be.mu.Lock()
	be.opts.Attention, be.opts.Gemm = AttentionFlash, GemmCublasLt
	be.mu.Unlock()
	bt := decode(seqs, ctxLen)
	for _, mode := range []string{"Forward (64 logits rows to host)", "ForwardTokens (64 token ids)"} {
		run := func() error {
			if strings.HasPrefix(mode, "Forward ") {
				return be.Forward(ctx, bt, rows)
			}
			return be.ForwardTokens(ctx, bt, choice, toks, nil)
		}
		if err := run(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for r := 0; r < reps; r++ {
			if err := run(); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("PROFILE %-40s wall %.3f ms/step", mode, float64(time.Since(start).Microseconds())/1000/reps)
	}
}

// profileModel opens the checkpoint TRENI_PROFILE_MODEL names (closed
// with the test), skipping without it or without a CUDA driver.
func profileModel(t *testing.T) (*model.Checkpoint, string) {
	t.Helper()
	dir := os.Getenv("TRENI_PROFILE_MODEL")
	if dir == "" {
		t.Skip("TRENI_PROFILE_MODEL not set")
	}
	if _, err := LoadDriver(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck, dir
}

// profStep is one step TestGPUStepProfile times, by name.
type profStep struct {
	name string
	bt   *sched.Batch
}

// profCase is one step of TestGPUStepProfile with one attention kernel
// and one GEMM path.
type profCase struct {
	mode, gemm, fuse, name string
	bt                     *sched.Batch
}

// TestGPUDecodeLoop splits a batch-1 decode step of a real-sized
// checkpoint (TRENI_PROFILE_MODEL) into device and host time: the wall
// time of ForwardTokens steps one after another, as the scheduler runs
// them (graph replay, device-side greedy choice, the token id back), and
// the device time of the same step's graph replayed back to back on the
// stream with nothing in between (CUDA events). The difference is what the
// backend's host path adds to every token: the metadata upload, the hand
// off to the CUDA thread and back, the launch, the wait. PERF lines for
// the report, not assertions.
func TestGPUDecodeLoop(t *testing.T) {
	ck, dir := profileModel(t)
	const BS, steps, start = 16, 200, 60
	blocks := make([]int32, (start+steps+1+BS-1)/BS)
	for i := range blocks {
		blocks[i] = int32(i)
	}
	be, err := NewBackend(ck, BackendOptions{NumBlocks: len(blocks), BlockSize: BS})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	choice := make([]sched.TokenChoice, 1)
	toks := []int32{1}
	step := func(pos int) {
		bt := &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: []int32{toks[0]}, Pos: pos, Blocks: blocks, WantLogits: true}}}
		if err := be.ForwardTokens(ctx, bt, choice, toks, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Warm: plans, the bucket's graph captured.
	for p := 0; p < start; p++ {
		step(p)
	}
	if be.GraphLaunches() == 0 {
		t.Fatal("no decode graph was replayed: the loop would time eager steps")
	}
	t0 := time.Now()
	for p := start; p < start+steps; p++ {
		step(p)
	}
	wall := float64(time.Since(t0).Microseconds()) / 1000 / steps
	// The graph of the last step, replayed back to back: its metadata
	// (position start+steps−1) is still on the device.
	var dev float64
	be.mu.Lock()
	err = be.r.Do(ctx, func() error {
		g := be.graphs[1]
		if g == nil {
			return fmt.Errorf("no bucket-1 graph")
		}
		e0, err := be.c.NewEvent()
		if err != nil {
			return err
		}
		defer e0.Destroy()
		e1, err := be.c.NewEvent()
		if err != nil {
			return err
		}
		defer e1.Destroy()
		if err := e0.Record(be.s); err != nil {
			return err
		}
		for i := 0; i < steps; i++ {
			if err := g.Launch(be.s); err != nil {
				return err
			}
		}
		if err := e1.Record(be.s); err != nil {
			return err
		}
		if err := e1.Synchronize(); err != nil {
			return err
		}
		ms, err := ElapsedMS(e0, e1)
		dev = float64(ms) / steps
		return err
	})
	be.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DECODE b1 %s (%d layers): ForwardTokens %.3f ms/step (wall, %d steps from position %d); graph replay %.3f ms/step (device, back to back); host path %.3f ms/step",
		filepath.Base(dir), ck.Config.NumLayers, wall, steps, start, dev, wall-dev)
}
