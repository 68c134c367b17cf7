package sched

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
)

// tokenFake is the fake model with device-style sampling: ForwardTokens
// computes every wanted row internally (as a device would), samples it with
// the shared Sampler, and copies a row out only where the scheduler passed
// one. It records which rows were asked for.
type tokenFake struct {
	*fakeBackend
	smp Sampler

	tmu       sync.Mutex
	calls     int
	rowsAsked map[uint64]int // seq → logits rows requested
	wanted    map[uint64]int // seq → chunks with WantLogits
	// randomAsked counts, per seq, the choices that asked the device
	// for a random draw rather than a greedy one.
	randomAsked map[uint64]int
}

func newTokenFake(vocab, blockSize, numBlocks int) *tokenFake {
	return &tokenFake{fakeBackend: newFake(vocab, blockSize, numBlocks), rowsAsked: map[uint64]int{}, wanted: map[uint64]int{}, randomAsked: map[uint64]int{}}
}

// Forward must not be used when ForwardTokens exists.
func (f *tokenFake) Forward(ctx context.Context, b *Batch, logits [][]float32) error {
	return fmt.Errorf("tokenFake: the scheduler called Forward on a TokenBackend")
}

func (f *tokenFake) ForwardTokens(ctx context.Context, b *Batch, choice []TokenChoice, tokens []int32, logits [][]float32) error {
	if len(choice) != len(b.Seqs) || len(tokens) != len(b.Seqs) || len(logits) < len(b.Seqs) {
		return fmt.Errorf("tokenFake: %d choices, %d tokens, %d logits for %d chunks", len(choice), len(tokens), len(logits), len(b.Seqs))
	}
	rows := make([][]float32, len(b.Seqs))
	for i, c := range b.Seqs {
		if c.WantLogits {
			rows[i] = make([]float32, f.vocab)
		}
	}
	if err := f.fakeBackend.Forward(ctx, b, rows); err != nil {
		return err
	}
	f.tmu.Lock()
	defer f.tmu.Unlock()
	f.calls++
	for i, c := range b.Seqs {
		if logits[i] != nil {
			f.rowsAsked[c.SeqID]++
			if !c.WantLogits {
				return fmt.Errorf("tokenFake: logits row passed for seq %d's chunk without WantLogits", c.SeqID)
			}
			copy(logits[i], rows[i])
		}
		if c.WantLogits {
			f.wanted[c.SeqID]++
			if !choice[i].Greedy() {
				f.randomAsked[c.SeqID]++
			}
			tokens[i] = f.smp.Sample(rows[i], choice[i])
		}
	}
	return nil
}

// A seeded request draws the same tokens through Forward plus host
// sampling and through a backend's own sampling (ForwardTokens), alone or
// in a batch, greedy or not.
func TestForwardTokensMatchesHostSampling(t *testing.T) {
	reqs := []Request{
		{Prompt: prompt(1, 7), MaxTokens: 25, Sampling: Sampling{Temperature: 1.5, Seed: 11, Seeded: true}},
		{Prompt: prompt(2, 30), MaxTokens: 25, Sampling: Sampling{Temperature: 0.8, TopK: 12, Seed: 12, Seeded: true}},
		{Prompt: prompt(3, 5), MaxTokens: 25, Sampling: Sampling{Temperature: 2, TopP: 0.7, Seed: 13, Seeded: true}},
		{Prompt: prompt(4, 9), MaxTokens: 25},
	}
	run := func(be Backend) [][]int32 {
		s := start(t, be, Config{MaxBatch: 4, MaxBatchedTokens: 16})
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
				toks, _, err := st.Collect(context.Background())
				if err != nil {
					t.Error(err)
				}
				out[i] = ids(toks)
			}()
		}
		wg.Wait()
		if err := s.KV().CheckLeaks(); err != nil {
			t.Error(err)
		}
		return out
	}
	host := run(newFake(testVocab, 4, 256))
	tf := newTokenFake(testVocab, 4, 256)
	dev := run(tf)
	for i := range reqs {
		if len(host[i]) != 25 || !slices.Equal(host[i], dev[i]) {
			t.Errorf("request %d: host sampling %v, ForwardTokens %v", i, host[i], dev[i])
		}
	}
	if want := reference(reqs[3].Prompt, 25, testVocab); !slices.Equal(dev[3], want) {
		t.Errorf("greedy request through ForwardTokens: %v, want %v", dev[3], want)
	}
	if tf.calls == 0 {
		t.Fatal("the scheduler never called ForwardTokens")
	}
}

// The scheduler asks a TokenBackend for a logits row only for requests that
// want logprobs, once per generated token, and reports the right logprob.
func TestForwardTokensAsksOnlyForNeededRows(t *testing.T) {
	tf := newTokenFake(testVocab, 4, 512)
	s := start(t, tf, Config{MaxBatch: 8, MaxBatchedTokens: 12})
	type res struct {
		id   uint64
		toks []Token
	}
	results := make([]res, 8)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := Request{Prompt: prompt(i, 5+3*i), MaxTokens: 10, Logprobs: i%4 == 0}
			if i%2 == 1 {
				r.Sampling = Sampling{Temperature: 1, Seed: int64(i), Seeded: true}
			}
			st, err := s.Submit(context.Background(), r)
			if err != nil {
				t.Error(err)
				return
			}
			toks, _, err := st.Collect(context.Background())
			if err != nil {
				t.Error(err)
			}
			results[i] = res{st.ID(), toks}
		}()
	}
	wg.Wait()
	tf.tmu.Lock()
	defer tf.tmu.Unlock()
	for i, r := range results {
		asked := tf.rowsAsked[r.id]
		switch {
		case i%4 == 0 && asked != 10:
			t.Errorf("request %d wants logprobs: %d rows asked for 10 tokens", i, asked)
		case i%4 != 0 && asked != 0:
			t.Errorf("request %d wants no logprobs, yet %d logits rows were asked for", i, asked)
		}
		if tf.wanted[r.id] != 10 {
			t.Errorf("request %d: %d chunks wanted a token, want 10", i, tf.wanted[r.id])
		}
		if i%4 != 0 {
			continue
		}
		// The fake model puts logit 5 on its greedy token and (v·7 mod 11)/11
		// elsewhere; requests 0 and 4 are greedy, so each token's
		// log-softmax is known.
		for _, tok := range r.toks {
			row := make([]float32, testVocab)
			for v := range row {
				row[v] = float32((v*7)%11) / 11
			}
			row[tok.ID] = 5
			var z float64
			for _, l := range row {
				z += math.Exp(float64(l) - 5)
			}
			if want := -math.Log(z); math.Abs(float64(tok.Logprob)-want) > 1e-5 {
				t.Fatalf("request %d token %d: logprob %v, want %v", i, tok.ID, tok.Logprob, want)
			}
		}
	}
}

// TestHostProcessorsRoutedOnEveryBackend: a request with logit_bias, min_p
// or repetition_penalty is drawn by the scheduler from its row of logits
// on a backend that samples itself too (the CUDA backend's path, decided
// here without a GPU): the row is brought back for each of its tokens, the
// device is asked only for its cheapest (greedy) choice, which is
// replaced, and the tokens are the ones host sampling draws from the same
// rows. A request without them keeps the device's own draw.
func TestHostProcessorsRoutedOnEveryBackend(t *testing.T) {
	const target = 42
	reqs := []Request{
		{Prompt: prompt(1, 7), MaxTokens: 10, Sampling: Sampling{LogitBias: map[int32]float32{target: 100}}},
		{Prompt: prompt(2, 9), MaxTokens: 10, Sampling: Sampling{Temperature: 1, Seed: 5, Seeded: true, MinP: 0.3, RepetitionPenalty: 1.3}},
		{Prompt: prompt(3, 5), MaxTokens: 10, Sampling: Sampling{Temperature: 1, Seed: 6, Seeded: true}},
	}
	run := func(be Backend) ([][]int32, []uint64) {
		s := start(t, be, Config{MaxBatch: 4, MaxBatchedTokens: 16})
		out, seqs := make([][]int32, len(reqs)), make([]uint64, len(reqs))
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
				toks, _, err := st.Collect(context.Background())
				if err != nil {
					t.Error(err)
				}
				out[i], seqs[i] = ids(toks), st.ID()
			}()
		}
		wg.Wait()
		return out, seqs
	}
	host, _ := run(newFake(testVocab, 4, 256))
	tf := newTokenFake(testVocab, 4, 256)
	dev, seqs := run(tf)
	for i := range reqs {
		if len(dev[i]) != 10 || !slices.Equal(host[i], dev[i]) {
			t.Errorf("request %d: host sampling %v, through ForwardTokens %v", i, host[i], dev[i])
		}
	}
	for j, tok := range dev[0] {
		if tok != target {
			t.Fatalf("logit_bias {%d: 100} at temperature 0: token %d is %d (%v)", target, j, tok, dev[0])
		}
	}
	tf.tmu.Lock()
	defer tf.tmu.Unlock()
	for i, id := range seqs {
		rows, random := tf.rowsAsked[id], tf.randomAsked[id]
		if i < 2 && (rows != 10 || random != 0) {
			t.Errorf("request %d uses host processors: %d rows brought back and %d random device draws for 10 tokens; want 10 and 0", i, rows, random)
		}
		if i == 2 && (rows != 0 || random != 10) {
			t.Errorf("request %d uses none: %d rows brought back and %d random device draws for 10 tokens; want 0 and 10", i, rows, random)
		}
	}
}
