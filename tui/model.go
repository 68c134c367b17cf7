package tui

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/charmbracelet/bubbles/help"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// Panes, in the order of the number keys.
const (
	paneWaterfall = iota
	paneCharts
	paneRequests
	paneDiagnosis
	paneLog
	paneSession
	numPanes
)

// Rendering and throttling constants.
const (
	// analyzeEvery bounds run re-analysis to ~10 per second however fast
	// events arrive.
	analyzeEvery = 100 * time.Millisecond
	// batchWindow is how long the event command keeps collecting after the
	// first event, so a flood costs one message (and one render) per window
	// rather than one per event.
	batchWindow = 5 * time.Millisecond
	// sampleWindow is how long samples alone are gathered before a redraw:
	// charts move once a second on an idle target, as nvitop refreshes.
	sampleWindow = time.Second
	// diagSamplesEvery is how often new samples alone refresh the
	// diagnosis (its evidence is read in the cold window, which new samples
	// rarely touch once the target is up).
	diagSamplesEvery = 5 * time.Second
	maxBatch         = 8192
	// maxPending bounds the events held while the display is paused (p):
	// past it they are applied, so a pause left on does not hold the
	// session in memory.
	maxPending = 100_000
	// tickEvery refreshes the elapsed time and replay position; it only
	// runs when there is a clock to show.
	tickEvery = time.Second
	// Grid layout from this size up; below it one pane at a time.
	gridMinW, gridMinH = 120, 36
)

// programContext is what every pane may read: sizes, theme, keys and the
// session's facts. One value per program; nothing here is global.
type programContext struct {
	width, height int
	theme         *theme
	keys          keyMap
	header        sessions.Header
	// runSel is the run the panes show; -1 follows the latest.
	runSel int
	// file is the session file (Options.File).
	file string
	// ended is set, for the frame being drawn, once no more events can
	// come to the run on screen: a live stream closed, a replay at its
	// end, or a bench (whose load has no cold start to wait for). Before
	// that, the latest run's diagnosis is provisional while its cold
	// window is open (state.provisional).
	ended bool
	// scroll is each text pane's first shown line (panes taller than
	// their box: the Diagnosis pane at 80×24); scrollMax the largest
	// offset the last frame had room for, which keys clamp to.
	scroll, scrollMax [numPanes]int
	// boxes and charts memoize rendered panes and plots, so a frame
	// redrawn for a clock tick or a batch of samples re-renders only what
	// those changed (an idle target redraws every second).
	boxes  map[int]boxMemo
	charts map[string]chartMemo
}

// boxKey is everything a memoized pane's box depends on: the panes that
// read only the analyzed state (runs, diagnosis, in-flight requests)
// change with its version.
type boxKey struct {
	st              *state
	version, runSel int
	w, h            int
	focused         bool
	title           string
	ended           bool
	scroll          int
}

type boxMemo struct {
	key   boxKey
	lines []string
}

// chartMemo is one rendered plot and what it was drawn from.
type chartMemo struct {
	w, h  int
	now   string
	data  []float64
	lines []string
}

// pane is one component of the screen. view returns at most h lines; the
// frame fits them to w×h, so a pane cannot break the layout.
type pane interface {
	title() string
	view(c *programContext, st *state, w, h int) []string
}

// keyedPane is a pane with keys of its own (the log's search and scroll):
// the root gives it the keys it does not handle itself while the pane is
// focused, and every key while the pane is capturing.
type keyedPane interface {
	pane
	// capturing reports whether the pane takes the whole keyboard (a
	// search being typed); quit still reaches the root.
	capturing() bool
	// onKey handles msg and reports whether it was the pane's.
	onKey(c *programContext, st *state, msg tea.KeyMsg) bool
}

// Messages.
type (
	eventsMsg struct {
		evs    []trace.Event
		closed bool
		// tick: no event arrived for a tick period (see waitEventsTick).
		tick bool
	}
	analyzeMsg struct{}
	tickMsg    struct{}
)

// Model is the bubbletea model of the whole program. It is a small value
// holding pointers, so bubbletea's copy-per-Update costs nothing.
type Model struct {
	ctx   *programContext
	opts  Options
	st    *state
	panes [numPanes]pane
	log   *logView
	help  help.Model

	focus                          int
	zoom, showHelp, paused, closed bool
	pending                        []trace.Event
	status                         string
	lastAnalyze                    time.Time
	analyzeQueued                  bool
	// lastTick is when the clock's work (growing open stages) last ran.
	lastTick time.Time
	// bench is the live bench's progress (nil without Options.Bench).
	bench *benchLive
	// waitStatus is the status a health_wait marker set, cleared with it
	// once the target is healthy (statusFromMarkers).
	waitStatus string
	// replayDone: the replay was at its end at the last tick.
	replayDone bool
}

func newModel(opts Options, probeBackground bool) Model {
	var out io.Writer = os.Stdout
	if opts.Output != nil {
		out = opts.Output
	}
	th := newTheme(out, opts.NoColor, opts.Light)
	if probeBackground && !opts.Light && !opts.NoColor {
		// Ask the terminal once, before the program owns it.
		if !th.r.HasDarkBackground() {
			th = newTheme(out, false, true)
		}
	}
	ctx := &programContext{theme: th, keys: newKeyMap(modeOf(opts)), header: opts.Header, runSel: -1, file: opts.File,
		boxes: map[int]boxMemo{}, charts: map[string]chartMemo{}}
	lv := newLogView()
	h := help.New()
	h.ShowAll = true
	// The help's own default styles come from lipgloss's global renderer,
	// which knows nothing of --no-color or the light theme: use ours.
	h.Styles = help.Styles{
		Ellipsis: th.dim, ShortKey: th.accent, ShortDesc: th.dim, ShortSeparator: th.dim,
		FullKey: th.accent, FullDesc: th.r.NewStyle(), FullSeparator: th.dim,
	}
	m := Model{ctx: ctx, opts: opts, st: newState(), log: lv, help: h}
	m.panes = [numPanes]pane{waterfallPane{}, chartsPane{}, requestsPane{}, diagnosisPane{}, lv, sessionPane{}}
	if opts.Bench != nil {
		m.bench = &benchLive{src: opts.Bench}
	}
	return m
}

// Init starts consuming events and, when there is a clock, the ticker.
func (m Model) Init() tea.Cmd {
	var cmds []tea.Cmd
	if m.opts.Sub != nil {
		// The clock ticks through the event command (see waitEventsTick):
		// one wakeup and one redraw a second on an idle target, not a
		// sample batch and a tick each.
		cmds = append(cmds, waitEventsTick(m.opts.Sub, m.tickPeriod()))
	} else {
		m.analyzeNow(true)
		if m.tickPeriod() > 0 {
			cmds = append(cmds, tick())
		}
	}
	if m.bench != nil {
		cmds = append(cmds, benchTick())
	}
	return tea.Batch(cmds...)
}

// tickPeriod is how often the clock (elapsed time, replay position, open
// stages) needs a redraw; 0 when there is no clock to show.
func (m Model) tickPeriod() time.Duration {
	if m.opts.Clock != nil || m.opts.Replay != nil {
		return tickEvery
	}
	return 0
}

// waitEventsTick blocks until the subscription has an event, then gathers
// what else arrives within batchWindow into one message; it also stands in
// for the clock tick:
// when no event arrives within every (> 0) it returns a tick. Any batch of
// events redraws the clock too, so a target that emits samples costs one
// message a second instead of a sample batch plus a separate tick.
func waitEventsTick(sub *trace.Subscription, every time.Duration) tea.Cmd {
	return func() tea.Msg {
		ch := sub.Events()
		var e trace.Event
		var ok bool
		if every > 0 {
			t := time.NewTimer(every)
			select {
			case e, ok = <-ch:
				t.Stop()
			case <-t.C:
				return eventsMsg{tick: true}
			}
		} else {
			e, ok = <-ch
		}
		if !ok {
			return eventsMsg{closed: true}
		}
		evs := []trace.Event{e}
		// Samples only move the charts: while nothing else arrives, gather
		// them for sampleWindow so that an idle target costs a few redraws
		// a second, not one per sampler tick. Anything else (a stage, a
		// token, a log line) is shown within batchWindow.
		onlySamples := e.Kind == trace.KindSample
		window := batchWindow
		if onlySamples {
			window = sampleWindow
		}
		timer := time.NewTimer(window)
		defer timer.Stop()
		for len(evs) < maxBatch {
			select {
			case e, ok := <-ch:
				if !ok {
					return eventsMsg{evs: evs, closed: true}
				}
				evs = append(evs, e)
				if onlySamples && e.Kind != trace.KindSample {
					onlySamples = false
					if !timer.Stop() {
						<-timer.C
					}
					timer.Reset(batchWindow)
				}
			case <-timer.C:
				return eventsMsg{evs: evs}
			}
		}
		return eventsMsg{evs: evs}
	}
}

func tick() tea.Cmd { return tea.Tick(tickEvery, func(time.Time) tea.Msg { return tickMsg{} }) }

// Update handles one message.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.ctx.width, m.ctx.height = msg.Width, msg.Height
		m.help.Width = msg.Width - 4
		return m, nil
	case eventsMsg:
		return m.onEvents(msg)
	case analyzeMsg:
		m.analyzeQueued = false
		if !m.paused {
			m.analyzeNow(false)
		}
		return m, nil
	case benchTickMsg:
		if m.closed {
			return m, nil // the bench is over: keep its final figures
		}
		if !m.paused {
			m.bench.sample()
		}
		return m, benchTick()
	case tickMsg:
		if m.closed && m.opts.Clock == nil {
			return m, nil // a finished replay has nothing left to animate
		}
		m.onTick()
		return m, tick()
	case tea.MouseMsg:
		if m.focus == paneLog {
			switch msg.Button {
			case tea.MouseButtonWheelUp:
				m.log.scroll(-3)
			case tea.MouseButtonWheelDown:
				m.log.scroll(3)
			}
		}
		return m, nil
	case tea.KeyMsg:
		return m.onKey(msg)
	}
	return m, nil
}

func (m *Model) analyzeNow(final bool) {
	now := time.Now()
	nowOff := time.Duration(-1)
	if m.opts.Clock != nil {
		nowOff = m.opts.Clock()
	}
	m.st.analyze(now, final, nowOff)
	m.lastAnalyze = now
}

// onTick grows the running stages' bars on the live clock (which also
// lets the diagnosis refresh while a stage stays open).
func (m *Model) onTick() {
	m.lastTick = time.Now()
	if m.opts.Clock != nil && !m.paused && m.st.hasOpen() {
		m.st.dirty = true
		m.analyzeNow(false)
	}
	m.replayEnd()
}

// replayDoneStatus is the status line of a replay at its end that can
// still be rewound (sessions.ReplayOptions.WaitAtEnd).
const replayDoneStatus = "replay finished · ← or shift+← rewinds · q quits"

// replayEnd notices a replay reaching its end (it stays open for a seek
// back, so the event stream does not end): the final analysis, as for a
// closed stream, and a status that says so; a seek back clears it.
func (m *Model) replayEnd() {
	rp := m.opts.Replay
	if rp == nil || m.closed {
		return
	}
	done := rp.Done()
	switch {
	case done && !m.replayDone:
		if !m.paused {
			m.analyzeNow(true)
		}
		m.status = replayDoneStatus
	case !done && m.replayDone && m.status == replayDoneStatus:
		m.status = ""
	}
	m.replayDone = done
}

// clockDue does the tick's work for a batch of events when a tick period
// has passed: a target that keeps emitting samples never lets the event
// command time out into a tick. The caller analyzes (now or queued).
func (m *Model) clockDue() {
	if time.Since(m.lastTick) < tickEvery {
		return
	}
	m.lastTick = time.Now()
	if m.opts.Clock != nil && !m.paused && m.st.hasOpen() {
		m.st.dirty = true
	}
}

func (m Model) onEvents(msg eventsMsg) (tea.Model, tea.Cmd) {
	if msg.tick {
		m.onTick()
		return m, waitEventsTick(m.opts.Sub, m.tickPeriod())
	}
	var cmds []tea.Cmd
	m.statusFromMarkers(msg.evs)
	if m.paused {
		m.pending = append(m.pending, msg.evs...)
		if len(m.pending) > maxPending {
			m.applyEvents(m.pending)
			m.pending = m.pending[:0]
			m.status = fmt.Sprintf("display paused · more than %d events arrived: they are shown to bound memory · p resumes", maxPending)
		}
	} else {
		m.applyEvents(msg.evs)
	}
	if msg.closed {
		m.closed = true
		if !m.paused {
			m.analyzeNow(true)
		}
		if m.opts.Clock != nil {
			cmds = append(cmds, tick()) // the live clock goes on
		}
		if m.bench != nil {
			m.bench.sample() // the final figures
		}
		switch {
		case m.opts.Replay != nil && replayTruncated(m.opts.Replay):
			m.status = "replay finished: the session file is TRUNCATED (not closed cleanly) · q quits"
		case m.opts.Replay != nil:
			m.status = "replay finished · q quits"
		case m.bench != nil:
			m.status = "bench finished · q quits and prints the report"
		default:
			m.status = "event stream ended"
		}
	} else {
		cmds = append(cmds, waitEventsTick(m.opts.Sub, m.tickPeriod()))
		m.clockDue()
		if !m.paused {
			if wait := analyzeEvery - time.Since(m.lastAnalyze); wait <= 0 {
				m.analyzeNow(false)
			} else if !m.analyzeQueued {
				m.analyzeQueued = true
				cmds = append(cmds, tea.Tick(wait, func(time.Time) tea.Msg { return analyzeMsg{} }))
			}
		}
	}
	return m, tea.Batch(cmds...)
}

// replayTruncated: the replay ended on a session file that was cut short
// or never closed (*sessions.Replayer says so).
func replayTruncated(r ReplayControl) bool {
	t, ok := r.(interface{ Truncated() bool })
	return ok && t.Truncated()
}

// applyEvents feeds events to the state; a replay reset (a backwards seek)
// starts the state afresh.
func (m *Model) applyEvents(evs []trace.Event) {
	for {
		reset, rest := m.st.apply(evs)
		if !reset {
			return
		}
		old := m.st
		m.st = newState()
		m.st.resets = old.resets + 1
		m.log.lines = m.log.lines[:0]
		evs = rest
	}
}
