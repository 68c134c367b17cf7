package sched

import (
	"context"
	"slices"
	"testing"
)

// A 2,000-token prompt arriving while three streams decode is prefilled in
// chunks that fill exactly what the step's token budget leaves after the
// decodes, and every running stream gets its token in every one of those
// steps: the prompt never stalls them.
func TestLongPromptInterleavesWithDecodes(t *testing.T) {
	const budget, decoders = 64, 3
	be := newFake(testVocab, 16, 1024)
	s := start(t, be, Config{MaxBatch: 8, MaxBatchedTokens: budget})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var running []uint64
	for i := range decoders {
		st, err := s.Submit(ctx, Request{Prompt: prompt(i, 5), MaxTokens: 3000})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(context.Background()); err != nil { // decoding now
			t.Fatal(err)
		}
		running = append(running, st.ID())
	}
	long := prompt(9, 2000)
	st, err := s.Submit(context.Background(), Request{Prompt: long, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	toks, _, err := st.Collect(context.Background())
	if err != nil || !slices.Equal(ids(toks), reference(long, 2, testVocab)) {
		t.Fatalf("long prompt: %v %v", ids(toks), err)
	}
	prefilled, steps := 0, 0
	for _, r := range be.records() {
		n := r.chunks[st.ID()]
		if prefilled >= len(long) || n == 0 {
			continue
		}
		steps++
		prefilled += n
		total := 0
		for _, c := range r.chunks {
			total += c
		}
		if total > budget {
			t.Fatalf("a step ran %d tokens, over the budget of %d: %v", total, budget, r.chunks)
		}
		for _, id := range running {
			if r.chunks[id] != 1 {
				t.Fatalf("step %d of the prefill gave stream %d %d tokens, want 1: %v", steps, id, r.chunks[id], r.chunks)
			}
		}
		if prefilled < len(long) && n != budget-decoders {
			t.Fatalf("prefill chunk of %d tokens; the budget left after %d decodes is %d", n, decoders, budget-decoders)
		}
	}
	if want := (len(long) + budget - decoders - 1) / (budget - decoders); steps != want {
		t.Fatalf("prefill took %d steps, want %d", steps, want)
	}
}
