package live

import (
	"context"
	"fmt"
	"io"

	"github.com/treni-top/treni-top/probe/load"
	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// BenchOptions are a bench's session settings: its file and how it is
// watched.
type BenchOptions struct {
	// Record is the session file (default: a new file under the user's
	// data directory); NoRecord writes none.
	Record   string
	NoRecord bool
	// TUI shows the bench live in the terminal UI; StartBench turns it off
	// without a terminal.
	TUI bool
	// Fleet are the OpenTelemetry and Prometheus outputs.
	Fleet FleetOptions
}

// BenchHeader is the header of a bench session against the server at url
// serving model.
func BenchHeader(version, url, model string, clock trace.Clock) sessions.Header {
	_, device := GPUs()
	return sessions.NewHeader(version, clock.Start(), sessions.Target{
		Kind: sessions.TargetBench, URL: url, Model: model, Device: device,
	})
}

// BenchSession is a bench's live session and the fleet outputs it feeds.
type BenchSession struct {
	*sessions.Live
	fleet *Fleet
}

// StartBench starts a bench's live session: a bus decouples the request
// goroutines from the disk, and Finish waits for the recorder before the
// file closes; OTLP export and fleet metrics of its bus as for run.
// Without a terminal o.TUI is turned off (said on stderr): `bench --tui >
// report.md` would draw the screen into the report file. Close flushes the
// fleet outputs once the session is finished.
func StartBench(ctx context.Context, o *BenchOptions, h sessions.Header, clock trace.Clock, stderr io.Writer) (*BenchSession, error) {
	if o.TUI && !Interactive() {
		fmt.Fprintln(stderr, "treni-top: --tui needs a terminal on stdin and stdout; running headless (progress on stderr, the report on stdout)")
		o.TUI = false
	}
	l, err := sessions.StartLive(h, sessions.LiveOptions{Record: o.Record, NoRecord: o.NoRecord, Label: "bench", UI: o.TUI, Clock: clock})
	if err != nil {
		return nil, err
	}
	fl, err := StartFleet(ctx, o.Fleet, h, clock, l.Bus, func() int { return 0 }, stderr)
	if err != nil {
		_, _ = l.Finish()
		return nil, err
	}
	l.OnClose(fl.StopInputs)
	return &BenchSession{Live: l, fleet: fl}, nil
}

// Close flushes the fleet outputs (bounded by the export's flush timeout,
// even when ctx is cancelled); the session must be finished first.
func (b *BenchSession) Close(ctx context.Context) { b.fleet.Finish(context.WithoutCancel(ctx)) }

// BenchResult is how a bench's session ended.
type BenchResult struct {
	// Report is the bench's report; Err the bench's error.
	Report load.Report
	Err    error
	// Cut says the bench was stopped before its end (the UI quit, or a
	// signal) rather than failing: Err is the cancellation.
	Cut bool
	// FileErr is the session file's error.
	FileErr error
}

// DriveBench runs plan with b (whose Sink is l's bus) and finishes l:
// under ui when one is given (l started with the TUI), whose quitting
// cancels the bench and which stays up after the bench until the user
// quits, so the final figures can be read; otherwise with b.Progress's
// line on progress every second (nil: none). A signal (ctx ended) marks
// the session interrupted. A UI that fails is said on stderr; the bench's
// report stands.
func DriveBench(ctx context.Context, l *sessions.Live, b *load.Bench, plan load.Plan, ui sessions.UI, progress, stderr io.Writer) BenchResult {
	stopProgress := func() {}
	benchCtx, cancelBench := context.WithCancel(ctx)
	defer cancelBench()
	var uiDone chan error
	if ui != nil {
		uiSub := l.UISub()
		uiDone = make(chan error, 1)
		go func() {
			err := ui(ctx, uiSub)
			uiSub.Cancel()
			cancelBench()
			uiDone <- err
		}()
	} else if progress != nil {
		stopProgress = load.PrintProgress(ctx, b.Progress, progress)
	}
	var res BenchResult
	res.Report, res.Err = b.Execute(benchCtx, plan)
	stopProgress()
	if ctx.Err() != nil {
		l.Interrupted(context.Cause(ctx))
	}
	_, res.FileErr = l.Finish()
	if uiDone != nil {
		if err := <-uiDone; err != nil {
			fmt.Fprintf(stderr, "treni-top: the TUI failed: %v\n", err)
		}
	}
	res.Cut = res.Err != nil && benchCtx.Err() != nil
	return res
}
