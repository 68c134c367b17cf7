package cuda

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// ErrRunnerClosed is returned by Do after Close.
var ErrRunnerClosed = errors.New("cuda runner is closed")

// Runner owns one goroutine locked to its OS thread and runs every CUDA call
// of a context there: a context is current per thread, and a call from
// another thread fails with CUDA_ERROR_INVALID_CONTEXT (seen on the H200).
//
// Handing a call over and its result back wakes a parked goroutine each
// way, each a futex wake of its thread when the process is otherwise idle
// (BenchmarkRunnerDo: ~40 µs a round trip on a 2-core VM). In a decode
// loop the GPU waits through both: a batch-1 step of the 0.6B-shaped
// model is ~1 ms. A spinning runner (NewSpinningRunner, SetSpin) closes
// those gaps by polling instead: its thread for the next call, for a
// while after each call, and Do for the result, yielding to other
// goroutines between polls, before either blocks.
type Runner struct {
	work     chan func()
	quit     chan struct{}
	done     chan struct{}
	quitOnce sync.Once
	// Poll budgets in nanoseconds: the runner's thread for the next call
	// after one ends, Do for its result. Zero blocks at once.
	nextSpin, resultSpin atomic.Int64
}

// NewRunner starts the runner's goroutine, which blocks while it has no
// call. Stop it with Close.
func NewRunner() *Runner { return NewSpinningRunner(0, 0) }

// NewSpinningRunner is NewRunner with polling: after each call the
// runner's thread polls for the next one for up to nextSpin, and Do polls
// for its result for up to resultSpin, before they block. Both cost a CPU
// core while they poll.
func NewSpinningRunner(nextSpin, resultSpin time.Duration) *Runner {
	// One call may wait in the channel, so that handing it over never
	// parks the caller while the runner polls.
	r := &Runner{work: make(chan func(), 1), quit: make(chan struct{}), done: make(chan struct{})}
	r.SetSpin(nextSpin, resultSpin)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(r.done)
		for {
			f, ok := r.next()
			if !ok {
				return
			}
			f()
		}
	}()
	return r
}

// SetSpin changes the poll budgets of NewSpinningRunner for the calls
// from now on (0, 0: block at once, as NewRunner does). A backend turns
// polling on once it has loaded, so that the load's own threads keep
// every core.
func (r *Runner) SetSpin(nextSpin, resultSpin time.Duration) {
	r.nextSpin.Store(int64(nextSpin))
	r.resultSpin.Store(int64(resultSpin))
}

// next is the runner's next call, false once Close was called.
func (r *Runner) next() (func(), bool) {
	if spin := time.Duration(r.nextSpin.Load()); spin > 0 {
		deadline := time.Now().Add(spin)
		for n := 1; ; n++ {
			select {
			case <-r.quit:
				return nil, false
			case f := <-r.work:
				return f, true
			default:
			}
			// The clock every 64 polls: reading it costs more than a
			// poll. No yield: the goroutine is locked to this thread, and
			// yielding would hand the thread's P away.
			if n%64 == 0 && time.Now().After(deadline) {
				break
			}
		}
	}
	select {
	case <-r.quit:
		return nil, false
	case f := <-r.work:
		return f, true
	}
}

// Do runs f on the runner's thread and returns its error. A ctx cancelled
// before f starts returns ctx's error and f does not run.
func (r *Runner) Do(ctx context.Context, f func() error) error {
	res := make(chan error, 1)
	call := func() {
		if err := ctx.Err(); err != nil {
			res <- err
			return
		}
		res <- f()
	}
	select {
	case <-r.done:
		return ErrRunnerClosed
	case <-ctx.Done():
		return ctx.Err()
	case r.work <- call:
	}
	if spin := time.Duration(r.resultSpin.Load()); spin > 0 {
		deadline := time.Now().Add(spin)
		for n := 1; ; n++ {
			select {
			case err := <-res:
				return err
			default:
			}
			if n%64 == 0 && time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
		}
	}
	select {
	case err := <-res:
		return err
	case <-r.done:
		// Closed with the call queued: it may still have run.
		select {
		case err := <-res:
			return err
		default:
			return ErrRunnerClosed
		}
	}
}

// Close stops the goroutine once the call in progress, if any, returns; a
// call still queued does not run. It is idempotent.
func (r *Runner) Close() {
	r.quitOnce.Do(func() { close(r.quit) })
	<-r.done
}
