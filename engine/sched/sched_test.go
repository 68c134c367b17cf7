package sched

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"
)

const testVocab = 97

// start runs a scheduler over be until the test ends.
func start(t *testing.T, be Backend, cfg Config) *Scheduler {
	t.Helper()
	if cfg.MaxSeqLen == 0 {
		cfg.MaxSeqLen = 4096
	}
	s, err := New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

func ids(toks []Token) []int32 {
	out := make([]int32, len(toks))
	for i, t := range toks {
		out[i] = t.ID
	}
	return out
}

func prompt(seed, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((seed*31 + i*17) % testVocab)
	}
	return p
}

func TestGreedyMatchesReferenceInABatch(t *testing.T) {
	be := newFake(testVocab, 4, 512)
	s := start(t, be, Config{MaxBatch: 8, MaxBatchedTokens: 20})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := prompt(i, 3+i*2)
			st, err := s.Submit(ctx, Request{Prompt: p, MaxTokens: 10 + i})
			if err != nil {
				t.Error(err)
				return
			}
			toks, res, err := st.Collect(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if want := reference(p, 10+i, testVocab); !slices.Equal(ids(toks), want) {
				t.Errorf("request %d: got %v, want %v", i, ids(toks), want)
			}
			if res.Finish != FinishLength || res.CompletionTokens != 10+i || res.PromptTokens != len(p) {
				t.Errorf("request %d: result %+v", i, res)
			}
			for j := 1; j < len(toks); j++ {
				if toks[j].Time.Before(toks[j-1].Time) {
					t.Errorf("request %d: token times go backwards", i)
				}
			}
		}()
	}
	wg.Wait()
	if err := s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
	m := s.Metrics()
	if m.TTFT.Count != 24 || m.Requests[FinishLength] != 24 {
		t.Fatalf("metrics: ttft count %d, finished %v", m.TTFT.Count, m.Requests)
	}
	var want uint64
	for i := range 24 {
		want += uint64(10 + i)
	}
	if m.GeneratedTokens != want || m.ITL.Count != want-24 {
		t.Fatalf("generated %d (want %d), itl count %d", m.GeneratedTokens, want, m.ITL.Count)
	}
}

// A long prompt is prefilled in chunks while a running decode keeps getting
// a token in every one of those steps.
func TestChunkedPrefillDoesNotStallDecodes(t *testing.T) {
	be := newFake(testVocab, 8, 1024)
	be.delay = 200 * time.Microsecond // keeps a from finishing before b is prefilled
	s := start(t, be, Config{MaxBatch: 4, MaxBatchedTokens: 16})
	ctx := context.Background()
	actx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	a, err := s.Submit(actx, Request{Prompt: prompt(1, 4), MaxTokens: 4000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Recv(ctx); err != nil { // a is decoding now
		t.Fatal(err)
	}
	long := prompt(2, 300)
	b, err := s.Submit(ctx, Request{Prompt: long, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	toks, _, err := b.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(toks), reference(long, 2, testVocab)) {
		t.Fatalf("chunked prefill changed the output: %v", ids(toks))
	}
	prefillSteps := 0
	for _, r := range be.records() {
		n, ok := r.chunks[b.ID()]
		if !ok || n <= 1 {
			continue
		}
		prefillSteps++
		if r.chunks[a.ID()] != 1 {
			t.Fatalf("a step prefilling %d tokens of the long prompt had no decode token for the running request: %v", n, r.chunks)
		}
		if n > 15 {
			t.Fatalf("prefill chunk of %d tokens exceeds the budget left after the decode", n)
		}
	}
	if prefillSteps < 300/15 {
		t.Fatalf("long prompt prefilled in %d steps; want it chunked over ≥ %d", prefillSteps, 300/15)
	}
}

func TestPreemptionUnderKVPressure(t *testing.T) {
	be := newFake(testVocab, 4, 8) // 32 positions for everyone
	s, err := New(be, Config{MaxBatch: 8, MaxBatchedTokens: 64, MaxSeqLen: 64})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Queue everything before the loop starts so that all six compete from
	// the first step (Submit before Run is allowed).
	var streams []*Stream
	var prompts [][]int32
	for i := range 6 {
		p := prompt(i+5, 5)
		st, err := s.Submit(ctx, Request{Prompt: p, MaxTokens: 20})
		if err != nil {
			t.Fatal(err)
		}
		streams, prompts = append(streams, st), append(prompts, p)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	for i, st := range streams {
		toks, res, err := st.Collect(ctx)
		if err != nil || res.Finish != FinishLength {
			t.Fatalf("request %d: %v %+v", i, err, res)
		}
		if !slices.Equal(ids(toks), reference(prompts[i], 20, testVocab)) {
			t.Errorf("request %d: preemption changed the output", i)
		}
	}
	if s.Metrics().Preemptions == 0 {
		t.Fatal("expected preemptions with 6×25 positions on a 32-position pool")
	}
	if err := s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
}

func TestCancelFreesBlocks(t *testing.T) {
	be := newFake(testVocab, 4, 64)
	be.delay = time.Millisecond
	s := start(t, be, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	st, err := s.Submit(ctx, Request{Prompt: prompt(3, 9), MaxTokens: 100000})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := st.Recv(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if s.KV().Used() == 0 {
		t.Fatal("a decoding request holds no blocks")
	}
	cancel()
	_, res, err := st.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Finish != FinishCancelled {
		t.Fatalf("finish %q, want cancelled", res.Finish)
	}
	if err := s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
	// Cancelling a request still in the queue works too.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	st2, err := s.Submit(ctx2, Request{Prompt: prompt(4, 3), MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, res, _ := st2.Collect(context.Background()); res.Finish != FinishCancelled && res.Finish != FinishLength {
		t.Fatalf("pre-cancelled request finished %q", res.Finish)
	}
	if err := s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
}

func TestStopConditions(t *testing.T) {
	be := newFake(testVocab, 4, 64)
	s := start(t, be, Config{MaxSeqLen: 20})
	ctx := context.Background()
	p := prompt(7, 6)
	ref := reference(p, 10, testVocab)
	stopAt := -1
	for i, tok := range ref {
		if !slices.Contains(ref[:i], tok) && i >= 2 {
			stopAt = i
			break
		}
	}
	if stopAt < 0 {
		t.Skip("reference has no fresh token to stop on")
	}
	st, _ := s.Submit(ctx, Request{Prompt: p, MaxTokens: 10, StopTokens: []int32{ref[stopAt]}})
	toks, res, _ := st.Collect(ctx)
	if res.Finish != FinishStop || !slices.Equal(ids(toks), ref[:stopAt]) || res.CompletionTokens != stopAt+1 {
		t.Fatalf("stop token: got %v %+v, want %v then stop", ids(toks), res, ref[:stopAt])
	}
	// Context length: 6 prompt tokens in a 20-token context leave 14.
	st, _ = s.Submit(ctx, Request{Prompt: p, MaxTokens: 1000})
	toks, res, _ = st.Collect(ctx)
	if res.Finish != FinishLength || len(toks) != 14 {
		t.Fatalf("context limit: %d tokens, %+v", len(toks), res)
	}
	if err := s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
}

func TestSubmitValidation(t *testing.T) {
	be := newFake(testVocab, 4, 4)
	s := start(t, be, Config{MaxSeqLen: 64})
	bad := []Request{
		{Prompt: nil, MaxTokens: 1},
		{Prompt: prompt(1, 64), MaxTokens: 1},
		{Prompt: prompt(1, 3), MaxTokens: 0},
		{Prompt: prompt(1, 3), MaxTokens: -5},
		{Prompt: prompt(1, 20), MaxTokens: 1}, // more than the 16-position pool
		{Prompt: []int32{1, testVocab}, MaxTokens: 1},
		{Prompt: prompt(1, 3), MaxTokens: 1, Sampling: Sampling{Temperature: -1}},
		{Prompt: prompt(1, 3), MaxTokens: 1, Sampling: Sampling{Temperature: 1, TopP: 1.5}},
		{Prompt: prompt(1, 3), MaxTokens: 1, Sampling: Sampling{LogitBias: map[int32]float32{testVocab: 5}}},
		{Prompt: prompt(1, 3), MaxTokens: 1, Sampling: Sampling{LogitBias: map[int32]float32{-1: 5}}},
		{Prompt: prompt(1, 3), MaxTokens: 1, Sampling: Sampling{Temperature: 1, MinP: 1.5}},
		{Prompt: prompt(1, 3), MaxTokens: 1, Sampling: Sampling{RepetitionPenalty: -1}},
	}
	for i, r := range bad {
		if _, err := s.Submit(context.Background(), r); !errors.Is(err, ErrInvalid) {
			t.Errorf("request %d: err = %v, want ErrInvalid", i, err)
		}
	}
	// The 64-position context asked for is more than the pool's 16.
	if got := s.Config().MaxSeqLen; got != 16 {
		t.Errorf("MaxSeqLen %d with a pool of 4 blocks × 4 positions, want 16", got)
	}
}

func TestBackendFailureAndShutdown(t *testing.T) {
	be := newFake(testVocab, 4, 64)
	be.failAt = 2
	s, err := New(be, Config{MaxSeqLen: 128})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	st, _ := s.Submit(context.Background(), Request{Prompt: prompt(1, 3), MaxTokens: 5})
	_, res, _ := st.Collect(context.Background())
	if res.Finish != FinishError || res.Err == nil {
		t.Fatalf("after an injected failure: %+v", res)
	}
	be.mu.Lock()
	be.delay = 50 * time.Millisecond
	be.mu.Unlock()
	pending, _ := s.Submit(context.Background(), Request{Prompt: prompt(2, 3), MaxTokens: 1000})
	if _, err := pending.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	_, res, _ = pending.Collect(context.Background())
	if res.Finish != FinishError || !errors.Is(res.Err, ErrStopped) {
		t.Fatalf("pending request at shutdown: %+v", res)
	}
	if _, err := s.Submit(context.Background(), Request{Prompt: prompt(1, 3), MaxTokens: 1}); !errors.Is(err, ErrStopped) {
		t.Fatalf("Submit after stop: %v", err)
	}
	if err := s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
	if _, err := pending.Recv(context.Background()); err != io.EOF {
		t.Fatalf("Recv after the end: %v", err)
	}
}

func TestSeededSamplingIsDeterministic(t *testing.T) {
	be := newFake(testVocab, 4, 256)
	s := start(t, be, Config{})
	ctx := context.Background()
	run := func(seed int64) []int32 {
		st, err := s.Submit(ctx, Request{Prompt: prompt(9, 5), MaxTokens: 30, Sampling: Sampling{Temperature: 3, TopP: 0.95, Seed: seed, Seeded: true}})
		if err != nil {
			t.Fatal(err)
		}
		toks, _, _ := st.Collect(ctx)
		return ids(toks)
	}
	a, b, c := run(42), run(42), run(43)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different tokens: %v vs %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("different seeds gave identical 30-token samples at temperature 3: %v", a)
	}
}

// Seeded requests sampled side by side (on several sampling workers) give
// the tokens they give alone.
func TestSeededSamplingInABatch(t *testing.T) {
	req := func(i int) Request {
		return Request{Prompt: prompt(i, 6), MaxTokens: 20, Sampling: Sampling{Temperature: 2, TopK: 40, Seed: int64(100 + i), Seeded: true}}
	}
	alone := make([][]int32, 8)
	{
		s := start(t, newFake(testVocab, 4, 512), Config{})
		for i := range alone {
			st, err := s.Submit(context.Background(), req(i))
			if err != nil {
				t.Fatal(err)
			}
			toks, _, _ := st.Collect(context.Background())
			alone[i] = ids(toks)
		}
	}
	s, err := New(newFake(testVocab, 4, 512), Config{MaxSeqLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	var streams []*Stream
	for i := range alone {
		st, err := s.Submit(context.Background(), req(i))
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for i, st := range streams {
		toks, _, _ := st.Collect(context.Background())
		if !slices.Equal(ids(toks), alone[i]) {
			t.Fatalf("request %d: batched %v, alone %v", i, ids(toks), alone[i])
		}
	}
}
