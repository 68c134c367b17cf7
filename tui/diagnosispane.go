package tui

import (
	"fmt"
	"strings"

	"github.com/treni-top/treni-top/sessions"
)

// diagnosisPane is the decision table (docs/ARCHITECTURE.md, "Diagnosis")
// of the selected run: each hypothesis with its verdict, evidence and next
// knob.
type diagnosisPane struct{}

func (diagnosisPane) title() string { return "Diagnosis" }

func (diagnosisPane) view(c *programContext, st *state, w, h int) []string {
	t := c.theme
	d := st.diagnosis(c.runSel)
	if len(d.Hypotheses) == 0 {
		return []string{t.render(t.dim, "no diagnosis yet")}
	}
	var lines []string
	if r, ok := st.run(c.runSel); ok && st.provisional(r, c.ended) {
		note := "cold start in progress: no first token yet, so these shares are of the window so far and can change; the verdict stands once the cold request's first token arrives"
		for _, l := range wrap(note, w, "") {
			lines = append(lines, t.render(t.warn, l))
		}
	}
	for _, l := range wrap(d.Summary, w, "") {
		lines = append(lines, t.render(t.bold, l))
	}
	if n := st.input.Dropped(); n > 0 {
		note := fmt.Sprintf("evidence from samples is partial: %d samples of a cold window that stayed open were not kept", n)
		for _, l := range wrap(note, w, "") {
			lines = append(lines, t.render(t.warn, l))
		}
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
		lines = append(lines, wrapItems(ev, " · ", w, "     ")...)
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
