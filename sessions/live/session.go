// Package live starts and drives the live sessions of run, attach and
// bench. For run and attach it resolves the target (the built-in engine, a
// command, or a running server), builds the session header, starts
// sessions.Live with the request prober, and builds the runner of the
// cold sequence (probe/runner) on the session's bus; for bench it starts
// the session and drives the load generator (probe/load) on it, beside
// the TUI or a progress line. It composes sessions, probe and
// engine/launch for cmd/treni-top; nothing below cmd imports it.
package live

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/mattn/go-isatty"

	"github.com/treni-top/treni-top/probe/prober"
	"github.com/treni-top/treni-top/probe/runner"
	"github.com/treni-top/treni-top/sessions"
)

// Session is a live session with what feeds it from outside the runner
// (the request prober, the samplers, the OTLP receiver) and the fleet
// outputs it feeds.
type Session struct {
	*sessions.Live
	prober   *runner.HTTPProber
	fleet    *Fleet
	opts     *Options
	plan     *Plan
	samplers *runner.Samplers
	runner   atomic.Pointer[runner.Runner]
}

// Interactive reports whether the TUI can run: a terminal on both ends.
func Interactive() bool {
	return isatty.IsTerminal(os.Stdout.Fd()) && isatty.IsTerminal(os.Stdin.Fd())
}

// Start resolves headless (no terminal means headless, said on stderr)
// and starts the live session of p: recorded unless o.NoRecord, the
// headless transcript on stderr, the fleet outputs o.Fleet or the OTEL_
// variables ask for, and the prober (carrying a traceparent when traces
// are exported or received). Close releases what it holds once the
// session is finished.
func Start(ctx context.Context, o *Options, p *Plan, stderr io.Writer) (*Session, error) {
	if !o.Headless && !Interactive() {
		fmt.Fprintln(stderr, "treni-top: no terminal: running headless")
		o.Headless = true
	}
	lo := sessions.LiveOptions{Record: o.Record, NoRecord: o.NoRecord, Label: p.Label, UI: !o.Headless, KeepEvents: true, Clock: p.Clock}
	if o.Headless {
		lo.Progress = stderr
	}
	l, err := sessions.StartLive(p.Header, lo)
	if err != nil {
		return nil, err
	}
	s := &Session{Live: l, opts: o, plan: p}
	fl, err := StartFleet(ctx, o.Fleet, p.Header, p.Clock, l.Bus, s.RunIndex, stderr)
	if err != nil {
		_, _ = l.Finish()
		return nil, err
	}
	s.fleet = fl
	l.OnClose(fl.StopInputs)
	s.samplers = runner.NewSamplers(p.weightFiles)
	s.prober = &runner.HTTPProber{Sink: l.Bus, Clock: p.Clock, Prompt: o.Prompt, MaxTokens: o.MaxTokens, Model: o.RequestModel,
		Header: prober.BearerHeader(APIKey(o.APIKey)), TraceContext: fl.TraceContext()}
	return s, nil
}

// RunIndex is the runner's current run (0 before it starts), for spans
// received from the server.
func (s *Session) RunIndex() int {
	if r := s.runner.Load(); r != nil {
		return r.RunIndex()
	}
	return 0
}

// StartRunner builds the runner of the plan's cold sequence on the
// session's bus and starts the samplers' own events; Run drives it. On
// an error the session is finished.
func (s *Session) StartRunner() (*runner.Runner, error) {
	p, o := s.plan, s.opts
	cfg := p.config
	cfg.Sink, cfg.Clock = s.Bus, p.Clock
	cfg.Launcher = runner.LaunchFunc(func(ctx context.Context, run int) (runner.Target, error) {
		return p.launcher(ctx, s.Bus, p.Clock, run)
	})
	cfg.Prober = s.prober
	cfg.Samplers = s.samplers.Build
	cfg.ServerMetrics = true
	cfg.Header = s.prober.Header
	cfg.Warmup, cfg.Repeat = o.Warmup, o.Repeat
	cfg.HealthTimeout, cfg.Grace = o.Timeout, o.Grace
	cfg.ExitAfterSequence = o.Headless && !o.KeepRunning
	cfg.Save = s.Save
	r, err := runner.New(cfg)
	if err != nil {
		_, _ = s.Finish()
		return nil, err
	}
	s.runner.Store(r)
	s.samplers.Emit(s.Bus, p.Clock)
	return r, nil
}

// Close stops the samplers, releases the prober's connections and
// flushes the fleet outputs (bounded by the export's flush timeout, even
// when ctx is cancelled); the session (its bus) must be finished first.
func (s *Session) Close(ctx context.Context) {
	_ = s.samplers.Close()
	s.prober.Close()
	s.fleet.Finish(context.WithoutCancel(ctx))
}

// The live runner drives a live session.
var _ sessions.Runner = (*runner.Runner)(nil)

// Run drives the session's runner to its end, under ui when one is given
// (headless otherwise), finishes the session, and then, headless, writes
// the report on stdout (Markdown, or JSON with Options.JSON); the
// session's path goes on stderr. Its error is, in this order: the file's,
// an Interrupted when a signal ended ctx (the session is marked
// interrupted), the run's, or the failure the session records (a target
// that crashed while the TUI was up: the runner goes on serving keys, so
// its Run returned nil).
func (s *Session) Run(ctx context.Context, ui sessions.UI, stdout, stderr io.Writer) error {
	sess, runErr, fileErr := s.Drive(ctx, s.runner.Load(), ui)
	if s.opts.Headless {
		rep := sessions.BuildReport(sess)
		if s.opts.JSON {
			b, err := rep.JSON()
			if err != nil {
				return fmt.Errorf("render the report as JSON: %w", err)
			}
			fmt.Fprintln(stdout, string(b))
		} else {
			fmt.Fprintln(stdout, rep.Markdown())
		}
	}
	if p := s.Path(); p != "" {
		fmt.Fprintf(stderr, "session recorded: %s\n", p)
	}
	if fileErr != nil {
		return fileErr
	}
	if err := InterruptedBy(ctx); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	return sessions.Failure(sess.Events)
}
