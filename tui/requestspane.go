package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// requestsPane is the request table (docs/ARCHITECTURE.md, "Measurements") for the selected run: one row
// per request, then warm statistics and the cold penalty.
type requestsPane struct{}

func (requestsPane) title() string { return "Requests" }

// Column widths: six millisecond columns and the token count; the label
// takes what they leave, up to its longest.
const (
	reqNumW, reqTokW, reqMinLabelW = 8, 7, 10
	reqUnit                        = "  ms"
)

func (requestsPane) view(c *programContext, st *state, w, h int) []string {
	t := c.theme
	r, ok := st.run(c.runSel)
	var s sessions.RequestSummary
	var inflight []trace.Request
	if ok {
		s = sessions.SummarizeRequests(r.Requests)
		inflight = st.streaming(r.Index)
	}
	tb := newRequestTable(s.Rows, inflight, w)
	live := streamingLines(t, inflight, tb.labelW)
	if len(s.Rows) == 0 {
		if len(live) > 0 {
			return live
		}
		return []string{t.render(t.dim, "no requests yet — the cold request is sent once the target is healthy")}
	}
	head := t.render(t.bold, tb.row([]string{"request", "TTFT", "TTFB", "ITL p50", "ITL p99", "TPOT", "E2E", "tokens"}))
	if tb.labelW+6*reqNumW+reqTokW+len(reqUnit) <= w {
		head += t.render(t.dim, reqUnit)
	}
	// Keep at least one request row, and the line that says how many are
	// not shown when there are more: drop summary lines until they fit.
	budget := h - 1 - len(live)
	foot := fitFoot(requestFoot(t, s, tb), budget, min(len(s.Rows), 2))
	room := max(budget-len(foot), 1)

	lines := append([]string{head}, tb.rows(t, s.Rows, room)...)
	lines = append(lines, live...)
	if len(foot) > 0 {
		if len(lines)+len(foot) < h {
			lines = append(lines, "")
		}
		for _, f := range foot {
			lines = append(lines, f.text)
		}
	}
	return lines
}

// requestTable lays out the table's columns: the label takes what the
// six millisecond columns and the token count leave, up to the longest
// label.
type requestTable struct {
	labelW int
	widths []int
}

// newRequestTable sizes the table for the rows and the requests in
// flight in w columns.
func newRequestTable(rows []sessions.RequestRow, inflight []trace.Request, w int) requestTable {
	longest := 0
	for _, q := range rows {
		longest = max(longest, widthOf(q.Label))
	}
	for _, q := range inflight {
		longest = max(longest, widthOf(requestLabel(q)))
	}
	labelW := min(max(longest+1, reqMinLabelW), max(w-6*reqNumW-reqTokW, reqMinLabelW))
	return requestTable{labelW: labelW, widths: []int{labelW, reqNumW, reqNumW, reqNumW, reqNumW, reqNumW, reqNumW, reqTokW}}
}

// row lays out one line's cells: the label left-aligned (cut to fit),
// the numbers right-aligned.
func (tb requestTable) row(cells []string) string {
	var b strings.Builder
	for i, cell := range cells {
		if i == 0 {
			b.WriteString(padRight(fitLabel(cell, tb.labelW-1), tb.widths[i]))
		} else {
			b.WriteString(padLeft(cell, tb.widths[i]))
		}
	}
	return b.String()
}

// rows are the request rows in room lines. When they do not fit, the
// first (cold) row and the most recent ones are kept, and a line says
// how many are not shown when there is room for it.
func (tb requestTable) rows(t *theme, rows []sessions.RequestRow, room int) []string {
	var more string
	if len(rows) > room {
		keep := max(room-2, 0)
		if room >= 2 {
			more = t.render(t.dim, fmt.Sprintf("  … %d more · z zooms", len(rows)-1-keep))
		}
		rows = append([]sessions.RequestRow{rows[0]}, rows[len(rows)-keep:]...)
	}
	var lines []string
	for i, q := range rows {
		if more != "" && i == 1 {
			lines = append(lines, more)
		}
		l := tb.row([]string{q.Label, stat.FormatMS(q.TTFT), stat.FormatMS(q.TTFB), stat.FormatMS(q.ITLP50), stat.FormatMS(q.ITLP99), stat.FormatMS(q.TPOT), stat.FormatMS(q.E2E), itoa(q.Tokens)})
		switch {
		case q.Error != "":
			l = t.render(t.bad, padRight(fitLabel(q.Label, tb.labelW-1), tb.labelW)+"error: "+q.Error)
		case q.Phase == trace.PhaseCold:
			l = t.render(t.warn, l)
		case q.Phase == trace.PhaseWarmup:
			l = t.render(t.dim, l) // warm-up: shown, not counted in the warm stats
		}
		lines = append(lines, l)
	}
	if more != "" && len(rows) == 1 {
		lines = append(lines, more)
	}
	return lines
}

// streamingLines are the requests in flight: streaming, their TTFT and
// tokens so far.
func streamingLines(t *theme, inflight []trace.Request, labelW int) []string {
	var live []string
	for _, q := range inflight {
		l := padRight(fitLabel(requestLabel(q), labelW-1), labelW) + "streaming…"
		if q.FirstToken > 0 {
			l += fmt.Sprintf(" TTFT %s ms", stat.FormatMS(float64(q.FirstToken)/1e6))
		}
		if n := len(q.Tokens); n > 0 {
			l += fmt.Sprintf(" · %d tokens so far", n)
		}
		live = append(live, t.render(t.accent, l))
	}
	return live
}

// footLine is a line of the summary under the table, with the rank at
// which it gives way when the pane is short (highest first).
type footLine struct {
	drop int
	text string
}

// requestFoot is the summary under the table: the warm statistics, the
// cold penalty and the failures. The cold penalty and the warm TTFT and
// E2E stay longest.
func requestFoot(t *theme, s sessions.RequestSummary, tb requestTable) []footLine {
	var foot []footLine
	if s.WarmTTFT.N > 0 {
		foot = append(foot, footLine{2, t.render(t.bold, tb.row([]string{fmt.Sprintf("warm n=%d", s.WarmTTFT.N), "min", "median", "max", "spread"}))})
		stats := func(drop int, name string, x sessions.Stats) footLine {
			if x.N == 0 {
				return footLine{drop, tb.row([]string{name, "—", "—", "—", "—"})}
			}
			return footLine{drop, tb.row([]string{name, stat.FormatMeasuredMS(x.Min), stat.FormatMeasuredMS(x.Median), stat.FormatMeasuredMS(x.Max), pct(x.Spread)})}
		}
		foot = append(foot, stats(4, "TTFT", s.WarmTTFT), stats(6, "ITL", s.WarmITL), stats(7, "TPOT", s.WarmTPOT), stats(3, "E2E", s.WarmE2E))
	}
	switch {
	case s.ColdPenalty > 0:
		foot = append(foot, footLine{0, t.render(t.warn, fmt.Sprintf("cold penalty: cold TTFT ÷ warm median TTFT = %.1f×  (E2E %.1f×)", s.ColdPenalty, s.ColdPenaltyE2E))})
	case s.Cold != nil:
		foot = append(foot, footLine{0, t.render(t.dim, "cold penalty: needs at least one warm request")})
	}
	if s.Errors > 0 {
		foot = append(foot, footLine{1, t.render(t.bad, fmt.Sprintf("%d request(s) failed", s.Errors))})
	}
	return foot
}

// fitFoot drops the summary lines of the highest rank until need request
// lines fit beside them in budget lines.
func fitFoot(foot []footLine, budget, need int) []footLine {
	for len(foot) > 0 && budget-len(foot) < need {
		worst := 0
		for i, f := range foot {
			if f.drop > foot[worst].drop {
				worst = i
			}
		}
		foot = append(foot[:worst], foot[worst+1:]...)
	}
	return foot
}

// requestLabel is how a request is named in the table.
func requestLabel(q trace.Request) string {
	if q.Label != "" {
		return q.Label
	}
	return q.ID
}

// fitLabel shortens a label to w cells keeping its last "/" part, which
// tells requests apart (a bench request's index: continuous_batching/run1/12
// becomes continuous_batch…/12, not continuou…).
func fitLabel(label string, w int) string {
	if widthOf(label) <= w {
		return label
	}
	i := strings.LastIndexByte(label, '/')
	if i < 0 || widthOf(label[i:])+2 > w {
		return fit(label, w)
	}
	tail := label[i:]
	return ansi.Truncate(label[:i], w-widthOf(tail)-1, "") + "…" + tail
}
