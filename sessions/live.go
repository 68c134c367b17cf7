package sessions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/treni-top/treni-top/trace"
)

// LiveOptions configure a live session: where it is recorded and who
// watches it.
type LiveOptions struct {
	// Record is the session file to write; empty: a new file under the
	// user's data directory named after Label (see DefaultPath).
	Record string
	// NoRecord writes no file.
	NoRecord bool
	// Label names the default file ("vllm", "attach", "bench").
	Label string
	// Progress receives the headless transcript (PrintProgress); nil
	// prints none.
	Progress io.Writer
	// UI takes a subscription for a terminal UI before any event is
	// emitted, so the UI sees the session from its first event.
	UI bool
	// KeepEvents keeps an in-memory copy of every event for the final
	// report (Finish returns it).
	KeepEvents bool
	// Clock is the session's clock, for the markers the session adds
	// itself (Interrupted); zero: offsets from the header's Created.
	Clock trace.Clock
}

// Check reports contradictory options (flag names as the CLI spells them).
func (o LiveOptions) Check() error {
	if o.Record != "" && o.NoRecord {
		return errors.New("--record and --no-record contradict each other; pick one")
	}
	return nil
}

// Live is the plumbing of a live session (run, attach, bench): the bus the
// probes emit on, the recorder that writes the file, an in-memory copy for
// the final report, and the headless printer. Every consumer subscribes
// before the first event, and Finish waits for all of them, so nothing
// emitted is lost.
type Live struct {
	// Bus is the sink the probes, the launcher and the load generator emit
	// on.
	Bus    *trace.Bus
	header Header
	clock  trace.Clock
	rec    *Recorder
	uiSub  *trace.Subscription

	mu      sync.Mutex
	events  []trace.Event
	onClose []func() // see OnClose

	wg sync.WaitGroup // recorder, collector and printer goroutines
}

// StartLive opens the bus and the recorder and starts the consumers that
// must see every event from the first one.
func StartLive(h Header, o LiveOptions) (*Live, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	l := &Live{Bus: trace.NewBus(), header: h, clock: o.Clock}
	if l.clock.Start().IsZero() {
		l.clock = trace.ClockAt(h.Created)
	}
	if !o.NoRecord {
		path := o.Record
		if path == "" {
			p, err := DefaultPath(h.Created, o.Label)
			if err != nil {
				return nil, fmt.Errorf("%w (or pass --no-record)", err)
			}
			path = p
		}
		rec, err := Create(path, h)
		if err != nil {
			return nil, fmt.Errorf("%w; pass --record FILE elsewhere, or --no-record", err)
		}
		l.rec = rec
		if o.Record == "" {
			// The sessions directory's latest.jsonl: a convenience, so a
			// failure is said but does not stop the recording.
			if err := LinkLatest(path); err != nil && o.Progress != nil {
				fmt.Fprintf(o.Progress, "treni-top: %v\n", err)
			}
		}
		l.consume(rec.Record)
	}
	if o.KeepEvents {
		l.consume(func(sub *trace.Subscription) {
			for e := range sub.Events() {
				l.mu.Lock()
				l.events = append(l.events, e)
				l.mu.Unlock()
			}
		})
	}
	if o.UI {
		l.uiSub = l.Bus.Subscribe()
	}
	if o.Progress != nil {
		w := o.Progress
		l.consume(func(sub *trace.Subscription) {
			// The transcript ends with the bus; a write error only stops
			// the transcript, never the run.
			_ = PrintProgress(context.Background(), w, sub)
			sub.Cancel()
		})
	}
	return l, nil
}

// consume subscribes f to the bus in a goroutine that Finish waits for.
func (l *Live) consume(f func(*trace.Subscription)) {
	sub := l.Bus.Subscribe()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f(sub)
	}()
}

// Header is the session's header.
func (l *Live) Header() Header { return l.header }

// UISub is the terminal UI's subscription (nil unless LiveOptions.UI).
func (l *Live) UISub() *trace.Subscription { return l.uiSub }

// Path is the session file's path, or "" when not recording.
func (l *Live) Path() string {
	if l.rec == nil {
		return ""
	}
	return l.rec.Path()
}

// Save makes what was recorded so far durable (the UI's `s` key).
func (l *Live) Save() (string, error) {
	if l.rec == nil {
		return "", errors.New("this session is not being recorded (--no-record)")
	}
	return l.rec.Path(), l.rec.Sync()
}

// Finish closes the bus, waits for every consumer, closes the file and
// returns the session as kept in memory (its events only with
// LiveOptions.KeepEvents). The error is the file's.
func (l *Live) Finish() (*Session, error) {
	l.mu.Lock()
	onClose := l.onClose
	l.onClose = nil
	l.mu.Unlock()
	for _, f := range onClose {
		f()
	}
	l.Bus.Close()
	l.wg.Wait()
	var err error
	if l.rec != nil {
		if err = l.rec.Close(); err != nil {
			err = fmt.Errorf("the session file is incomplete: %w", err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return &Session{Header: l.header, Events: l.events}, err
}

// Interrupted records that a signal ended the session early (cause says
// which): a trace.MarkerInterrupted at this instant, the last word of a
// file that is otherwise complete. Call it before Finish.
func (l *Live) Interrupted(cause error) {
	attrs := trace.Attrs{}
	if cause != nil {
		attrs["cause"] = cause.Error()
	}
	l.Bus.Emit(trace.Event{At: l.clock.Now(), Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerInterrupted, Attrs: attrs}})
}

// OnClose registers f to run in Finish before the bus closes: what
// publishes on the bus from outside the runner (an OTLP receiver) stops
// there, so nothing publishes on a closed bus.
func (l *Live) OnClose(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onClose = append(l.onClose, f)
}

// Runner is what a live session drives: probe/runner's Runner.
type Runner interface {
	// Run runs the cold sequence (and more on request) until it ends,
	// Quit is called, or ctx is done.
	Run(ctx context.Context) error
	// Quit asks Run to stop the target and return.
	Quit()
}

// UI shows the session live until the user quits; it reads sub (the
// session's UISub).
type UI func(ctx context.Context, sub *trace.Subscription) error

// Drive runs r to its end — under ui when one is given, headless
// otherwise — then finishes the session, marked Interrupted when ctx
// ended first (a signal). It returns the session kept in memory, the
// run's error (a UI failure is one) and the file's error separately, so
// the caller can report the path of a file that is fine after a run that
// failed.
func (l *Live) Drive(ctx context.Context, r Runner, ui UI) (sess *Session, runErr, fileErr error) {
	switch {
	case ui == nil:
		runErr = r.Run(ctx)
	case l.uiSub == nil:
		runErr = errors.New("a UI was given but the session was started without LiveOptions.UI")
	default:
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		uiErr := ui(ctx, l.uiSub)
		// The UI cancels its subscription when it exits; make sure, so a UI
		// that failed to start does not leave the subscription's pump
		// blocked.
		l.uiSub.Cancel()
		r.Quit()
		runErr = <-done
		cancel()
		if uiErr != nil && runErr == nil {
			runErr = fmt.Errorf("terminal UI: %w", uiErr)
		}
	}
	if ctx.Err() != nil {
		l.Interrupted(context.Cause(ctx))
	}
	sess, fileErr = l.Finish()
	return sess, runErr, fileErr
}
