package cuda

import (
	"context"
	"testing"

	"github.com/treni-top/treni-top/engine/sched"
)

// TestGPULogitBiasYieldsBiasedToken: a request with logit_bias is drawn by
// the scheduler on the host from the row of logits the backend brings
// back (Sampling.NeedsRow), while the device's own choice for that row is
// discarded: {target: 100} at temperature 0 yields the target every step,
// beside a plain greedy request in the same batches whose tokens are the
// device's argmax.
func TestGPULogitBiasYieldsBiasedToken(t *testing.T) {
	if _, err := LoadDriver(); err != nil {
		t.Skipf("no CUDA driver, GPU test skipped: %v", err)
	}
	ck := synthCheckpoint(t, "qwen3", "tiny", 11, "bf16")
	defer ck.Close()
	b := newTestBackend(t, ck, BackendOptions{NumBlocks: 64, BlockSize: 16})
	defer b.Close()
	s, err := sched.New(b, sched.Config{MaxSeqLen: 512, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	target := int32(100 % b.VocabSize())
	prompt := []int32{1, 2, 3, 4, 5, 6, 7}
	biased, err := s.Submit(ctx, sched.Request{Prompt: prompt, MaxTokens: 8, Sampling: sched.Sampling{LogitBias: map[int32]float32{target: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := s.Submit(ctx, sched.Request{Prompt: prompt, MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := biased.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	greedy, _, err := plain.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 {
		t.Fatalf("%d tokens, want 8", len(got))
	}
	for i, tok := range got {
		if tok.ID != target {
			t.Fatalf("logit_bias {%d: 100} at temperature 0: token %d is %d", target, i, tok.ID)
		}
	}
	allTarget := true
	for _, tok := range greedy {
		allTarget = allTarget && tok.ID == target
	}
	if allTarget {
		t.Fatalf("the unbiased greedy request also gave %d every step: the check above proves nothing on this checkpoint", target)
	}
	if err := s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
}
