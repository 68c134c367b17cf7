package sched

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Sleep mode (docs/ARCHITECTURE.md, "Sleep and wake"): a server gives its
// memory back while its process stays up, and takes it back on a wake.
// The scheduler's part is to hand its goroutine, which owns the backend,
// to the sleep or the wake once no step is under way and no request holds
// KV blocks (Exclusive); the backend's part is Sleeper.

// Sleep levels, as vLLM names them.
const (
	// SleepLevel1 frees the KV storage and the weights' working copy and
	// keeps a copy of the weights in host memory.
	SleepLevel1 = 1
	// SleepLevel2 frees the weights altogether: a wake reads them from
	// the checkpoint's files again.
	SleepLevel2 = 2
)

// Phase is one timed part of a sleep or a wake, reported as a stage line
// by the server (trace.StageSleep, trace.StageWeightsRestore,
// trace.StageKVAlloc, trace.StageGraphCapture).
type Phase struct {
	Stage      trace.Stage
	Start, End time.Time
	Attrs      trace.Attrs
}

// Sleeper is a Backend that can give up its memory and take it back while
// the server stays up. The scheduler calls it only from Exclusive, when no
// step runs and no sequence holds KV blocks; the contents of the KV cache
// are lost by any sleep. A backend that is asleep (either part) refuses
// steps with an error.
type Sleeper interface {
	// Sleep releases the KV storage and the weights: at SleepLevel1 the
	// weights are kept in host memory, at SleepLevel2 they are dropped.
	Sleep(ctx context.Context, level int) ([]Phase, error)
	// Wake puts back the parts asked for that are asleep, the weights
	// (trace.StageWeightsRestore) before the KV storage
	// (trace.StageKVAlloc, zeroed); a backend may overlap the two. The
	// sleep ends once neither part is asleep.
	Wake(ctx context.Context, weights, kv bool) ([]Phase, error)
	// Asleep says which parts are asleep, also after a Sleep or a Wake
	// that failed part-way.
	Asleep() (weights, kv bool)
}

// FinishAbort ends a request that a sleep in abort mode interrupted.
const FinishAbort FinishReason = "abort"

// ErrAborted explains FinishAbort.
var ErrAborted = errors.New("aborted: the engine was put to sleep (POST /sleep); send the request again once it is awake")

// exclusive is one Exclusive call waiting for the scheduler's goroutine.
type exclusive struct {
	abort bool
	f     func() error
	done  chan error
}

// Exclusive runs f on the scheduler's goroutine once no step is under way
// and no request is queued or running, and returns f's error. It may be
// called before Run starts (f then runs once it has). With abort
// every request submitted before the call ends at once with FinishAbort;
// without, they run to their end first (vLLM's sleep modes "abort" and
// "wait"). Requests submitted while it waits are admitted as usual: a
// caller that wants none (a sleep) stops submitting first. The prefix
// cache is f's business (ResetPrefixCache). ctx only bounds the wait for
// f to start: once f runs, Exclusive waits for it.
func (s *Scheduler) Exclusive(ctx context.Context, abort bool, f func() error) error {
	x := &exclusive{abort: abort, f: f, done: make(chan error, 1)}
	s.mu.Lock()
	if s.state == 2 {
		s.mu.Unlock()
		return fmt.Errorf("sched: %w", ErrStopped)
	}
	s.excl = append(s.excl, x)
	s.mu.Unlock()
	s.signal()
	select {
	case err := <-x.done:
		return err
	case <-ctx.Done():
	}
	s.mu.Lock()
	for i, y := range s.excl {
		if y == x { // not started yet: withdraw it
			s.excl = append(s.excl[:i], s.excl[i+1:]...)
			s.mu.Unlock()
			return ctx.Err()
		}
	}
	s.mu.Unlock()
	return <-x.done // started: f runs to its end
}

// runExclusive serves the first pending Exclusive call, if any, on the Run
// goroutine: it aborts every request when asked, and runs f once nothing is
// queued or running. It reports whether it ran one (the loop then starts
// over).
func (s *Scheduler) runExclusive() bool {
	s.mu.Lock()
	if len(s.excl) == 0 {
		s.mu.Unlock()
		return false
	}
	x := s.excl[0]
	if x.abort {
		// Everything submitted up to now, admitted or not.
		s.mu.Unlock()
		s.intake()
		for _, sq := range s.bySeq {
			s.end(sq, FinishAbort, ErrAborted)
		}
		s.mu.Lock()
	}
	if len(s.running) > 0 || len(s.waiting) > 0 || len(s.incoming) > 0 {
		s.mu.Unlock()
		return false // "wait": the steps go on until they are done
	}
	s.excl = s.excl[1:]
	s.mu.Unlock()
	s.publish()
	x.done <- x.f()
	return true
}

// failExclusive ends every pending Exclusive call with ErrStopped once Run
// has ended.
func (s *Scheduler) failExclusive() {
	s.mu.Lock()
	xs := s.excl
	s.excl = nil
	s.mu.Unlock()
	for _, x := range xs {
		x.done <- fmt.Errorf("sched: %w", ErrStopped)
	}
}

// ResetPrefixCache forgets every cached prefix block (their KV contents
// are about to be lost, by a sleep). Call it from inside Exclusive.
func (s *Scheduler) ResetPrefixCache() int { return s.kv.ResetPrefix() }
