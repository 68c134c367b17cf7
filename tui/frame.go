package tui

// The frame: header, the panes in a grid (or one zoomed), the help
// overlay and the footer. Every line is fitted to the terminal width.

import (
	"fmt"
	"strings"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace/stat"
)

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
	m.ctx.ended = m.closed || m.benchActive() || (m.opts.Replay != nil && m.replayDone)
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
	if r, ok := m.st.run(m.ctx.runSel); ok && len(m.st.runs) > 1 && (i == paneWaterfall || i == paneRequests || i == paneDiagnosis) {
		title += " · " + m.runPosition(r)
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
		key = boxKey{st: m.st, version: m.st.version, runSel: m.ctx.runSel, w: w, h: h, focused: i == m.focus, title: title, ended: m.ctx.ended, scroll: m.ctx.scroll[i]}
		if c, ok := m.ctx.boxes[i]; ok && c.key == key {
			return c.lines
		}
	}
	inner := m.scrolled(i, p.view(m.ctx, m.st, w-2, h-2), w-2, h-2)
	lines := box(m.ctx.theme, title, inner, w, h, i == m.focus)
	if memo {
		m.ctx.boxes[i] = boxMemo{key: key, lines: lines}
	}
	return lines
}

// scrollable reports whether pane i scrolls with ↑/↓ when focused and
// taller than its box (the log scrolls itself; the waterfall and the
// charts fit their drawings to the box).
func scrollable(i int) bool {
	return i == paneRequests || i == paneDiagnosis || i == paneSession
}

// scrolled is the rows of pane i's lines that its box of rows shows from
// its scroll offset: a first row saying how many lines are above, a last
// row how many below and how to reach them.
func (m Model) scrolled(i int, lines []string, w, rows int) []string {
	if !scrollable(i) || rows < 3 || len(lines) <= rows {
		m.ctx.scroll[i], m.ctx.scrollMax[i] = 0, 0
		return lines
	}
	t := m.ctx.theme
	m.ctx.scrollMax[i] = len(lines) - rows
	off := min(max(m.ctx.scroll[i], 0), m.ctx.scrollMax[i])
	m.ctx.scroll[i] = off
	out := append([]string(nil), lines[off:off+rows]...)
	if off > 0 {
		above := fmt.Sprintf("↑ %d line", off)
		if off > 1 {
			above += "s"
		}
		out[0] = t.render(t.dim, fit(above+" above", w))
	}
	if below := len(lines) - off - rows; below > 0 {
		hint := "↓/j"
		if i != m.focus {
			hint = fmt.Sprintf("%d, then ↓/j", i+1)
		}
		more := fmt.Sprintf("↓ %d more line", below)
		if below > 1 {
			more += "s"
		}
		out[rows-1] = t.render(t.dim, fit(more+" ("+hint+")", w))
	}
	return out
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
	desc := hd.Target.Describe()
	if !strings.Contains(desc, model) {
		desc += t.render(t.dim, " · model ") + model
	}
	l1 := t.render(t.title, "treni-top") + " " + t.render(t.dim, "│") + " " + desc + t.render(t.dim, " on ") + device
	// The right side is kept whole (spread cuts the left): the state, and
	// the clock — for a replay its play/pause state, speed and position,
	// so that space and +/- show at any width.
	right := t.render(stSt, "● "+stateWord) + t.render(t.dim, "  elapsed ") + stat.FormatDuration(m.position())
	if rp := m.opts.Replay; rp != nil {
		play := "▶"
		if rp.Paused() {
			play = "⏸ paused"
		}
		sp := "fast"
		if s := rp.Speed(); s > 0 {
			sp = fmt.Sprintf("%g×", s)
		}
		right = t.render(stSt, "● "+stateWord) + "  " + t.render(t.accent, "replay "+play+" "+sp) + " " +
			stat.FormatDuration(m.position()) + t.render(t.dim, " / ") + stat.FormatDuration(rp.Duration())
	}
	l1 = spread(l1, right, w)

	var parts []string
	if ok {
		parts = append(parts, m.runPosition(r))
		if r.ColdEndKind != "" && r.ColdTotal() > 0 {
			parts = append(parts, "cold "+stat.FormatDuration(r.ColdTotal()))
		}
		if q, ok := r.ColdRequest(); ok && q.FirstToken > 0 {
			parts = append(parts, "cold TTFT "+stat.FormatDuration(q.FirstToken))
		}
		if d := r.Attribution.Dominant; d != "" {
			parts = append(parts, "top stage "+string(d))
		}
	}
	if d := m.st.diagnosis(m.ctx.runSel); ok && d.Dominant != "" {
		for _, hy := range d.Hypotheses {
			switch {
			case hy.Code != d.Dominant:
			case m.st.provisional(r, m.ctx.ended):
				parts = append(parts, t.render(t.dim, "leading so far "+hy.Code+": "+hy.Title))
			default:
				parts = append(parts, t.render(t.warn, "diagnosis "+hy.Code+": "+hy.Title))
			}
		}
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

// runPosition is how the header and the panes name run r, 1-based (the
// session file's run field counts from 0): "wake 2/5 (level 1)" for a wake
// of a sleeping target (run --sleep-cycles 5), "cold run 3/5" in a series
// of cold runs (run --cold-runs 5; runs added with the r key count on past
// it), else "run 1/2" of the runs seen.
func (m Model) runPosition(r sessions.Run) string {
	if r.Wake != nil {
		return r.Wake.String() // "wake 2/5 (level 1)"
	}
	n := len(m.st.runs)
	if k := m.ctx.header.ColdRuns; k > 1 {
		if last := m.st.runs[n-1].Index + 1; last > k {
			k = last
		}
		return fmt.Sprintf("cold run %d/%d", r.Index+1, k)
	}
	return fmt.Sprintf("run %d/%d", r.Index+1, n)
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

// footerLine is the tab bar and the mode's keys. Names shorten, then
// only the focused pane keeps its name, and keys drop from the front
// (tab first), until the line fits: every pane stays reachable by its
// number and "? help" stays.
func (m Model) footerLine(w int) string {
	keys := m.ctx.keys.ShortHelp()
	h := m.help
	h.Width = 0 // the footer fits the line itself
	for _, names := range []int{tabFull, tabShort, tabFocused} {
		tabs := m.tabBar(names)
		for drop := 0; drop < len(keys)-1; drop++ {
			right := h.ShortHelpView(keys[drop:])
			if widthOf(tabs)+2+widthOf(right) <= w {
				return spread(tabs, right, w)
			}
		}
	}
	return spread(m.tabBar(tabFocused), h.ShortHelpView(keys[len(keys)-2:]), w)
}

// Tab bar styles, widest first.
const (
	tabFull    = iota // "1 Cold start"
	tabShort          // "1 Cold"
	tabFocused        // the focused pane's name, numbers for the others
)

func (m Model) tabBar(names int) string {
	t := m.ctx.theme
	var b strings.Builder
	for i := range m.panes {
		title := m.pane(i).title()
		switch {
		case names == tabShort || names == tabFocused && i == m.focus:
			title = shortTitle(title)
		case names == tabFocused:
			title = ""
		}
		name := strings.TrimSpace(itoa(i+1) + " " + title)
		// One space between names; the focused one is set off by its
		// color and a space each side, or by brackets.
		if i > 0 {
			b.WriteByte(' ')
		}
		switch {
		case i == m.focus && t.color:
			b.WriteString(t.render(t.borderFocus, " "+name+" "))
		case i == m.focus:
			b.WriteString("[" + name + "]")
		default:
			b.WriteString(t.render(t.dim, name))
		}
	}
	return b.String()
}

// shortTitle is a pane's name for a narrow tab bar.
func shortTitle(title string) string {
	switch title {
	case "Cold start":
		return "Cold"
	case "Requests":
		return "Reqs"
	case "Diagnosis":
		return "Diag"
	case "Session":
		return "Sess"
	}
	return title
}

// position is the session offset the header shows: the live clock, else
// the replay position (a --fast replay has no clock, so the last event),
// which stops at the session's end, else the last event.
func (m Model) position() time.Duration {
	switch {
	case m.opts.Clock != nil:
		return m.opts.Clock()
	case m.opts.Replay != nil && m.opts.Replay.Speed() > 0:
		return min(m.opts.Replay.Position(), m.opts.Replay.Duration())
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
