package tui

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
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
}

// dropMemos forgets every memoized pane and plot.
func (c *programContext) dropMemos() {
	clear(c.boxes)
	clear(c.charts)
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
	ctx := &programContext{theme: th, keys: newKeyMap(), header: opts.Header, runSel: -1,
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
	m.panes = [numPanes]pane{waterfallPane{}, chartsPane{}, requestsPane{}, diagnosisPane{}, lv, runsPane{}}
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

// waitEvents blocks until the subscription has an event, then gathers what
// else arrives within batchWindow into one message.
func waitEvents(sub *trace.Subscription) tea.Cmd { return waitEventsTick(sub, 0) }

// waitEventsTick is waitEvents that also stands in for the clock tick:
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
	if m.paused {
		m.pending = append(m.pending, msg.evs...)
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

func (m Model) notAvailable(what string) string {
	if m.opts.Replay != nil {
		return what + ": not available in replay"
	}
	return what + ": not available (no live target)"
}

func (m Model) onKey(msg tea.KeyMsg) (tea.Model, tea.Cmd) {
	k := m.ctx.keys
	if m.log.searching {
		switch msg.Type {
		case tea.KeyEnter:
			m.log.searching = false
			m.log.query = m.log.input
			m.log.sync(m.ctx, m.st, m.log.height)
			m.log.jump(0)
			return m, nil
		case tea.KeyEsc:
			m.log.searching = false
			return m, nil
		case tea.KeyCtrlC:
		default:
			m.log.edit(msg)
			return m, nil
		}
	}
	if m.showHelp && !key.Matches(msg, k.Quit) {
		// Any key closes the overlay; ? toggles it.
		m.showHelp = false
		return m, nil
	}
	switch {
	case key.Matches(msg, k.Quit):
		// Run stops the target (Controller.Quit) once the UI is gone.
		m.status = "quitting…"
		return m, tea.Quit
	case key.Matches(msg, k.Help):
		m.showHelp = true
	case key.Matches(msg, k.NextPane):
		m.focus = (m.focus + 1) % numPanes
	case key.Matches(msg, k.PrevPane):
		m.focus = (m.focus + numPanes - 1) % numPanes
	case key.Matches(msg, k.Pane):
		m.focus = int(msg.String()[0] - '1')
	case key.Matches(msg, k.Zoom):
		m.zoom = !m.zoom
	case key.Matches(msg, k.PrevRun):
		m.selectRun(-1)
	case key.Matches(msg, k.NextRun):
		m.selectRun(+1)
	case key.Matches(msg, k.Search):
		m.focus = paneLog
		m.log.searching = true
		m.log.input = ""
		return m, nil
	case key.Matches(msg, k.NextMatch) && m.focus == paneLog:
		m.log.jump(m.log.cur + 1)
	case key.Matches(msg, k.PrevMatch) && m.focus == paneLog:
		m.log.jump(m.log.cur - 1)
	case key.Matches(msg, k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom):
		if m.focus == paneLog {
			m.scrollLog(msg)
		}
	case key.Matches(msg, k.ColdRun):
		m.control("new cold run", func(c Controller) string { c.NewColdRun(); return "new cold run started" })
	case key.Matches(msg, k.WarmProbe):
		m.control("warm probe", func(c Controller) string { c.WarmProbe(); return "warm probe sent" })
	case key.Matches(msg, k.Evict):
		m.control("evict and restart", func(c Controller) string {
			c.EvictAndRestart()
			return "evicting the weights and restarting cold"
		})
	case key.Matches(msg, k.Save):
		m.control("save", func(c Controller) string {
			p, err := c.Save()
			if err != nil {
				return "save failed: " + err.Error()
			}
			return "saved " + p
		})
	case key.Matches(msg, k.PauseView):
		m.paused = !m.paused
		if m.paused {
			m.status = "display paused (events are kept) · p resumes"
		} else {
			m.applyEvents(m.pending)
			m.pending = nil
			m.analyzeNow(m.closed)
			m.status = ""
		}
	case key.Matches(msg, k.ReplayPause, k.Faster, k.Slower, k.Back, k.Fwd, k.BackLong, k.FwdLong):
		m.replayKey(msg)
	}
	return m, nil
}

func (m *Model) control(what string, f func(Controller) string) {
	if m.opts.Controller == nil {
		m.status = m.notAvailable(what)
		return
	}
	m.status = f(m.opts.Controller)
}

func (m *Model) selectRun(d int) {
	n := len(m.st.runs)
	if n == 0 {
		return
	}
	cur := m.ctx.runSel
	if cur < 0 || cur >= n {
		cur = n - 1
	}
	cur += d
	switch {
	case cur < 0:
		cur = 0
	case cur >= n-1:
		cur = -1 // back to following the latest run
	}
	m.ctx.runSel = cur
}

func (m *Model) scrollLog(msg tea.KeyMsg) {
	k, l := m.ctx.keys, m.log
	l.sync(m.ctx, m.st, l.height) // scroll over what is there now
	switch {
	case key.Matches(msg, k.Up):
		l.scroll(-1)
	case key.Matches(msg, k.Down):
		l.scroll(1)
	case key.Matches(msg, k.PageUp):
		l.scroll(-l.height)
	case key.Matches(msg, k.PageDown):
		l.scroll(l.height)
	case key.Matches(msg, k.Top):
		l.top()
	case key.Matches(msg, k.Bottom):
		l.bottom()
	}
}

func (m *Model) replayKey(msg tea.KeyMsg) {
	r, k := m.opts.Replay, m.ctx.keys
	if r == nil {
		m.status = "replay keys: only in replay"
		return
	}
	seek := func(d time.Duration) {
		r.Seek(r.Position() + d)
		m.status = "seek to " + fmtDur(max(r.Position()+d, 0))
	}
	switch {
	case key.Matches(msg, k.ReplayPause):
		r.SetPaused(!r.Paused())
	case key.Matches(msg, k.Faster, k.Slower):
		s := r.Speed()
		if s == 0 {
			m.status = "replay runs as fast as possible (--fast)"
			return
		}
		if key.Matches(msg, k.Faster) {
			s *= 2
		} else {
			s /= 2
		}
		r.SetSpeed(s)
		m.status = fmt.Sprintf("speed %g×", r.Speed())
	case key.Matches(msg, k.Back):
		seek(-5 * time.Second)
	case key.Matches(msg, k.Fwd):
		seek(5 * time.Second)
	case key.Matches(msg, k.BackLong):
		seek(-30 * time.Second)
	case key.Matches(msg, k.FwdLong):
		seek(30 * time.Second)
	}
}

// View renders the frame.
func (m Model) View() string {
	w, h := m.ctx.width, m.ctx.height
	if w <= 0 || h <= 0 {
		return "treni-top: starting…"
	}
	lines := m.frame(w, h)
	return strings.Join(lines, "\n")
}

// frame renders exactly h lines of width w.
func (m Model) frame(w, h int) []string {
	head := m.headerLines(w)
	foot := []string{m.footerLine(w)}
	bodyH := h - len(head) - len(foot)
	var body []string
	switch {
	case bodyH < 3:
		body = fitLines(nil, w, max(bodyH, 0))
	case m.showHelp:
		body = box(m.ctx.theme, "Keys", m.helpLines(w), w, bodyH, true)
	case w >= gridMinW && h >= gridMinH && !m.zoom:
		body = m.grid(w, bodyH)
	default:
		body = m.paneBox(m.focus, w, bodyH)
	}
	out := make([]string, 0, h)
	for _, l := range head {
		out = append(out, fit(l, w))
	}
	out = append(out, body...)
	for _, l := range foot {
		out = append(out, fit(l, w))
	}
	if len(out) > h {
		// A terminal too short for header and footer: keep the header.
		out = out[:h]
	}
	return out
}

// pane is the component in slot i: the bench pane takes the waterfall's
// slot when a bench is running or the session holds bench runs (a bench
// target has no cold start to draw).
func (m Model) pane(i int) pane {
	if i == paneWaterfall && m.benchActive() {
		return benchPane{m: &m}
	}
	return m.panes[i]
}

func (m Model) paneBox(i, w, h int) []string {
	p := m.pane(i)
	title := fmt.Sprintf("%d %s", i+1, p.title())
	if r, ok := m.st.run(m.ctx.runSel); ok && len(m.st.runs) > 1 && (i == paneWaterfall || i == paneRequests) {
		title += fmt.Sprintf(" · run %d", r.Index)
	}
	memo := false
	switch i {
	case paneRequests, paneDiagnosis, paneSession:
		memo = true
	case paneWaterfall:
		memo = !m.benchActive()
	}
	var key boxKey
	if memo {
		key = boxKey{st: m.st, version: m.st.version, runSel: m.ctx.runSel, w: w, h: h, focused: i == m.focus, title: title}
		if c, ok := m.ctx.boxes[i]; ok && c.key == key {
			return c.lines
		}
	}
	inner := p.view(m.ctx, m.st, w-2, h-2)
	lines := box(m.ctx.theme, title, inner, w, h, i == m.focus)
	if memo {
		m.ctx.boxes[i] = boxMemo{key: key, lines: lines}
	}
	return lines
}

// grid lays out every pane: waterfall and charts on top, requests and
// diagnosis in the middle, log and session at the bottom.
func (m Model) grid(w, h int) []string {
	topH := h * 40 / 100
	midH := h * 31 / 100
	botH := h - topH - midH
	leftW := w * 58 / 100
	rightW := w - leftW
	var out []string
	out = append(out, joinH(m.paneBox(paneWaterfall, leftW, topH), m.paneBox(paneCharts, rightW, topH))...)
	out = append(out, joinH(m.paneBox(paneRequests, leftW, midH), m.paneBox(paneDiagnosis, rightW, midH))...)
	out = append(out, joinH(m.paneBox(paneLog, leftW, botH), m.paneBox(paneSession, rightW, botH))...)
	return out
}

func (m Model) headerLines(w int) []string {
	t := m.ctx.theme
	hd := m.ctx.header
	r, ok := m.st.run(m.ctx.runSel)
	stateWord := targetState(r, ok, ok && m.st.probing(r.Index))
	if m.benchActive() {
		stateWord = m.benchState()
	}
	stSt := t.warn
	switch {
	case strings.HasPrefix(stateWord, "crashed"):
		stSt = t.bad
	case stateWord == "healthy":
		stSt = t.good
	case stateWord == "probing", stateWord == "benchmarking":
		stSt = t.accent
	case stateWord == "stopped", stateWord == "waiting", stateWord == "finished":
		stSt = t.dim
	}
	device := hd.Target.Device
	if device == "" && len(hd.GPUs) > 0 {
		device = hd.GPUs[0].Name
		if len(hd.GPUs) > 1 {
			device += fmt.Sprintf(" ×%d", len(hd.GPUs))
		}
	}
	if device == "" {
		device = "cpu"
	}
	model := hd.Target.Model
	if model == "" {
		model = "?"
	}
	elapsed := m.position()
	desc := hd.Target.Describe()
	if !strings.Contains(desc, model) {
		desc += t.render(t.dim, " · model ") + model
	}
	l1 := t.render(t.title, "treni-top") + " " + t.render(t.dim, "│") + " " + desc + t.render(t.dim, " on ") + device
	right := t.render(stSt, "● "+stateWord) + t.render(t.dim, "  elapsed ") + fmtDur(elapsed)
	l1 = spread(l1, right, w)

	var parts []string
	if ok {
		parts = append(parts, fmt.Sprintf("run %d/%d", r.Index+1, len(m.st.runs)))
		if r.ColdEndKind != "" && r.ColdTotal() > 0 {
			parts = append(parts, "cold "+fmtDur(r.ColdTotal()))
		}
		if q, ok := r.ColdRequest(); ok && q.FirstToken > 0 {
			parts = append(parts, "cold TTFT "+fmtDur(q.FirstToken))
		}
		if d := r.Attribution.Dominant; d != "" {
			parts = append(parts, "top stage "+string(d))
		}
	}
	if d := m.st.diag; d.Dominant != "" {
		for _, hy := range d.Hypotheses {
			if hy.Code == d.Dominant {
				parts = append(parts, t.render(t.warn, "diagnosis "+hy.Code+": "+hy.Title))
			}
		}
	}
	if rp := m.opts.Replay; rp != nil {
		play := "▶"
		if rp.Paused() {
			play = "⏸"
		}
		sp := "fast"
		if s := rp.Speed(); s > 0 {
			sp = fmt.Sprintf("%g×", s)
		}
		parts = append(parts, fmt.Sprintf("replay %s %s %s / %s", play, sp, fmtDur(m.position()), fmtDur(rp.Duration())))
	}
	if m.paused {
		parts = append(parts, t.render(t.warn, "DISPLAY PAUSED"))
	}
	l2 := strings.Join(parts, t.render(t.dim, " · "))
	if m.status != "" {
		l2 = spread(l2, t.render(t.accent, m.status), w)
	}
	return []string{l1, l2}
}

// spread puts left and right on one line of width w, right-aligned.
func spread(left, right string, w int) string {
	lw, rw := widthOf(left), widthOf(right)
	if lw+rw+2 > w {
		if rw+2 >= w {
			return left
		}
		left = fit(left, w-rw-2)
		lw = w - rw - 2
	}
	return left + strings.Repeat(" ", w-lw-rw) + right
}

func (m Model) footerLine(w int) string {
	t := m.ctx.theme
	var b strings.Builder
	for i := range m.panes {
		name := fmt.Sprintf("%d %s", i+1, m.pane(i).title())
		if w < gridMinW && i != m.focus {
			name = itoa(i + 1) // narrow: names only for the focused pane
		}
		if i == m.focus {
			if t.color {
				b.WriteString(t.render(t.borderFocus, " "+name+" "))
			} else {
				b.WriteString("[" + name + "]")
			}
		} else {
			b.WriteString(t.render(t.dim, " "+name+" "))
		}
	}
	right := m.help.ShortHelpView(m.ctx.keys.ShortHelp())
	return spread(b.String(), right, w)
}

// position is the session offset the header shows: the live clock, else
// the replay position (a --fast replay has no clock, so the last event),
// else the last event.
func (m Model) position() time.Duration {
	switch {
	case m.opts.Clock != nil:
		return m.opts.Clock()
	case m.opts.Replay != nil && m.opts.Replay.Speed() > 0:
		return m.opts.Replay.Position()
	}
	return m.st.last
}

// helpLines renders the keymap's full help: all groups side by side when
// they fit, else two groups per row.
func (m Model) helpLines(w int) []string {
	groups := m.ctx.keys.FullHelp()
	if w >= gridMinW {
		return strings.Split(m.help.FullHelpView(groups), "\n")
	}
	var out []string
	for i := 0; i < len(groups); i += 2 {
		if i > 0 {
			out = append(out, "")
		}
		out = append(out, strings.Split(m.help.FullHelpView(groups[i:min(i+2, len(groups))]), "\n")...)
	}
	return out
}
