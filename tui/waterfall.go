package tui

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// waterfallPane draws the selected run's cold start: one bar per stage on a
// shared time axis, so overlapping stages (CUDA init beside the weight read)
// show as overlapping bars, plus a row for the unattributed gaps.
type waterfallPane struct{}

func (waterfallPane) title() string { return "Cold start" }

const wfNameW = 23 // "▶ " + the longest stage name (decoder_tensor_upload)

// The duration and share columns' widths.
const wfDurW, wfShareW = 9, 4

func (waterfallPane) view(c *programContext, st *state, w, h int) []string {
	t := c.theme
	r, ok := st.run(c.runSel)
	if !ok || len(r.Spans) == 0 && r.ColdTotal() == 0 {
		return []string{t.render(t.dim, "no stages yet — waiting for the target to start")}
	}
	a := r.Attribution
	// Columns: name, bar, duration, share; no bars (bw 0) below 10
	// columns for them.
	bw := w - wfNameW - 1 - 1 - wfDurW - 1 - wfShareW
	if bw < 10 {
		bw = 0
	}
	var axisLines []string
	if bw > 0 {
		lab, ax := axis(a.Window, bw)
		pre := strings.Repeat(" ", wfNameW+1)
		axisLines = []string{pre + t.render(t.axis, lab), pre + t.render(t.axis, ax)}
	}
	return fitWaterfall(t, h, waterfallLines{
		head: t.render(t.title, waterfallHead(r, w)),
		dom:  dominantLine(t, a),
		axis: axisLines,
		rows: stageRows(t, r, bw),
		gap:  gapRow(t, a, bw),
		path: criticalPath(t, a),
	})
}

// waterfallHead is the headline: the cold total and where it ends, the
// unattributed time, and (from 100 columns) the attributed time.
func waterfallHead(r sessions.Run, w int) string {
	a := r.Attribution
	end := map[string]string{
		sessions.ColdEndFirstToken: "start → cold first token",
		sessions.ColdEndHealthy:    "start → healthy",
		sessions.ColdEndLastStage:  "start → last stage so far",
	}[r.ColdEndKind]
	head := fmt.Sprintf("cold %s (%s) · unattributed %s (%s)",
		stat.FormatDuration(a.Total), end, stat.FormatDuration(a.Unattributed), pct(a.UnattributedShare()))
	if w >= 100 {
		head += " · attributed " + stat.FormatDuration(a.Attributed)
	}
	return head
}

// dominantLine names the attribution's top stage (most time no other
// stage covers); "" when there is none. The diagnosis pane weighs the
// evidence and may name a different cold term.
func dominantLine(t *theme, a trace.Attribution) string {
	if a.Dominant == "" {
		return ""
	}
	dom := "top stage: " + string(a.Dominant)
	if s, ok := a.Stage(a.Dominant); ok {
		dom += fmt.Sprintf(" — %s exclusive; %s, %s of the cold total", stat.FormatDuration(s.Exclusive), stat.FormatDuration(s.Duration), pct(s.Share))
	} else if a.Dominant == trace.StageUnattributed {
		dom += " — gaps no stage covers; the server does not log that part"
	}
	return t.render(t.barDominant, dom)
}

// stageRows are one row per stage: its name (marked when dominant), its
// bar bw columns wide (none when 0), its duration (… while open) and its
// share.
func stageRows(t *theme, r sessions.Run, bw int) []string {
	a := r.Attribution
	open := map[trace.Stage]bool{}
	for _, sp := range r.Spans {
		if sp.Open {
			open[sp.Name] = true
		}
	}
	var rows []string
	for _, s := range a.Stages {
		dom := s.Name == a.Dominant
		mark, nameSt, barSt := "  ", t.dim, t.bar
		if dom {
			mark, nameSt, barSt = "▶ ", t.barDominant, t.barDominant
		}
		if open[s.Name] {
			barSt = t.barOpen
		}
		name := padRight(mark+string(s.Name), wfNameW)
		dur := stat.FormatDuration(s.Duration)
		if open[s.Name] {
			dur += "…"
		}
		line := t.render(nameSt, name) + " "
		if bw > 0 {
			line += t.render(barSt, stageBar(r.Spans, s.Name, a.Window, bw, open[s.Name])) + " "
		}
		rows = append(rows, line+padLeft(dur, wfDurW)+" "+padLeft(pct(s.Share), wfShareW))
	}
	return rows
}

// gapRow is the unattributed time's row, its gaps drawn as a bar.
func gapRow(t *theme, a trace.Attribution, bw int) string {
	gap := t.render(t.gap, padRight("  "+string(trace.StageUnattributed), wfNameW)) + " "
	if bw > 0 {
		gap += t.render(t.gap, gapBar(a.Gaps, a.Window, bw)) + " "
	}
	return gap + padLeft(stat.FormatDuration(a.Unattributed), wfDurW) + " " + padLeft(pct(a.UnattributedShare()), wfShareW)
}

// criticalPath names the stages of the critical path in order; "" when
// there is none.
func criticalPath(t *theme, a trace.Attribution) string {
	if len(a.CriticalPath) == 0 {
		return ""
	}
	var names []string
	for _, p := range a.CriticalPath {
		if n := len(names); n == 0 || names[n-1] != string(p.Name) {
			names = append(names, string(p.Name))
		}
	}
	return t.render(t.dim, "critical path: "+strings.Join(names, " → "))
}

// waterfallLines are the pane's parts, rendered.
type waterfallLines struct {
	head, dom  string
	axis, rows []string
	gap, path  string
}

// fitWaterfall fits the parts into h lines. What must fit: the headline,
// the stage rows and the unattributed row; then, as room allows, the
// axis, the dominant line (the header also names it) and the critical
// path.
func fitWaterfall(t *theme, h int, p waterfallLines) []string {
	room := h - 2
	if len(p.axis) > 0 && room-len(p.rows) >= 2 {
		room -= 2
	} else {
		p.axis = nil
	}
	if p.dom != "" && room-len(p.rows) >= 1 {
		room--
	} else {
		p.dom = ""
	}
	rows := p.rows
	if len(rows) > room {
		keep := max(room-1, 0)
		more := t.render(t.dim, fmt.Sprintf("  … %d more stages (z zooms)", len(rows)-keep))
		rows = append(rows[:keep:keep], more)
	}
	lines := make([]string, 0, h)
	lines = append(lines, p.head)
	if p.dom != "" {
		lines = append(lines, p.dom)
	}
	lines = append(lines, p.axis...)
	lines = append(lines, rows...)
	lines = append(lines, p.gap)
	if p.path != "" && len(lines) < h {
		lines = append(lines, p.path)
	}
	return lines
}

// col maps an offset to a bar column in [0, bw].
func col(at time.Duration, win trace.Interval, bw int) float64 {
	tot := win.Duration()
	if tot <= 0 {
		return 0
	}
	return float64(at-win.Start) / float64(tot) * float64(bw)
}

// paint marks the cells an interval covers; any interval gets at least
// one cell so a 2 ms stage is still visible on a 20 s axis.
func paint(cells []bool, iv trace.Interval, win trace.Interval) {
	bw := len(cells)
	iv = iv.Clip(win)
	a := int(math.Floor(col(iv.Start, win, bw)))
	b := int(math.Ceil(col(iv.End, win, bw)))
	if b <= a {
		b = a + 1
	}
	for i := max(a, 0); i < b && i < bw; i++ {
		cells[i] = true
	}
}

func stageBar(spans []trace.Span, name trace.Stage, win trace.Interval, bw int, open bool) string {
	cells := make([]bool, bw)
	last := -1
	for _, sp := range spans {
		if sp.Name == name {
			paint(cells, sp.Interval(), win)
		}
	}
	for i, c := range cells {
		if c {
			last = i
		}
	}
	var b strings.Builder
	for i, c := range cells {
		switch {
		case c && open && i == last:
			b.WriteString("▶") // still running: the bar grows from here
		case c:
			b.WriteString("█")
		default:
			b.WriteString("·")
		}
	}
	return b.String()
}

func gapBar(gaps []trace.Interval, win trace.Interval, bw int) string {
	cells := make([]bool, bw)
	for _, g := range gaps {
		paint(cells, g, win)
	}
	var b strings.Builder
	for _, c := range cells {
		if c {
			b.WriteString("░")
		} else {
			b.WriteString(" ")
		}
	}
	return b.String()
}

// axis returns a label line and a tick line for the window over bw cells,
// with ticks at a 1-2-5 step that leaves room for the labels.
func axis(win trace.Interval, bw int) (string, string) {
	tot := win.Duration()
	if tot <= 0 || bw < 10 {
		return "", strings.Repeat("─", max(bw, 0))
	}
	maxTicks := max(bw/9, 1)
	raw := float64(tot) / float64(maxTicks)
	step := time.Duration(niceStep(raw))
	labels := []rune(strings.Repeat(" ", bw+8))
	ticks := []rune(strings.Repeat("─", bw))
	for k := 0; ; k++ {
		at := time.Duration(k) * step
		if at > tot {
			break
		}
		c := int(math.Round(col(win.Start+at, win, bw)))
		if c >= bw {
			c = bw - 1
		}
		ticks[c] = '┬'
		lab := []rune(fmtAxis(at, step))
		if c+len(lab) <= bw {
			copy(labels[c:], lab)
		}
	}
	return strings.TrimRight(string(labels), " "), string(ticks)
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func fmtAxis(at, step time.Duration) string {
	switch {
	case at == 0:
		return "0"
	case step >= time.Second:
		return fmt.Sprintf("%gs", at.Seconds())
	case step >= time.Millisecond:
		if at >= time.Second {
			return fmt.Sprintf("%gs", at.Seconds())
		}
		return fmt.Sprintf("%dms", at/time.Millisecond)
	}
	return fmt.Sprintf("%dµs", at/time.Microsecond)
}
