package cuda

import (
	"context"
	"errors"
	"runtime"
	"sync"
)

// ErrRunnerClosed is returned by Do after Close.
var ErrRunnerClosed = errors.New("cuda runner is closed")

// Runner owns one goroutine locked to its OS thread and runs every CUDA call
// of a context there: a context is current per thread, and a call from
// another thread fails with CUDA_ERROR_INVALID_CONTEXT (seen on the H200).
type Runner struct {
	work     chan func()
	quit     chan struct{}
	done     chan struct{}
	quitOnce sync.Once
}

// NewRunner starts the runner's goroutine. Stop it with Close.
func NewRunner() *Runner {
	r := &Runner{work: make(chan func()), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(r.done)
		for {
			select {
			case f := <-r.work:
				f()
			case <-r.quit:
				return
			}
		}
	}()
	return r
}

// Do runs f on the runner's thread and returns its error.
func (r *Runner) Do(ctx context.Context, f func() error) error {
	res := make(chan error, 1)
	select {
	case r.work <- func() { res <- f() }:
	case <-r.done:
		return ErrRunnerClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-res
}

// Close stops the goroutine once the call in progress, if any, returns.
// It is idempotent.
func (r *Runner) Close() {
	r.quitOnce.Do(func() { close(r.quit) })
	<-r.done
}
