package sessions

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
	"github.com/treni-top/treni-top/trace/stat/compare"
)

// The bound past which a change is called even when the samples are too
// few for the test: every NEW run at least BeyondNoiseRatio times every
// BASE run and at least BeyondNoiseFloor slower (or the same the other
// way). docs/DIFF.md derives both from the A/A spread measured on a
// loaded 2-core machine (docs/BENCHMARKS.md, "diff calibration").
const (
	BeyondNoiseRatio = 20.0
	BeyondNoiseFloor = 5 * time.Second
)

// judgeRows tests every row and gives it its verdict: the headline rows'
// p-values are Holm-adjusted over the headline family first.
func judgeRows(res *DiffResult, o DiffOptions) {
	level := 1 - o.Alpha
	var headline []int
	for i := range res.Rows {
		r := &res.Rows[i]
		if r.BaseRuns == 0 || r.NewRuns == 0 {
			continue
		}
		c := compare.Compare(r.baseRun, r.newRun, level)
		r.P, r.PAdjusted = c.P, c.P
		r.ShiftMS = c.Shift
		if c.Level > 0 {
			r.CILowMS, r.CIHighMS, r.CILevel = c.Lo, c.Hi, c.Level
		}
		if bm := median(r.baseRun); bm > 0 {
			r.Change = c.Shift / bm
		}
		if r.Role == RoleHeadline {
			headline = append(headline, i)
		}
	}
	res.HeadlineTests = len(headline)
	ps := make([]float64, len(headline))
	for j, i := range headline {
		ps[j] = res.Rows[i].P
	}
	for j, adj := range compare.Holm(ps) {
		res.Rows[headline[j]].PAdjusted = adj
	}
	for i := range res.Rows {
		judge(&res.Rows[i], o, max(1, res.HeadlineTests))
		switch res.Rows[i].Verdict {
		case DiffRegression:
			res.Regressions++
		case DiffImprovement:
			res.Improvements++
		}
	}
}

// judge applies diff's rules to one tested row. family is the size of the
// Holm family a headline row's p was adjusted over.
func judge(r *DiffRow, o DiffOptions, family int) {
	switch {
	case r.BaseRuns == 0:
		r.Verdict = DiffOnlyNew
		return
	case r.NewRuns == 0:
		r.Verdict = DiffOnlyBase
		return
	case withoutWake(r.Metric) == metricResidencyCheck:
		r.Verdict = DiffResidencyCheck
		r.Why = "the page_cache stage only checked residency: the weights were read inside " +
			string(trace.StageDecoderTensorUpload) + ", whose read_wait row is the reading"
		return
	}
	// The smallest p these sizes can give, against the level the row is
	// held to: a headline row's adjusted p is at least family × its own.
	need := o.Alpha
	if r.Role == RoleHeadline {
		need = o.Alpha / float64(family)
	}
	r.TooFew = compare.MinP(r.BaseRuns, r.NewRuns) > need
	slower := r.ShiftMS > 0
	switch {
	case r.TooFew:
		if beyondNoise(r.baseRun, r.newRun) || beyondNoise(r.newRun, r.baseRun) {
			r.BeyondNoise = true
			break
		}
		r.Verdict = DiffNoChange
		r.Note = fmt.Sprintf("%s cannot be significant: needs ≥%d runs per side", runsPhrase(r.BaseRuns, r.NewRuns), compare.SizeNeeded(need))
		return
	case r.PAdjusted > o.Alpha:
		r.Verdict = DiffNoChange
		r.Note = fmt.Sprintf("not significant (p=%s)", formatP(r.PAdjusted))
		return
	}
	mag := math.Abs(r.ShiftMS)
	switch {
	case math.Abs(r.Change) <= o.Threshold:
		r.Verdict = DiffNoChange
		r.Note = fmt.Sprintf("significant, but %+.1f%% is within --threshold %.0f%%", 100*r.Change, 100*o.Threshold)
		return
	case !r.perToken && mag <= stat.MS(o.MinDelta):
		r.Verdict = DiffNoChange
		r.Note = fmt.Sprintf("significant, but %s ms is within --min-delta %s", signedMS(r.ShiftMS), o.MinDelta)
		return
	}
	switch {
	case r.Role == RoleHeadline && slower:
		r.Verdict = DiffRegression
	case r.Role == RoleHeadline:
		r.Verdict = DiffImprovement
	case slower:
		r.Verdict = DiffSlower
	default:
		r.Verdict = DiffFaster
	}
	if r.BeyondNoise {
		r.Note = fmt.Sprintf("%s is too few for the test, but every run of one side is ≥%.0f× and ≥%s away from every run of the other",
			runsPhrase(r.BaseRuns, r.NewRuns), BeyondNoiseRatio, BeyondNoiseFloor)
	}
}

// beyondNoise reports whether every value of hi is at least
// BeyondNoiseRatio times and BeyondNoiseFloor more than every value of lo.
func beyondNoise(lo, hi []float64) bool {
	maxLo, minHi := slices.Max(lo), slices.Min(hi)
	return maxLo >= 0 && minHi >= BeyondNoiseRatio*maxLo && minHi-maxLo >= stat.MS(BeyondNoiseFloor)
}

// runsPhrase is "1 run per side" or "2 and 3 runs".
func runsPhrase(b, n int) string {
	if b == n {
		if b == 1 {
			return "1 run per side"
		}
		return fmt.Sprintf("%d runs per side", b)
	}
	return fmt.Sprintf("%d and %d runs", b, n)
}
