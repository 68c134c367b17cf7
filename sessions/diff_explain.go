package sessions

import (
	"fmt"
	"slices"
	"strings"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
	"github.com/treni-top/treni-top/trace/stat/compare"
)

// explainsLoading reports whether the residency evidence speaks to a
// metric: the cold start as a whole, and the stages that load weights.
func explainsLoading(metric string) bool {
	if w, _ := splitWake(metric); w != "" {
		return false // a wake restores weights from memory, not from files
	}
	return metric == "stage/"+string(trace.StagePageCache) || strings.HasPrefix(metric, "stage/"+string(trace.StageDecoderTensorUpload)) ||
		metric == "stage/"+string(trace.StageModelLoad) || strings.HasPrefix(metric, "cold_")
}

// explainRegression says in words what the diagnosis saw differently on the
// two sides: the page-cache state for loading metrics, the dominant term
// otherwise.
func explainRegression(metric string, base, new sideEvidence) string {
	if w, _ := splitWake(metric); w != "" {
		return "" // the diagnosis speaks of the cold start
	}
	bf, bd, nf, nd := base.resident, base.dominant, new.resident, new.dominant
	loading := explainsLoading(metric)
	if loading && bf >= 0 && nf >= 0 && nf < ColdResidency && bf >= WarmResidency {
		return fmt.Sprintf("the page cache was cold in NEW, %.0f%% of the weights resident against %.0f%% in BASE", 100*nf, 100*bf)
	}
	if loading && bf >= 0 && nf >= 0 && bf < ColdResidency && nf >= WarmResidency {
		return fmt.Sprintf("not the page cache: BASE was the cold one (%.0f%% resident) and NEW had %.0f%%", 100*bf, 100*nf)
	}
	if !strings.HasPrefix(metric, "cold_") && !strings.HasPrefix(metric, "stage/") {
		return ""
	}
	if nd != "" && nd != bd {
		return "the dominant cold term changed: BASE " + orNone(bd) + ", NEW " + nd
	}
	if nd != "" {
		return "dominant cold term on both sides: " + nd
	}
	return ""
}

// sideEvidence is what the diagnosis says of a side's runs: the median
// residency before launch (−1 if unknown) and the most common dominant
// hypothesis ("" if none).
type sideEvidence struct {
	resident float64
	dominant string
}

// sideFacts diagnoses every run of a side.
func sideFacts(ss []*Session) sideEvidence {
	var res []float64
	votes := map[string]int{}
	for _, s := range ss {
		for _, run := range s.Runs() {
			d := DiagnoseRun(s.Events, run)
			if d.Facts.ResidentBefore >= 0 {
				res = append(res, d.Facts.ResidentBefore)
			}
			if d.Dominant != "" {
				h, _ := d.Hypothesis(d.Dominant)
				votes[h.Code+" ("+h.Title+")"]++
			}
		}
	}
	best, n := "", 0
	for k, v := range votes {
		if v > n || v == n && k < best {
			best, n = k, v
		}
	}
	if len(res) == 0 {
		return sideEvidence{-1, best}
	}
	return sideEvidence{stat.Summarize(res).Median, best}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// summarizeDiff gives the diff its overall verdict and the sentences that say
// it, the headline first: each headline regression with the stages that
// explain it, or why there is no verdict.
func summarizeDiff(res *DiffResult) {
	var headline []DiffRow
	tooFew := true
	for _, r := range res.Rows {
		if r.Role == RoleHeadline && r.BaseRuns > 0 && r.NewRuns > 0 {
			headline = append(headline, r)
			tooFew = tooFew && r.TooFew && !r.BeyondNoise
		}
	}
	switch {
	case res.Regressions > 0:
		res.Verdict = VerdictRegression
		for _, r := range headline {
			if r.Verdict == DiffRegression {
				res.Summary = append(res.Summary, headlineSentence(r, res.Rows))
			}
		}
	case len(headline) == 0:
		res.Verdict = VerdictTooFew
		res.Summary = append(res.Summary, "no headline metric (cold start, cold or warm requests) is on both sides: nothing to judge")
	case tooFew:
		res.Verdict = VerdictTooFew
		res.RunsNeeded = compare.SizeNeeded(res.Alpha / float64(max(1, res.HeadlineTests)))
		res.Summary = append(res.Summary, fmt.Sprintf("%s cannot separate a change from noise: record ≥%d with --cold-runs %d",
			coldRunsPhrase(res.BaseRuns, res.NewRuns), res.RunsNeeded, res.RunsNeeded))
	default:
		res.Verdict = VerdictOK
		s := fmt.Sprintf("no regression: no headline metric is significantly slower (α %g) by more than %.0f%% and %s",
			res.Alpha, 100*res.Threshold, minDeltaString(res.MinDeltaMS))
		if res.Improvements > 0 {
			var names []string
			for _, r := range headline {
				if r.Verdict == DiffImprovement {
					names = append(names, fmt.Sprintf("%s %s ms", r.Label, signedMS(r.ShiftMS)))
				}
			}
			s += "; improved: " + strings.Join(names, ", ")
		}
		res.Summary = append(res.Summary, s)
	}
	// Stages that moved while the cold start did not regress: reported,
	// never a regression on their own.
	if !slices.ContainsFunc(headline, func(r DiffRow) bool {
		_, m := splitWake(r.Metric)
		return r.Verdict == DiffRegression && strings.HasPrefix(m, "cold_total/")
	}) {
		var moved []string
		for _, r := range res.Rows {
			switch {
			case r.Role != RoleStage || !r.Flagged():
			case r.BeyondNoise:
				moved = append(moved, fmt.Sprintf("%s %s ms (%s, beyond the noise bound)", r.Label, signedMS(r.ShiftMS), runsPhrase(r.BaseRuns, r.NewRuns)))
			default:
				moved = append(moved, fmt.Sprintf("%s %s ms (p=%s)", r.Label, signedMS(r.ShiftMS), formatP(r.PAdjusted)))
			}
		}
		if len(moved) > 0 {
			res.Summary = append(res.Summary, "stages that moved without a cold-start regression: "+strings.Join(moved, ", "))
		}
	}
}

// headlineSentence is "cold first token +310 ms [+282, +335] (+81%,
// p=0.048): page_cache +290 ms explains 94%".
func headlineSentence(r DiffRow, rows []DiffRow) string {
	s := fmt.Sprintf("%s %s ms", r.Label, signedMS(r.ShiftMS))
	if r.CILevel > 0 {
		s += " " + interval(r)
	}
	if r.BeyondNoise {
		s += fmt.Sprintf(" (%s; %s, too few for the test, but every run ≥%.0f× and ≥%s slower: beyond any noise measured)",
			percent(r.Change), runsPhrase(r.BaseRuns, r.NewRuns), BeyondNoiseRatio, BeyondNoiseFloor)
	} else {
		s += fmt.Sprintf(" (%s, p=%s)", percent(r.Change), formatP(r.PAdjusted))
	}
	if _, m := splitWake(r.Metric); strings.HasPrefix(m, "cold_total/") {
		s += ": " + explainByStages(r, rows)
	}
	if r.Why != "" {
		s += " — " + r.Why
	}
	return s
}

// explainByStages names the stages that moved the same way as a cold-start
// (or wake) regression, each with its share of the shift: the stages of
// the same kind of run. A stage's parts (read_wait) are inside it and not
// counted again.
func explainByStages(head DiffRow, rows []DiffRow) string {
	var parts []string
	hw, _ := splitWake(head.Metric)
	for _, r := range sortedByShift(rows) {
		w, m := splitWake(r.Metric)
		if w != hw || r.Role != RoleStage || r.Verdict != DiffSlower || strings.Contains(strings.TrimPrefix(m, "stage/"), ".") {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s ms explains %.0f%%", r.Label, signedMS(r.ShiftMS), 100*r.ShiftMS/head.ShiftMS))
	}
	if len(parts) == 0 {
		return "no stage moved significantly on its own"
	}
	return strings.Join(parts, "; ")
}

func sortedByShift(rows []DiffRow) []DiffRow {
	s := slices.Clone(rows)
	slices.SortStableFunc(s, func(a, b DiffRow) int {
		switch {
		case a.ShiftMS > b.ShiftMS:
			return -1
		case a.ShiftMS < b.ShiftMS:
			return 1
		}
		return 0
	})
	return s
}

// failedPhrase is " (2 failed runs left out)", or "" for none.
func failedPhrase(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d failed run%s left out)", n, plural(n))
}

// coldRunsPhrase is "1 cold run per side" or "2 (BASE) and 5 (NEW) cold
// runs".
func coldRunsPhrase(b, n int) string {
	switch {
	case b == n && b == 1:
		return "1 cold run per side"
	case b == n:
		return fmt.Sprintf("%d cold runs per side", b)
	}
	return fmt.Sprintf("%d (BASE) and %d (NEW) cold runs", b, n)
}
