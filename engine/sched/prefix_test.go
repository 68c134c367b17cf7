package sched

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// copyFake is the fake model with BlockCopier: it copies KV slots between
// blocks and records every copy.
type copyFake struct {
	*fakeBackend
	copies  [][2]int32
	failCpy bool
}

func (f *copyFake) CopyBlocks(ctx context.Context, src, dst []int32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(src) != len(dst) {
		return fmt.Errorf("copyFake: %d sources, %d destinations", len(src), len(dst))
	}
	if f.failCpy {
		return fmt.Errorf("copyFake: injected copy failure")
	}
	for i := range src {
		copy(f.slots[dst[i]], f.slots[src[i]])
		f.copies = append(f.copies, [2]int32{src[i], dst[i]})
	}
	return nil
}

// prefillTokens is how many tokens of seq the backend ran, over all steps.
func prefillTokens(f *fakeBackend, seq uint64) int {
	n := 0
	for _, r := range f.records() {
		n += r.chunks[seq]
	}
	return n
}

func run1(t *testing.T, s *Scheduler, r Request) (*Stream, []int32, Result) {
	t.Helper()
	st, err := s.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	toks, res, err := st.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st, ids(toks), res
}

// A request that shares a prefix of whole blocks with an earlier one skips
// that prefill: the backend sees only the new tokens, the output is the
// model's, and the hit shows in the result and the metrics.
func TestPrefixHitSkipsPrefill(t *testing.T) {
	be := newFake(testVocab, 4, 256)
	s := start(t, be, Config{MaxBatchedTokens: 16})
	shared := prompt(1, 40) // 10 full blocks
	_, outA, resA := run1(t, s, Request{Prompt: shared, MaxTokens: 3})
	if resA.CachedTokens != 0 {
		t.Fatalf("first request found %d cached tokens in an empty cache", resA.CachedTokens)
	}
	if !slices.Equal(outA, reference(shared, 3, testVocab)) {
		t.Fatalf("first request: %v", outA)
	}
	long := append(slices.Clone(shared), prompt(2, 7)...)
	stB, outB, resB := run1(t, s, Request{Prompt: long, MaxTokens: 5})
	if !slices.Equal(outB, reference(long, 5, testVocab)) {
		t.Fatalf("prefix hit changed the output: %v, want %v", outB, reference(long, 5, testVocab))
	}
	if resB.CachedTokens != 40 {
		t.Fatalf("cached tokens %d, want the 40 shared", resB.CachedTokens)
	}
	// 7 new prompt tokens, then 4 decode steps of one token each.
	if got := prefillTokens(be, stB.ID()); got != 7+4 {
		t.Fatalf("backend ran %d tokens of the second request, want 11 (7 new + 4 decodes)", got)
	}
	m := s.Metrics()
	if m.PrefixHitTokens != 40 || m.PrefixHitBlocks != 10 || m.PrefixMissTokens != 40+7 || m.PrefixMissBlocks != 10+1 {
		t.Fatalf("prefix metrics: hit %d tokens/%d blocks, miss %d/%d", m.PrefixHitTokens, m.PrefixHitBlocks, m.PrefixMissTokens, m.PrefixMissBlocks)
	}
	if !m.PrefixCaching || m.KVCached == 0 || m.KVUsed != 0 {
		t.Fatalf("kv metrics: %+v", m)
	}
	if err := s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
}

// The same tokens after a different prefix are not a hit, nor is a prefix
// shorter than a block; with the cache off nothing is ever a hit.
func TestPrefixChainAndOff(t *testing.T) {
	be := newFake(testVocab, 4, 256)
	s := start(t, be, Config{})
	a := append(prompt(1, 8), prompt(3, 8)...)
	run1(t, s, Request{Prompt: a, MaxTokens: 2})
	b := append(prompt(2, 8), prompt(3, 8)...) // same second half
	_, outB, resB := run1(t, s, Request{Prompt: b, MaxTokens: 2})
	if resB.CachedTokens != 0 || !slices.Equal(outB, reference(b, 2, testVocab)) {
		t.Fatalf("different prefix: cached %d, output %v", resB.CachedTokens, outB)
	}
	c := append(prompt(1, 3), 50, 51) // 3 shared tokens: less than a block
	if _, _, res := run1(t, s, Request{Prompt: c, MaxTokens: 1}); res.CachedTokens != 0 {
		t.Fatalf("a partial block was a hit: %d", res.CachedTokens)
	}

	off := newFake(testVocab, 4, 256)
	so := start(t, off, Config{NoPrefixCache: true})
	run1(t, so, Request{Prompt: a, MaxTokens: 2})
	st, out, res := run1(t, so, Request{Prompt: a, MaxTokens: 2})
	if res.CachedTokens != 0 || prefillTokens(off, st.ID()) != len(a)+1 || !slices.Equal(out, reference(a, 2, testVocab)) {
		t.Fatalf("cache off: cached %d, ran %d tokens, output %v", res.CachedTokens, prefillTokens(off, st.ID()), out)
	}
	if m := so.Metrics(); m.PrefixCaching || m.PrefixHitTokens != 0 || m.KVCached != 0 {
		t.Fatalf("cache off: metrics %+v", m)
	}
}

// A prompt whose every block is cached still runs its last token, for the
// logits: into a copy of the shared last block when the backend can copy
// blocks, else by recomputing that block in a block of its own. Either way
// the shared block is never written and the output is the model's.
func TestPrefixBoundaryCopyOnWrite(t *testing.T) {
	p := prompt(4, 16) // exactly 4 blocks
	want := reference(p, 4, testVocab)

	cf := &copyFake{fakeBackend: newFake(testVocab, 4, 64)}
	s := start(t, cf, Config{})
	run1(t, s, Request{Prompt: p, MaxTokens: 4})
	shared := s.KV().Match(p)
	st, out, res := run1(t, s, Request{Prompt: p, MaxTokens: 4})
	if !slices.Equal(out, want) || res.CachedTokens != 15 {
		t.Fatalf("with a copier: cached %d, output %v, want 15 and %v", res.CachedTokens, out, want)
	}
	if got := prefillTokens(cf.fakeBackend, st.ID()); got != 1+3 {
		t.Fatalf("with a copier the backend ran %d tokens, want 1 prompt token + 3 decodes", got)
	}
	if len(cf.copies) != 1 || cf.copies[0][0] != shared[3] || slices.Contains(shared, cf.copies[0][1]) {
		t.Fatalf("copies %v, want the last shared block %d into a private one", cf.copies, shared[3])
	}
	// A third identical request still hits every block: nothing shared
	// was overwritten.
	if _, out, res := run1(t, s, Request{Prompt: p, MaxTokens: 4}); !slices.Equal(out, want) || res.CachedTokens != 15 {
		t.Fatalf("third request: cached %d, output %v", res.CachedTokens, out)
	}

	// A failed copy falls back to recomputing the last block.
	cf.failCpy = true
	if _, out, res := run1(t, s, Request{Prompt: p, MaxTokens: 4}); !slices.Equal(out, want) || res.CachedTokens != 12 {
		t.Fatalf("failed copy: cached %d, output %v", res.CachedTokens, out)
	}

	plain := newFake(testVocab, 4, 64)
	sp := start(t, plain, Config{})
	run1(t, sp, Request{Prompt: p, MaxTokens: 4})
	st, out, res = run1(t, sp, Request{Prompt: p, MaxTokens: 4})
	if !slices.Equal(out, want) || res.CachedTokens != 12 || prefillTokens(plain, st.ID()) != 4+3 {
		t.Fatalf("without a copier: cached %d, ran %d, output %v", res.CachedTokens, prefillTokens(plain, st.ID()), out)
	}
	for _, sc := range []*Scheduler{s, sp} {
		if err := sc.KV().CheckLeaks(); err != nil {
			t.Fatal(err)
		}
	}
}

// A pool too small to keep every prompt cached evicts the least recently
// used unheld blocks to make room, and every request still completes with
// the model's output.
func TestPrefixEvictionUnderPressure(t *testing.T) {
	be := newFake(testVocab, 4, 16) // 64 positions
	s := start(t, be, Config{MaxSeqLen: 64})
	for i := range 12 {
		p := prompt(10+i, 20)
		if _, out, res := run1(t, s, Request{Prompt: p, MaxTokens: 8}); !slices.Equal(out, reference(p, 8, testVocab)) || res.Finish != FinishLength {
			t.Fatalf("request %d: %v %+v", i, out, res)
		}
	}
	m := s.Metrics()
	if m.KVEvictions == 0 {
		t.Fatalf("12 × 7 blocks through a 16-block pool evicted nothing: %+v", m)
	}
	if m.KVUsed != 0 || s.KV().Free() != 16 || m.KVCached > 16 {
		t.Fatalf("after the run: used %d free %d cached %d", m.KVUsed, s.KV().Free(), m.KVCached)
	}
	// The latest prompt is still cached; the first was evicted.
	if got := len(s.KV().Match(prompt(21, 20))); got == 0 {
		t.Fatal("the most recent prompt was evicted before older ones")
	}
	if got := len(s.KV().Match(prompt(10, 20))); got != 0 {
		t.Fatalf("the oldest prompt still has %d cached blocks after 11 newer ones", got)
	}
	if err := s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
}

// 64 concurrent clients whose prompts share prefixes of several lengths,
// some cancelled mid-stream and some preempted on a tight pool, all get the
// model's output and leave no block held.
func TestPrefixSixtyFourClientsNoLeak(t *testing.T) {
	be := newFake(testVocab, 4, 40)
	// No step runs until all 64 are queued: the pressure that makes the
	// scheduler preempt is induced, not left to how fast the clients start.
	be.gate = make(chan struct{})
	s := start(t, be, Config{MaxBatch: 16, MaxBatchedTokens: 48, MaxSeqLen: 128})
	system := prompt(7, 32)
	var wg, queued sync.WaitGroup
	queued.Add(64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := append(slices.Clone(system[:8*(1+i%4)]), prompt(100+i%8, 3+i%5)...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := s.Submit(ctx, Request{Prompt: p, MaxTokens: 12})
			queued.Done()
			if err != nil {
				t.Error(err)
				return
			}
			if i%9 == 0 {
				if _, err := st.Recv(context.Background()); err != nil {
					t.Error(err)
				}
				cancel()
				st.Collect(context.Background())
				return
			}
			toks, res, err := st.Collect(context.Background())
			if err != nil || res.Finish != FinishLength || !slices.Equal(ids(toks), reference(p, 12, testVocab)) {
				t.Errorf("client %d: %v %+v %v", i, err, res, ids(toks))
			}
		}()
	}
	queued.Wait()
	close(be.gate)
	wg.Wait()
	m := s.Metrics()
	if m.PrefixHitBlocks == 0 {
		t.Fatalf("64 clients sharing a system prompt never hit the cache: %+v", m)
	}
	if m.Preemptions == 0 {
		t.Fatalf("the pool was meant to be tight enough to preempt: %+v", m)
	}
	// Every stream has ended, and a request's blocks are let go before its
	// stream ends.
	if err := s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
	if s.KV().Used() != 0 {
		t.Fatalf("%d blocks still held", s.KV().Used())
	}
}
