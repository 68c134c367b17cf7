package tui

import (
	"fmt"
	"strings"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// requestsPane is the runbook's request table for the selected run: one row
// per request, then warm statistics and the cold penalty.
type requestsPane struct{}

func (requestsPane) title() string { return "Requests" }

func (requestsPane) view(c *programContext, st *state, w, h int) []string {
	t := c.theme
	r, ok := st.run(c.runSel)
	var live []string
	if ok {
		for _, q := range st.streaming(r.Index) {
			label := q.Label
			if label == "" {
				label = q.ID
			}
			l := padRight(label, 10) + " streaming…"
			if q.FirstToken > 0 {
				l += fmt.Sprintf(" TTFT %s ms", fmtMS(float64(q.FirstToken)/1e6))
			}
			if n := len(q.Tokens); n > 0 {
				l += fmt.Sprintf(" · %d tokens so far", n)
			}
			live = append(live, t.render(t.accent, l))
		}
	}
	if !ok || len(r.Requests) == 0 {
		if len(live) > 0 {
			return live
		}
		return []string{t.render(t.dim, "no requests yet — the cold request is sent once the target is healthy")}
	}
	s := sessions.SummarizeRequests(r.Requests)
	cols := []string{"request", "TTFT", "TTFB", "ITL p50", "ITL p99", "TPOT", "E2E", "tokens"}
	widths := []int{10, 9, 9, 9, 9, 9, 9, 7}
	row := func(cells []string) string {
		var b strings.Builder
		for i, cell := range cells {
			if i == 0 {
				b.WriteString(padRight(cell, widths[i]))
			} else {
				b.WriteString(padLeft(cell, widths[i]))
			}
		}
		return b.String()
	}
	lines := []string{t.render(t.bold, row(cols)) + t.render(t.dim, "  ms")}
	// Footer: warm stats (4 lines + header) and the penalty line.
	var foot []string
	if s.WarmTTFT.N > 0 {
		foot = append(foot, t.render(t.bold, row([]string{fmt.Sprintf("warm n=%d", s.WarmTTFT.N), "min", "median", "max", "spread"})))
		stat := func(name string, x sessions.Stats) string {
			if x.N == 0 {
				return row([]string{name, "—", "—", "—", "—"})
			}
			return row([]string{name, fmtMS(x.Min), fmtMS(x.Median), fmtMS(x.Max), pct(x.Spread)})
		}
		foot = append(foot, stat("TTFT", s.WarmTTFT), stat("ITL", s.WarmITL), stat("TPOT", s.WarmTPOT), stat("E2E", s.WarmE2E))
	}
	switch {
	case s.ColdPenalty > 0:
		foot = append(foot, t.render(t.warn, fmt.Sprintf("cold penalty: cold TTFT ÷ warm median TTFT = %.1f×  (E2E %.1f×)", s.ColdPenalty, s.ColdPenaltyE2E)))
	case s.Cold != nil:
		foot = append(foot, t.render(t.dim, "cold penalty: needs at least one warm request"))
	}
	if s.Errors > 0 {
		foot = append(foot, t.render(t.bad, fmt.Sprintf("%d request(s) failed", s.Errors)))
	}
	room := h - len(lines) - len(foot) - len(live) - 1
	rows := s.Rows
	skipped := 0
	if room < 3 {
		room = 3
	}
	if len(rows) > room {
		// Keep the first (cold) row and the most recent ones; the "… n
		// earlier" line takes one row.
		keep := room - 2
		skipped = len(rows) - 1 - keep
		rows = append([]sessions.RequestRow{rows[0]}, rows[len(rows)-keep:]...)
	}
	for i, q := range rows {
		if skipped > 0 && i == 1 {
			lines = append(lines, t.render(t.dim, fmt.Sprintf("  … %d earlier", skipped)))
		}
		cells := []string{q.Label, fmtMS(q.TTFT), fmtMS(q.TTFB), fmtMS(q.ITLP50), fmtMS(q.ITLP99), fmtMS(q.TPOT), fmtMS(q.E2E), itoa(q.Tokens)}
		l := row(cells)
		switch {
		case q.Error != "":
			l = t.render(t.bad, padRight(q.Label, widths[0])+" error: "+q.Error)
		case q.Phase == trace.PhaseCold:
			l = t.render(t.warn, l)
		case q.Phase == trace.PhaseWarmup:
			l = t.render(t.dim, l) // warm-up: shown, not counted in the warm stats
		}
		lines = append(lines, l)
	}
	lines = append(lines, live...)
	if len(foot) > 0 {
		if len(lines)+len(foot) < h {
			lines = append(lines, "")
		}
		lines = append(lines, foot...)
	}
	return lines
}

// diagnosisPane is the decision table of DESIGN.md §5.
type diagnosisPane struct{}

func (diagnosisPane) title() string { return "Diagnosis" }

func (diagnosisPane) view(c *programContext, st *state, w, h int) []string {
	t := c.theme
	d := st.diag
	if len(d.Hypotheses) == 0 {
		return []string{t.render(t.dim, "no diagnosis yet")}
	}
	lines := wrap(d.Summary, w, "")
	for i := range lines {
		lines[i] = t.render(t.bold, lines[i])
	}
	for _, hy := range d.Hypotheses {
		verdict := string(hy.Verdict)
		st := t.dim
		switch hy.Verdict {
		case sessions.VerdictDominant:
			st = t.bad
			verdict = "▶ " + verdict
		case sessions.VerdictContributes:
			st = t.warn
		case sessions.VerdictRuledOut:
			st = t.good
		}
		// Verdict first: it is what the eye looks for, and titles may be
		// cut on narrow screens.
		l := hy.Code + "  " + t.render(st, padRight(verdict, 22)) + " " + hy.Title
		if hy.Score > 0 {
			l += t.render(t.dim, fmt.Sprintf(" (score %.2f)", hy.Score))
		}
		lines = append(lines, l)
		var ev []string
		for _, e := range hy.Evidence {
			ev = append(ev, e.Name+" "+e.Value)
		}
		for _, l := range wrapItems(ev, " · ", w, "     ") {
			lines = append(lines, l)
		}
		if len(hy.Missing) > 0 {
			for _, l := range wrap("missing: "+strings.Join(hy.Missing, ", "), w, "     ") {
				lines = append(lines, t.render(t.dim, l))
			}
		}
		if hy.NextKnob != "" {
			for _, l := range wrap("next: "+hy.NextKnob, w, "     ") {
				lines = append(lines, t.render(t.accent, l))
			}
		}
	}
	return lines
}

// runsPane lists the session's cold runs and the facts of the header.
type runsPane struct{}

func (runsPane) title() string { return "Session" }

func (runsPane) view(c *programContext, st *state, w, h int) []string {
	t := c.theme
	hd := c.header
	var lines []string
	host := hd.Host.Hostname
	if host == "" {
		host = "?"
	}
	lines = append(lines, fmt.Sprintf("host %s · %s/%s · %d CPUs", host, hd.Host.OS, hd.Host.Arch, hd.Host.CPUs))
	for _, g := range hd.GPUs {
		lines = append(lines, fmt.Sprintf("gpu%d %s %s", g.Index, g.Name, fmtBytes(float64(g.MemBytes))))
	}
	var wb int64
	for _, f := range hd.ModelFiles {
		wb += f.Bytes
	}
	if len(hd.ModelFiles) > 0 {
		lines = append(lines, fmt.Sprintf("weights %d file(s), %s", len(hd.ModelFiles), fmtBytes(float64(wb))))
	}
	lines = append(lines, "")
	if len(st.runs) == 0 {
		return append(lines, t.render(t.dim, "no runs yet"))
	}
	hdr := padRight("run", 5) + padLeft("cold", 10) + padLeft("healthy", 10) + padLeft("reqs", 6) + "  " + padRight("top stage", 22) + " exit"
	lines = append(lines, t.render(t.bold, hdr))
	sel, _ := st.run(c.runSel)
	for _, r := range st.runs {
		healthy := "—"
		if r.Healthy > 0 {
			healthy = fmtDur(r.Healthy - r.Start)
		}
		exit := "running"
		if r.Exit != nil {
			exit = targetState(r, true, false)
		}
		mark := "  "
		if r.Index == sel.Index {
			mark = "▶ "
		}
		lines = append(lines, padRight(mark+itoa(r.Index), 5)+padLeft(fmtDur(r.ColdTotal()), 10)+padLeft(healthy, 10)+
			padLeft(itoa(len(r.Requests)), 6)+"  "+padRight(string(r.Attribution.Dominant), 22)+" "+exit)
	}
	if len(st.runs) > 1 {
		lines = append(lines, t.render(t.dim, "[ and ] choose the run the other panes show"))
	}
	return lines
}

// wrap breaks plain text at spaces into lines of at most w cells, each
// starting with indent.
func wrap(s string, w int, indent string) []string {
	return wrapItems(strings.Fields(s), " ", w, indent)
}

// wrapItems packs items joined by sep into lines of at most w cells; an
// item longer than a line gets a line of its own (and is cut by the frame).
func wrapItems(items []string, sep string, w int, indent string) []string {
	var out []string
	cur := ""
	for _, it := range items {
		switch {
		case cur == "":
			cur = indent + it
		case widthOf(cur)+widthOf(sep)+widthOf(it) <= w:
			cur += sep + it
		default:
			out = append(out, cur)
			cur = indent + it
		}
	}
	if cur != "" {
		out = append(out, cur)
	}
	return out
}
