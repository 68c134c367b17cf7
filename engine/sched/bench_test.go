package sched

import (
	"context"
	"sync"
	"testing"
)

// BenchmarkSchedulerOverhead is the scheduler's own cost per generated
// token (queueing, block bookkeeping, greedy sampling over a 97-token
// vocabulary, delivery) with a backend that does almost nothing: 16
// concurrent requests of 64 tokens per iteration.
func BenchmarkSchedulerOverhead(b *testing.B) {
	be := newFake(testVocab, 16, 4096)
	s, err := New(be, Config{MaxBatch: 16, MaxBatchedTokens: 256, MaxSeqLen: 4096})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := s.Submit(ctx, Request{Prompt: prompt(i, 16), MaxTokens: 64})
				if err != nil {
					b.Error(err)
					return
				}
				if _, _, err := st.Collect(ctx); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*16*64), "ns/token")
}
