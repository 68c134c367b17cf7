package tui

import (
	"fmt"
	"strings"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// requestsPane is the request table (docs/ARCHITECTURE.md, "Measurements") for the selected run: one row
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
				l += fmt.Sprintf(" TTFT %s ms", stat.FormatMS(float64(q.FirstToken)/1e6))
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
			return row([]string{name, stat.FormatMeasuredMS(x.Min), stat.FormatMeasuredMS(x.Median), stat.FormatMeasuredMS(x.Max), pct(x.Spread)})
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
		cells := []string{q.Label, stat.FormatMS(q.TTFT), stat.FormatMS(q.TTFB), stat.FormatMS(q.ITLP50), stat.FormatMS(q.ITLP99), stat.FormatMS(q.TPOT), stat.FormatMS(q.E2E), itoa(q.Tokens)}
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
