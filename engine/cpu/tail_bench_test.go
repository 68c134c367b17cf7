package cpu

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/treni-top/treni-top/engine/sched"
)

// handoffPool is the worker pool as it was before the claim-based pool
// (kept here only as the benchmark's baseline): run hands the task to each
// worker over an unbuffered channel and waits on a WaitGroup for every
// worker it woke, whether or not that worker found an item to do.
type handoffPool struct {
	n     int
	start []chan task
	wg    sync.WaitGroup
	exit  sync.WaitGroup
	items int
	next  atomic.Int64
}

func newHandoffPool(n int) *handoffPool {
	p := &handoffPool{n: n, start: make([]chan task, n)}
	for w := 1; w < n; w++ {
		ch := make(chan task)
		p.start[w] = ch
		p.exit.Add(1)
		go func(w int) {
			defer p.exit.Done()
			for t := range ch {
				p.loop(t, w)
				p.wg.Done()
			}
		}(w)
	}
	return p
}

func (p *handoffPool) loop(t task, w int) {
	for {
		i := int(p.next.Add(1) - 1)
		if i >= p.items {
			return
		}
		t.runItem(w, i)
	}
}

func (p *handoffPool) run(t task, items int) {
	if items <= 0 {
		return
	}
	p.items = items
	p.next.Store(0)
	helpers := min(p.n-1, items-1)
	p.wg.Add(helpers)
	for w := 1; w <= helpers; w++ {
		p.start[w] <- t
	}
	p.loop(t, 0)
	p.wg.Wait()
}

func (p *handoffPool) close() {
	for w := 1; w < p.n; w++ {
		close(p.start[w])
	}
	p.exit.Wait()
}

// BenchmarkDecodeBatch1Tail is the batch-1 decode step latency of the demo
// shape (what one ITL costs the backend) with the hand-off pool, the
// claim-based pool and no helper at all (one thread), alternating step by
// step on one backend so that all three see the same host load. It reports
// min, median, p99 and max per pool; run it with a fixed count, e.g.
// -benchtime=400x (steps per pool).
func BenchmarkDecodeBatch1Tail(b *testing.B) {
	const ctxLen = 128
	be := newBenchBackend(b, 0) // demo
	perSeq := 256 / benchBlockSize
	blocks := make([]int32, perSeq)
	for k := range blocks {
		blocks[k] = int32(k)
	}
	bt := sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: []int32{7}, Pos: ctxLen, Blocks: blocks, WantLogits: true}}}
	logits := [][]float32{make([]float32, be.VocabSize())}
	for k := range be.kv.f[:perSeq*be.blockStride] {
		be.kv.f[k] = float32(k%7) * 0.01
	}
	claim := be.pool
	handoff := newHandoffPool(be.opts.Threads)
	defer handoff.close()
	pools := []struct {
		name string
		r    runner
		ms   []float64
	}{{"handoff", handoff, nil}, {"claim", claim, nil}, {"single", newPool(1), nil}}
	ctx := context.Background()
	for i := range pools {
		be.pool = pools[i].r
		if err := be.Forward(ctx, &bt, logits); err != nil { // warm-up
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		for i := range pools {
			be.pool = pools[i].r
			t0 := time.Now()
			if err := be.Forward(ctx, &bt, logits); err != nil {
				b.Fatal(err)
			}
			pools[i].ms = append(pools[i].ms, float64(time.Since(t0).Microseconds())/1e3)
		}
	}
	be.pool = claim
	for _, p := range pools {
		s := slices.Clone(p.ms)
		slices.Sort(s)
		b.ReportMetric(s[0], p.name+"-min-ms")
		b.ReportMetric(s[len(s)/2], p.name+"-p50-ms")
		b.ReportMetric(s[min(len(s)-1, len(s)*99/100)], p.name+"-p99-ms")
		b.ReportMetric(s[len(s)-1], p.name+"-max-ms")
	}
}

// BenchmarkPrefixHitTTFT is the time to first token of a request whose
// 512-token prefix another request already computed, followed by 16 tokens
// of its own, on the demo shape: with the prefix cache (16 tokens to
// prefill) and without (528). Run it with a small fixed count, e.g.
// -benchtime=5x.
func BenchmarkPrefixHitTTFT(b *testing.B) {
	for _, mode := range []struct {
		name string
		off  bool
	}{{"cache", false}, {"nocache", true}} {
		b.Run(mode.name, func(b *testing.B) {
			be := newBenchBackend(b, 0)
			s, err := sched.New(be, sched.Config{MaxBatchedTokens: 256, MaxSeqLen: 2048, NoPrefixCache: mode.off})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			defer func() { cancel(); <-done }()
			prefix := make([]int32, 512)
			for i := range prefix {
				prefix[i] = int32((i * 131) % be.VocabSize())
			}
			ttft := func(p []int32) float64 {
				st, err := s.Submit(context.Background(), sched.Request{Prompt: p, MaxTokens: 1})
				if err != nil {
					b.Fatal(err)
				}
				_, res, err := st.Collect(context.Background())
				if err != nil || res.FirstToken.IsZero() {
					b.Fatalf("%v %+v", err, res)
				}
				return float64(res.FirstToken.Sub(res.Submitted).Microseconds()) / 1e3
			}
			ttft(prefix) // computes (and, with the cache, keeps) the prefix
			var ms []float64
			n := 0
			for b.Loop() {
				p := slices.Clone(prefix)
				for j := range 16 {
					p = append(p, int32((n*16+j)%be.VocabSize()))
				}
				n++
				ms = append(ms, ttft(p))
			}
			slices.Sort(ms)
			b.ReportMetric(ms[0], "ttft-min-ms")
			b.ReportMetric(ms[len(ms)/2], "ttft-p50-ms")
			b.ReportMetric(ms[len(ms)-1], "ttft-max-ms")
		})
	}
}
