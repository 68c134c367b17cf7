package sched

import (
	"context"
	"errors"
	"testing"
	"time"
)

// pendingExclusive waits until s has n Exclusive calls queued.
func pendingExclusive(t *testing.T, s *Scheduler, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		got := len(s.excl)
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Exclusive calls queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestExclusiveAbort: vLLM's sleep mode "abort" ends every request under
// way or queued with FinishAbort, and f runs with no block held.
func TestExclusiveAbort(t *testing.T) {
	be := newFake(testVocab, 4, 64)
	be.gate = make(chan struct{}) // the first step waits until the sleep is queued
	s := start(t, be, Config{MaxBatch: 1})
	running, err := s.Submit(context.Background(), Request{Prompt: prompt(1, 9), MaxTokens: 100000})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := s.Submit(context.Background(), Request{Prompt: prompt(2, 5), MaxTokens: 100000})
	if err != nil {
		t.Fatal(err)
	}
	// The first step is under way (held at the gate), so the abort below
	// meets one request running and one queued.
	deadline := time.Now().Add(10 * time.Second)
	for s.Metrics().Running != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first request never started running")
		}
		time.Sleep(time.Millisecond)
	}
	var sawUsed, sawQueued = -1, -1
	done := make(chan error, 1)
	go func() {
		done <- s.Exclusive(context.Background(), true, func() error {
			m := s.Metrics()
			sawUsed, sawQueued = s.KV().Used(), m.Running+m.Waiting
			s.ResetPrefixCache()
			return nil
		})
	}()
	pendingExclusive(t, s, 1)
	close(be.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if sawUsed != 0 || sawQueued != 0 {
		t.Fatalf("f ran with %d blocks used and %d requests queued or running, want none", sawUsed, sawQueued)
	}
	for name, st := range map[string]*Stream{"running": running, "queued": queued} {
		_, res, err := st.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Finish != FinishAbort || !errors.Is(res.Err, ErrAborted) {
			t.Fatalf("%s request finished %q (%v), want abort", name, res.Finish, res.Err)
		}
	}
	if err := s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
	if n := s.Metrics().Requests[FinishAbort]; n != 2 {
		t.Fatalf("%d requests counted as aborted, want 2", n)
	}
	// The scheduler serves on afterwards.
	st, err := s.Submit(context.Background(), Request{Prompt: prompt(3, 5), MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if toks, res, _ := st.Collect(context.Background()); res.Finish != FinishLength || len(toks) != 4 {
		t.Fatalf("after Exclusive: %d tokens, finish %q", len(toks), res.Finish)
	}
}

// TestExclusiveWait: vLLM's sleep mode "wait" lets every request
// submitted before it run to its end, and only then runs f.
func TestExclusiveWait(t *testing.T) {
	be := newFake(testVocab, 4, 64)
	be.gate = make(chan struct{})
	s := start(t, be, Config{MaxBatch: 1})
	var streams []*Stream
	for i := range 2 {
		st, err := s.Submit(context.Background(), Request{Prompt: prompt(i+1, 7), MaxTokens: 6})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	var finished []FinishReason
	done := make(chan error, 1)
	go func() {
		done <- s.Exclusive(context.Background(), false, func() error {
			for _, st := range streams {
				finished = append(finished, st.Result().Finish)
			}
			return errors.New("f's own error")
		})
	}()
	pendingExclusive(t, s, 1)
	close(be.gate)
	if err := <-done; err == nil || err.Error() != "f's own error" {
		t.Fatalf("Exclusive returned %v, want f's error", err)
	}
	if len(finished) != 2 || finished[0] != FinishLength || finished[1] != FinishLength {
		t.Fatalf("f saw the requests finished %v, want both ended by length first", finished)
	}
	for _, st := range streams {
		if toks, res, _ := st.Collect(context.Background()); len(toks) != 6 || res.Finish != FinishLength {
			t.Fatalf("%d tokens, finish %q; want all 6", len(toks), res.Finish)
		}
	}
}

// TestExclusiveWithdrawnAndStopped: an Exclusive call whose context ends
// before f could start is withdrawn (f never runs); once the scheduler has
// stopped, Exclusive fails with ErrStopped.
func TestExclusiveWithdrawnAndStopped(t *testing.T) {
	be := newFake(testVocab, 4, 64)
	be.gate = make(chan struct{})
	s, err := New(be, Config{MaxSeqLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(runCtx) }()
	st, err := s.Submit(context.Background(), Request{Prompt: prompt(1, 5), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := false
	done := make(chan error, 1)
	go func() { done <- s.Exclusive(ctx, false, func() error { ran = true; return nil }) }()
	pendingExclusive(t, s, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn Exclusive returned %v, want context.Canceled", err)
	}
	pendingExclusive(t, s, 0)
	close(be.gate)
	if _, res, _ := st.Collect(context.Background()); res.Finish != FinishLength {
		t.Fatalf("the request finished %q", res.Finish)
	}
	if ran {
		t.Fatal("a withdrawn Exclusive ran f")
	}
	stop()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if err := s.Exclusive(context.Background(), true, func() error { return nil }); !errors.Is(err, ErrStopped) {
		t.Fatalf("Exclusive after Run: %v, want ErrStopped", err)
	}
}
