package cpu

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/treni-top/treni-top/engine/sched"
)

// forwardOnly hides ForwardTokens, so the scheduler samples on the host
// from full logits rows.
type forwardOnly struct{ sched.Backend }

// serveAll runs reqs concurrently through a scheduler over be and returns
// each request's token ids.
func serveAll(t *testing.T, be sched.Backend, reqs []sched.Request) [][]int32 {
	t.Helper()
	s, err := sched.New(be, sched.Config{MaxBatch: 4, MaxBatchedTokens: 8, MaxSeqLen: 256})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	out := make([][]int32, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := s.Submit(context.Background(), r)
			if err != nil {
				t.Error(err)
				return
			}
			toks, res, err := st.Collect(context.Background())
			if err != nil || res.Finish != sched.FinishLength {
				t.Errorf("request %d: %v %+v", i, err, res)
			}
			for _, tk := range toks {
				out[i] = append(out[i], tk.ID)
			}
		}()
	}
	wg.Wait()
	if err := s.KV().CheckLeaks(); err != nil {
		t.Error(err)
	}
	return out
}

// Seeded requests draw identical tokens through Forward plus the
// scheduler's host sampling and through the backend's ForwardTokens, in a
// batch with greedy and random neighbours, on two worker threads.
func TestForwardTokensMatchesForward(t *testing.T) {
	m := tinyModel(testArches[0], 5)
	rng := rand.New(rand.NewPCG(9, 9))
	var reqs []sched.Request
	for i := range 6 {
		r := sched.Request{Prompt: randTokens(rng, 3+5*i), MaxTokens: 20}
		switch i % 3 {
		case 1:
			r.Sampling = sched.Sampling{Temperature: 20, Seed: int64(i), Seeded: true}
		case 2:
			r.Sampling = sched.Sampling{Temperature: 0.9, TopK: 40, TopP: 0.9, Seed: int64(i), Seeded: true}
		}
		reqs = append(reqs, r)
	}
	host := serveAll(t, forwardOnly{newTestBackend(t, m, 64, 2)}, reqs)
	dev := serveAll(t, newTestBackend(t, m, 64, 2), reqs)
	for i := range reqs {
		if len(host[i]) != 20 || !slices.Equal(host[i], dev[i]) {
			t.Errorf("request %d (%+v): Forward+host %v, ForwardTokens %v", i, reqs[i].Sampling, host[i], dev[i])
		}
	}
	distinct := map[int32]bool{}
	for _, tk := range dev[1] {
		distinct[tk] = true
	}
	if len(distinct) < 3 {
		t.Errorf("temperature-20 request drew only %d distinct tokens: the draw may not be random at all", len(distinct))
	}
}

// ForwardTokens refuses a batch whose per-chunk slices are short instead of
// indexing past them.
func TestForwardTokensBadSlices(t *testing.T) {
	b := newTestBackend(t, tinyModel(testArches[0], 5), 8, 1)
	bt := &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: []int32{1, 2}, Blocks: []int32{0}, WantLogits: true}}}
	if err := b.ForwardTokens(context.Background(), bt, nil, make([]int32, 1), make([][]float32, 1)); err == nil {
		t.Fatal("ForwardTokens accepted no choices for one chunk")
	}
	tok := []int32{-1}
	if err := b.ForwardTokens(context.Background(), bt, make([]sched.TokenChoice, 1), tok, make([][]float32, 1)); err != nil {
		t.Fatal(err)
	}
	if tok[0] < 0 || tok[0] >= tVocab {
		t.Fatalf("greedy token %d outside the vocabulary", tok[0])
	}
}

// Greedy outputs are identical with and without the prefix cache on the
// real CPU model, for prompts that share prefixes, repeat exactly (the
// boundary block copied with CopyBlocks) and diverge inside a block.
func TestPrefixCacheSameOutput(t *testing.T) {
	m := tinyModel(testArches[0], 6)
	rng := rand.New(rand.NewPCG(4, 4))
	system := randTokens(rng, 4*tBlockSize)
	var reqs []sched.Request
	for i := range 8 {
		p := slices.Clone(system[:tBlockSize*(2+i%3)])
		if i%4 != 3 {
			p = append(p, randTokens(rng, 1+i)...)
		}
		reqs = append(reqs, sched.Request{Prompt: p, MaxTokens: 12})
	}
	serial := func(cfg sched.Config, be sched.Backend) ([][]int32, sched.Metrics) {
		s, err := sched.New(be, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		defer func() { cancel(); <-done }()
		var out [][]int32
		for _, r := range reqs {
			st, err := s.Submit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			toks, _, err := st.Collect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var ids []int32
			for _, tk := range toks {
				ids = append(ids, tk.ID)
			}
			out = append(out, ids)
		}
		if err := s.KV().CheckLeaks(); err != nil {
			t.Error(err)
		}
		return out, s.Metrics()
	}
	cfg := sched.Config{MaxBatchedTokens: 8, MaxSeqLen: 128}
	cached, mc := serial(cfg, newTestBackend(t, m, 64, 2))
	cfg.NoPrefixCache = true
	plain, _ := serial(cfg, newTestBackend(t, m, 64, 2))
	for i := range reqs {
		if !slices.Equal(cached[i], plain[i]) {
			t.Errorf("request %d: with the prefix cache %v, without %v", i, cached[i], plain[i])
		}
	}
	if mc.PrefixHitBlocks == 0 {
		t.Fatalf("prompts sharing a 4-block prefix never hit: %+v", mc)
	}
}

func TestCopyBlocksRefusesBadIDs(t *testing.T) {
	b := newTestBackend(t, tinyModel(testArches[0], 5), 4, 1)
	for _, c := range [][2][]int32{{{0}, {4}}, {{-1}, {0}}, {{0, 1}, {2}}} {
		if err := b.CopyBlocks(context.Background(), c[0], c[1]); err == nil {
			t.Errorf("CopyBlocks(%v, %v) accepted", c[0], c[1])
		}
	}
}
