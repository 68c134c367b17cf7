// Package tui is treni-top's interactive terminal UI: a bubbletea program
// over the event stream that shows the target's cold-start waterfall, live
// charts, the request table, the diagnosis and the target's log. It reads
// only trace events (from a *trace.Subscription), so a live run and a replay
// look the same; the live runner and the replayer plug in their controls
// through the small Controller and ReplayControl interfaces.
package tui

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// Controller is implemented by the live runner. Every method is called from
// the UI goroutine and must return quickly (start the work, don't wait for
// it). A nil Controller (replay) makes the keys that need it say
// "not available in replay".
type Controller interface {
	// NewColdRun restarts the target cold; its events go to run+1 (key r).
	NewColdRun()
	// WarmProbe sends one warm request (key w).
	WarmProbe()
	// EvictAndRestart evicts the weights from the page cache and restarts
	// the target cold (key e).
	EvictAndRestart()
	// Save puts the session on stable storage and returns its path (key s).
	Save() (string, error)
	// Quit stops the target cleanly. Run calls it exactly once, after the
	// UI has exited for any reason (q, ctrl-c, a signal, ctx), so it may
	// block until the target is down without freezing a drawn screen.
	Quit()
}

// SleepWaker is a Controller that can put its target to sleep and wake it
// (key Z; sleep mode: the built-in engine, vLLM --enable-sleep-mode); the
// wake is a run of its own.
type SleepWaker interface {
	SleepWake()
}

// ReplayControl steers a replay; *sessions.Replayer satisfies it.
type ReplayControl interface {
	// SetPaused pauses or resumes playback (space).
	SetPaused(bool)
	// Paused reports whether playback is paused.
	Paused() bool
	// SetSpeed sets the playback rate (+ doubles, - halves).
	SetSpeed(float64)
	// Speed is the playback rate; 0 means as fast as possible (--fast).
	Speed() float64
	// Seek jumps to a session offset (left/right); a backwards seek
	// replays from the start after a trace.MarkerReplayReset.
	Seek(time.Duration)
	// Position is the replay's current session offset.
	Position() time.Duration
	// Duration is the offset of the session's last event.
	Duration() time.Duration
	// Done reports whether every event has been emitted (the replay is at
	// its end and, with sessions.ReplayOptions.WaitAtEnd, waits for a seek
	// back).
	Done() bool
}

// Options configure the program.
type Options struct {
	// Header describes the session: target, model, device, GPUs.
	Header sessions.Header
	// Sub is the event stream the UI consumes; the UI cancels it when it
	// exits. Nil shows an empty session.
	Sub *trace.Subscription
	// Controller is the live runner's control surface (nil in replay).
	Controller Controller
	// Replay is the replayer's control surface (nil when live).
	Replay ReplayControl
	// NoColor turns colors off (the NO_COLOR environment variable does too).
	NoColor bool
	// Light selects the light-background theme; when false the terminal is
	// asked (lipgloss.HasDarkBackground) by Run.
	Light bool
	// Mouse turns mouse reporting on (off by default so text can be
	// selected).
	Mouse bool
	// Clock returns the session offset now, for the elapsed time and the
	// live growth of open stages; nil uses the last event's offset (or the
	// replay position).
	Clock func() time.Duration
	// Bench is a live bench's progress (treni-top bench --tui): the first
	// pane becomes the bench pane and reads it once a second. Sessions whose
	// events hold bench runs show that pane without it.
	Bench BenchProgress
	// File is the session file: the one being recorded (run, attach,
	// bench) or replayed; empty when the live session is not recorded.
	// The Session pane shows it.
	File string
	// Input and Output default to the terminal (tests set them).
	Input  io.Reader
	Output io.Writer
}

// noColorEnv reports whether the NO_COLOR convention asks for no color
// (https://no-color.org: set and non-empty).
func noColorEnv() bool { return os.Getenv("NO_COLOR") != "" }

// Run runs the bubbletea program until the user quits or ctx is done. On
// quit it calls Controller.Quit (when set) and cancels the subscription.
func Run(ctx context.Context, opts Options) error {
	if opts.NoColor || noColorEnv() {
		opts.NoColor = true
	}
	m := newModel(opts, true)
	popts := []tea.ProgramOption{tea.WithAltScreen(), tea.WithContext(ctx), tea.WithFPS(renderFPS)}
	if opts.Mouse {
		popts = append(popts, tea.WithMouseCellMotion())
	}
	if opts.Input != nil {
		popts = append(popts, tea.WithInput(opts.Input))
	}
	if opts.Output != nil {
		popts = append(popts, tea.WithOutput(opts.Output))
	}
	p := tea.NewProgram(m, popts...)
	_, err := p.Run()
	if opts.Sub != nil {
		opts.Sub.Cancel()
	}
	if opts.Controller != nil {
		opts.Controller.Quit()
	}
	switch {
	case errors.Is(err, tea.ErrInterrupted):
		return nil // SIGINT: a normal way to end, the target is stopped
	case errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil:
		return nil // the caller cancelled
	}
	return err
}

// renderFPS caps redraws. Events are already batched and analysis is
// throttled to 10/s, so more frames than that would show nothing new;
// each frame slot is a wakeup of the renderer, which an idle UI pays for
// (bubbletea's default is 60).
const renderFPS = 10
