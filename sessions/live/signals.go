package live

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Signalled is the cause of a context's end when a signal ended it (see
// NotifySignals).
type Signalled struct{ Signal os.Signal }

func (s Signalled) Error() string { return s.Signal.String() + " signal received" }

// ExitCode is 128 + the signal's number, as shells report a process a
// signal ended (130 for ctrl-c).
func (s Signalled) ExitCode() int {
	if n, ok := s.Signal.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 130
}

// SignalOf is the signal that ended ctx, if one did.
func SignalOf(ctx context.Context) (Signalled, bool) {
	var sig Signalled
	ok := errors.As(context.Cause(ctx), &sig)
	return sig, ok
}

// NotifySignals is signal.NotifyContext that keeps which signal came, as
// the context's cause (a Signalled), for the exit status. Later signals
// are caught too, until stop: the first one already asked for a clean end.
func NotifySignals(parent context.Context, sigs ...os.Signal) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			cancel(Signalled{s})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// Interrupted is the end of a live session (run, attach, bench) that a
// signal cut short: the target is stopped and the session file is
// complete and marked interrupted. Its exit status is the signal's
// (Signalled.ExitCode).
type Interrupted struct{ Signalled }

func (e Interrupted) Error() string { return fmt.Sprintf("interrupted (%v)", e.Signalled) }

// InterruptedBy is an Interrupted when a signal ended ctx, else nil.
// serve, whose normal end is a signal, does not use it.
func InterruptedBy(ctx context.Context) error {
	if sig, ok := SignalOf(ctx); ok {
		return Interrupted{sig}
	}
	return nil
}
