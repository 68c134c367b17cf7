package cpu

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/model/synth"
	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/trace"
)

// greedy runs a prompt and n greedy decode steps on blocks 0.. of b and
// returns the tokens.
func greedy(t *testing.T, b *Backend, prompt []int32, n int) []int32 {
	t.Helper()
	bs := b.BlockSize()
	table := make([]int32, (len(prompt)+n+bs-1)/bs)
	for i := range table {
		table[i] = int32(i)
	}
	row := [][]float32{make([]float32, b.VocabSize())}
	toks := slices.Clone(prompt)
	var out []int32
	pos := 0
	for range n {
		chunk := toks[pos:]
		if err := b.Forward(context.Background(), &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: chunk, Pos: pos, Blocks: table, WantLogits: true}}}, row); err != nil {
			t.Fatal(err)
		}
		pos = len(toks)
		best := 0
		for i, v := range row[0] {
			if v > row[0][best] {
				best = i
			}
		}
		toks = append(toks, int32(best))
		out = append(out, int32(best))
	}
	return out
}

// onePhase checks that ps is one phase of stage st and returns its attrs.
func onePhase(t *testing.T, ps []sched.Phase, st trace.Stage) trace.Attrs {
	t.Helper()
	if len(ps) != 1 || ps[0].Stage != st || ps[0].End.Before(ps[0].Start) {
		t.Fatalf("phases %+v, want one %s", ps, st)
	}
	return ps[0].Attrs
}

// TestSleepWakeRoundTrip: both sleep levels, for both load modes, refuse
// steps while asleep and give the same greedy tokens after the wake as
// before the sleep; level 2 lets go of the weights and reads them again.
func TestSleepWakeRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(context.Background(), synth.Options{Arch: "qwen3", Preset: synth.PresetTiny, OutDir: dir, Seed: 11, Workers: 1}); err != nil {
		t.Fatal(err)
	}
	prompt := []int32{5, 17, 42, 99, 7}
	for _, mode := range []string{model.LoadMmap, model.LoadCopy} {
		t.Run(mode, func(t *testing.T) {
			ck, err := model.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if mode == model.LoadCopy {
				if _, err := ck.CopyToMemory(context.Background(), 2); err != nil {
					t.Fatal(err)
				}
			}
			b, err := New(ck, Options{NumBlocks: 8, BlockSize: 16, Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ctx := context.Background()
			want := greedy(t, b, prompt, 12)
			for _, level := range []int{sched.SleepLevel1, sched.SleepLevel2} {
				ps, err := b.Sleep(ctx, level)
				if err != nil {
					t.Fatal(err)
				}
				a := onePhase(t, ps, trace.StageSleep)
				if a["level"] != level || (level == 2) != (a["weights"] == "released") {
					t.Fatalf("level %d sleep attrs %v", level, a)
				}
				if ck.Released() != (level == 2) {
					t.Fatalf("level %d: checkpoint released %v", level, ck.Released())
				}
				if _, err := b.Sleep(ctx, level); err == nil {
					t.Fatal("a second sleep succeeded")
				}
				row := [][]float32{make([]float32, b.VocabSize())}
				if err := b.Forward(ctx, &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: prompt, Blocks: []int32{0}, WantLogits: true}}}, row); !errors.Is(err, ErrAsleep) {
					t.Fatalf("a step while asleep: %v, want ErrAsleep", err)
				}
				if err := b.CopyBlocks(ctx, []int32{0}, []int32{1}); !errors.Is(err, ErrAsleep) {
					t.Fatalf("a block copy while asleep: %v, want ErrAsleep", err)
				}
				// The KV cache first, as vLLM allows: still asleep.
				ps, err = b.Wake(ctx, false, true)
				if err != nil {
					t.Fatal(err)
				}
				onePhase(t, ps, trace.StageKVAlloc)
				if w, k := b.Asleep(); !w || k {
					t.Fatalf("after waking the KV cache: asleep weights %v, KV %v", w, k)
				}
				if err := b.Forward(ctx, &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: prompt, Blocks: []int32{0}, WantLogits: true}}}, row); !errors.Is(err, ErrAsleep) {
					t.Fatalf("a step with the weights asleep: %v, want ErrAsleep", err)
				}
				ps, err = b.Wake(ctx, true, true) // the KV cache is awake: weights only
				if err != nil {
					t.Fatal(err)
				}
				a = onePhase(t, ps, trace.StageWeightsRestore)
				if wantBytes := level == 2; (a["bytes"].(int64) > 0) != wantBytes {
					t.Fatalf("level %d weights_restore attrs %v", level, a)
				}
				if w, k := b.Asleep(); w || k {
					t.Fatalf("after the wake: asleep weights %v, KV %v", w, k)
				}
				if got := greedy(t, b, prompt, 12); !slices.Equal(got, want) {
					t.Fatalf("level %d: greedy tokens after the wake %v, before the sleep %v", level, got, want)
				}
			}
		})
	}
}

// TestSleepRefusals: a bad level, and level 2 on a backend without a
// checkpoint to reload from, are refused with nothing freed.
func TestSleepRefusals(t *testing.T) {
	b := newTestBackend(t, tinyModel(testArches[0], 3), 4, 1)
	defer b.Close()
	for _, level := range []int{0, 3, sched.SleepLevel2} {
		if _, err := b.Sleep(context.Background(), level); err == nil {
			t.Fatalf("level %d sleep succeeded", level)
		}
	}
	if err := b.usable(); err != nil {
		t.Fatalf("after refused sleeps: %v", err)
	}
}
