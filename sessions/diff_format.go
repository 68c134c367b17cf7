package sessions

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace/stat"
)

// JSON renders the diff for scripts.
func (d DiffResult) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode diff: %w", err)
	}
	return append(b, '\n'), nil
}

// Text renders the diff for people and CI logs, like benchstat: the
// verdict first, then one table per role (headline, other request
// metrics, stages) with each side's min/median/max, the change of the
// median with its confidence interval, the p-value and the verdict.
func (d DiffResult) Text() string {
	var b strings.Builder
	for i, s := range d.Summary {
		if i == 0 {
			fmt.Fprintf(&b, "%s: %s\n", d.Verdict, s)
		} else {
			fmt.Fprintf(&b, "%s\n", s)
		}
	}
	fmt.Fprintf(&b, "base: %s\nnew:  %s\n", sideLine(d.BaseRuns, d.BaseFailed, d.BaseOmitted, d.Base), sideLine(d.NewRuns, d.NewFailed, d.NewOmitted, d.New))
	for _, sec := range d.sections() {
		fmt.Fprintf(&b, "\n%-32s %5s %22s %22s %16s %20s %6s  %s\n", sec.title+" (ms)", "runs", "base min/med/max", "new min/med/max", "change", ciHeader(d.Alpha), "p", "verdict")
		for _, r := range sec.rows {
			change, ci, p := "—", "—", "—"
			if r.BaseRuns > 0 && r.NewRuns > 0 {
				change = signedMS(r.ShiftMS) + " (" + percent(r.Change) + ")"
				p = formatP(r.PAdjusted)
				if r.CILevel > 0 {
					ci = interval(r)
				}
			}
			fmt.Fprintf(&b, "%-32s %5s %22s %22s %16s %20s %6s  %s\n", r.Label, runsCell(r), triple(r.Base, "/"), triple(r.New, "/"), change, ci, p, r.Verdict)
		}
	}
	// Notes: why headline rows are ~ (rows with the same reason share a
	// line), and the evidence of flagged rows not in the summary already.
	var notes []string
	byNote := map[string][]string{}
	for _, r := range d.Rows {
		switch {
		case r.Role == RoleHeadline && r.Verdict == DiffNoChange && noteWorthy(r, d):
			if len(byNote[r.Note]) == 0 {
				notes = append(notes, r.Note)
			}
			byNote[r.Note] = append(byNote[r.Note], r.Label)
		case r.Verdict == DiffResidencyCheck, r.Why != "" && r.Flagged() && r.Verdict != DiffRegression:
			notes = append(notes, r.Label+": "+r.Why)
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n")
		for _, n := range notes {
			if labels := byNote[n]; len(labels) > 0 {
				n = strings.Join(labels, ", ") + " ~: " + n
			}
			b.WriteString(n + "\n")
		}
	}
	fmt.Fprintf(&b, "\n%s\n", d.rulesLine())
	return b.String()
}

// Markdown renders the diff as a pull-request comment: the verdict, the
// headline table, and the other tables folded.
func (d DiffResult) Markdown() string {
	var b strings.Builder
	icon := map[string]string{VerdictRegression: "❌", VerdictOK: "✅", VerdictTooFew: "➖"}[d.Verdict]
	fmt.Fprintf(&b, "### %s treni-top diff: %s\n\n", icon, d.Verdict)
	for _, s := range d.Summary {
		fmt.Fprintf(&b, "%s\n\n", s)
	}
	fmt.Fprintf(&b, "base: %s  \nnew: %s\n\n", sideLine(d.BaseRuns, d.BaseFailed, d.BaseOmitted, d.Base), sideLine(d.NewRuns, d.NewFailed, d.NewOmitted, d.New))
	for i, sec := range d.sections() {
		if i > 0 {
			fmt.Fprintf(&b, "<details><summary>%s</summary>\n\n", sec.title)
		}
		fmt.Fprintf(&b, "| %s (ms) | runs | base min / median / max | new min / median / max | change | %s | p | verdict |\n|---|--:|--:|--:|--:|--:|--:|---|\n", sec.title, ciHeader(d.Alpha))
		for _, r := range sec.rows {
			change, ci, p := "—", "—", "—"
			if r.BaseRuns > 0 && r.NewRuns > 0 {
				change = signedMS(r.ShiftMS) + " (" + percent(r.Change) + ")"
				p = formatP(r.PAdjusted)
				if r.CILevel > 0 {
					ci = interval(r)
				}
			}
			verdict := r.Verdict
			if r.Flagged() {
				verdict = "**" + verdict + "**"
			}
			if r.Verdict == DiffNoChange && noteWorthy(r, d) {
				verdict += " " + r.Note
			}
			if r.Why != "" {
				verdict += " — " + r.Why
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Label, runsCell(r), triple(r.Base, " / "), triple(r.New, " / "), change, ci, p, verdict)
		}
		if i > 0 {
			b.WriteString("\n</details>\n")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%s\n", d.rulesLine())
	return b.String()
}

// noteWorthy reports whether a ~ row's note adds to the table: not "not
// significant" (the p column says it), nor too few runs when the verdict
// line already says so.
func noteWorthy(r DiffRow, d DiffResult) bool {
	switch {
	case r.Note == "", strings.HasPrefix(r.Note, "not significant"):
		return false
	case r.TooFew && d.Verdict == VerdictTooFew:
		return false
	}
	return true
}

type diffSection struct {
	title string
	rows  []DiffRow
}

// sections groups the rows by role, in the order they are printed.
func (d DiffResult) sections() []diffSection {
	secs := []diffSection{{title: "headline"}, {title: "other requests"}, {title: "stages"}}
	for _, r := range d.Rows {
		switch r.Role {
		case RoleHeadline:
			secs[0].rows = append(secs[0].rows, r)
		case RoleSecondary:
			secs[1].rows = append(secs[1].rows, r)
		default:
			secs[2].rows = append(secs[2].rows, r)
		}
	}
	var out []diffSection
	for _, s := range secs {
		if len(s.rows) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// rulesLine states the rules the verdicts were made by.
func (d DiffResult) rulesLine() string {
	return fmt.Sprintf("Samples are cold runs (a warm metric: the run's median request). change: Hodges–Lehmann shift of the median, with its\n"+
		"distribution-free interval. p: Mann–Whitney U; on headline rows Holm-adjusted over %d metrics. REGRESSION: a headline metric\n"+
		"significant at α %g, slower by more than --threshold %.0f%% and --min-delta %s (ITL, TPOT: --threshold only). docs/DIFF.md",
		d.HeadlineTests, d.Alpha, 100*d.Threshold, minDeltaString(d.MinDeltaMS))
}

// minDeltaString renders --min-delta as typed ("5ms").
func minDeltaString(ms float64) string {
	return time.Duration(ms * float64(time.Millisecond)).String()
}

// sideLine is "5 cold runs in 2 files: a.jsonl, b.jsonl", with the failed
// runs left out when there are any.
func sideLine(runs, failed, omitted int, files []string) string {
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = filepath.Base(f)
		if f == "" {
			names[i] = "(stream)"
		}
	}
	list := strings.Join(names, ", ")
	if len(names) > 6 {
		list = strings.Join(names[:3], ", ") + fmt.Sprintf(", … (%d more)", len(names)-3)
	}
	return fmt.Sprintf("%d cold run%s%s%s in %d file%s: %s", runs, plural(runs), failedPhrase(failed), omittedPhrase(omitted), len(files), plural(len(files)), list)
}

// omittedPhrase is " (3 runs not read: a file of more than 100 runs is
// read as its first 99 and its last; record at most 100 a file)", or ""
// for none.
func omittedPhrase(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d run%s not read: a file of more than %d runs is read as its first %d and its last; record at most %d a file)",
		n, plural(n), maxDigestRuns, maxDigestRuns-1, maxDigestRuns)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func ciHeader(alpha float64) string { return fmt.Sprintf("%.0f%% CI", 100*(1-alpha)) }

// runsCell is "5/5": the runs of each side.
func runsCell(r DiffRow) string {
	return fmt.Sprintf("%d/%d", r.BaseRuns, r.NewRuns)
}

// interval is "[+282, +335]".
func interval(r DiffRow) string {
	return fmt.Sprintf("[%s, %s]", signedMS(r.CILowMS), signedMS(r.CIHighMS))
}

// percent renders a relative change: "+12%", or "×31" past +999%, where
// a percentage stops being readable.
func percent(c float64) string {
	if c >= 9.995 {
		return fmt.Sprintf("×%.0f", 1+c)
	}
	return fmt.Sprintf("%+.0f%%", 100*c)
}

// signedMS renders a change in milliseconds with its sign.
func signedMS(v float64) string {
	switch {
	case v > 0:
		return "+" + stat.FormatMS(v)
	case v < 0:
		return "-" + stat.FormatMS(-v)
	}
	return "0"
}

// formatP renders a p-value with two significant digits.
func formatP(p float64) string {
	switch {
	case p >= 0.1:
		return fmt.Sprintf("%.2f", p)
	case p >= 0.001:
		return fmt.Sprintf("%.3f", p)
	}
	return fmt.Sprintf("%.1e", p)
}

// triple is a side's min/median/max with sep between them ("/" in the
// text table, " / " in Markdown), one figure when they are equal.
func triple(s Stats, sep string) string {
	switch {
	case s.N == 0:
		return "—"
	case s.Min == s.Max:
		return stat.FormatMeasuredMS(s.Min)
	}
	return stat.FormatMeasuredMS(s.Min) + sep + stat.FormatMeasuredMS(s.Median) + sep + stat.FormatMeasuredMS(s.Max)
}
