package cuda

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/trace"
)

// TestGPUSleepWake: in sleep mode, both levels give the weights' and the
// KV pool's device memory back (the device's free memory grows by at least
// their sizes), refuse steps while asleep, and after a wake serve the same
// greedy tokens as before, replaying the decode graphs captured before the
// first sleep without capturing any again. A run of cycles leaves the
// device's free memory and the process's RSS where the first cycle left
// them. TRENI_CUDA_BIG=1 runs the demo shape instead of tiny;
// TRENI_CUDA_SLEEP_CYCLES=N runs the first N cycles only (at least 2: one
// of each level), for compute-sanitizer.
func TestGPUSleepWake(t *testing.T) {
	if _, err := LoadDriver(); err != nil {
		t.Skipf("no CUDA driver, GPU test skipped: %v", err)
	}
	preset := "tiny"
	if os.Getenv("TRENI_CUDA_BIG") != "" {
		preset = "demo"
	}
	ck := synthCheckpoint(t, "qwen3", preset, 13, "bf16")
	defer ck.Close()
	gb := newTestBackend(t, ck, BackendOptions{NumBlocks: 64, BlockSize: 16, SleepMode: true})
	defer gb.Close()
	gb.WarmBackground(4)
	gb.waitBackground() // the GEMM paths settle before the reference tokens
	// No prefix cache and one request at a time: every generation below
	// runs the same steps, so its greedy tokens must be the same bits.
	s, err := sched.New(gb, sched.Config{MaxSeqLen: 512, MaxBatch: 4, NoPrefixCache: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	defer func() { cancel(); <-runDone }()
	V := gb.VocabSize()
	gen := func() [][]int32 {
		var out [][]int32
		for seed := range 2 {
			p := make([]int32, 19+seed*7)
			for i := range p {
				p[i] = int32((i*7919 + seed*104729 + 11) % V)
			}
			st, err := s.Submit(ctx, sched.Request{Prompt: p, MaxTokens: 24, Sampling: sched.Sampling{Temperature: 0}})
			if err != nil {
				t.Fatal(err)
			}
			toks, res, err := st.Collect(ctx)
			if err != nil || res.Finish == sched.FinishError {
				t.Fatalf("generation: %v %v", err, res.Err)
			}
			ids := make([]int32, len(toks))
			for i, tk := range toks {
				ids[i] = tk.ID
			}
			out = append(out, ids)
		}
		return out
	}
	memFree := func() int64 {
		var free uint64
		onRunner(t, gb, func() error {
			var err error
			free, _, err = gb.c.MemInfo()
			return err
		})
		return int64(free)
	}
	captures := func() int {
		n := 0
		for _, st := range gb.Stages() {
			if st.Stage == trace.StageGraphCapture {
				n++
			}
		}
		return n
	}
	gen()
	want := gen()
	if gb.GraphLaunches() == 0 {
		t.Fatal("no decode graph replayed: this test needs graphs to check they survive a sleep")
	}
	graphs, captured := len(gb.graphs), captures()
	need := gb.weightsBytes + gb.kvBytes
	var freeAwake []int64
	var rss []float64
	levels := []int{1, 2, 1, 1, 2, 1, 1, 1}
	if n, err := strconv.Atoi(os.Getenv("TRENI_CUDA_SLEEP_CYCLES")); err == nil && n >= 2 && n < len(levels) {
		levels = levels[:n]
	}
	for cycle, level := range levels {
		free0 := memFree()
		var slept, woke []sched.Phase
		t0 := time.Now()
		if err := s.Exclusive(ctx, true, func() error {
			s.ResetPrefixCache()
			var err error
			slept, err = gb.Sleep(ctx, level)
			return err
		}); err != nil {
			t.Fatalf("cycle %d: sleep at level %d: %v", cycle, level, err)
		}
		sleepMS := durMS(time.Since(t0))
		if freed := memFree() - free0; freed < need {
			t.Fatalf("cycle %d: level-%d sleep freed %d bytes of device memory, want at least the weights' and the KV pool's %d", cycle, level, freed, need)
		}
		row := [][]float32{make([]float32, V)}
		if err := gb.Forward(ctx, &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 9, Tokens: []int32{1, 2}, Blocks: []int32{0}, WantLogits: true}}}, row); !errors.Is(err, ErrAsleep) {
			t.Fatalf("cycle %d: a step while asleep: %v, want ErrAsleep", cycle, err)
		}
		t1 := time.Now()
		if err := s.Exclusive(ctx, false, func() error {
			var err error
			woke, err = gb.Wake(ctx, true, true)
			return err
		}); err != nil {
			t.Fatalf("cycle %d: wake from level %d: %v", cycle, level, err)
		}
		wakeMS := durMS(time.Since(t1))
		if cycle < 3 {
			for _, p := range slices.Concat(slept, woke) {
				t.Logf("SLEEP %s-%s level %d %-16s %8.2f ms %v", "qwen3", preset, level, p.Stage, durMS(p.End.Sub(p.Start)), p.Attrs)
			}
		}
		t.Logf("SLEEP %s-%s cycle %d level %d: sleep %.2f ms, wake %.2f ms (weights %d bytes, KV %d bytes)", "qwen3", preset, cycle, level, sleepMS, wakeMS, gb.weightsBytes, gb.kvBytes)
		if w, k := gb.Asleep(); w || k {
			t.Fatalf("cycle %d: still asleep after the wake (weights %v, KV %v)", cycle, w, k)
		}
		if got := gen(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("cycle %d, level %d: greedy tokens after the wake %v, before the first sleep %v", cycle, level, got, want)
		}
		if len(gb.graphs) != graphs || captures() != captured {
			t.Fatalf("cycle %d: %d graphs and %d captures after the wake, %d and %d before the first sleep: graphs were captured again", cycle, len(gb.graphs), captures(), graphs, captured)
		}
		freeAwake = append(freeAwake, memFree())
		if a := slept[0].Attrs; a["rss_mb"] != nil {
			rss = append(rss, a["rss_mb"].(float64))
		}
	}
	// Flat: every awake cycle leaves the device's free memory within
	// 64 MiB of the first (allocator noise), and every sleep the same RSS.
	for i, f := range freeAwake {
		if d := f - freeAwake[0]; d > 64<<20 || d < -64<<20 {
			t.Fatalf("device free memory after cycle %d differs from cycle 0's by %d bytes: %v", i, d, freeAwake)
		}
	}
	t.Logf("SLEEP %s-%s device free after each wake %v, RSS at each sleep %v MB", "qwen3", preset, freeAwake, rss)
}
