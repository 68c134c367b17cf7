package sessions

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// DefaultThreshold is the smallest relative change diff calls a
// regression (10%), unless the run-to-run spread is larger.
const DefaultThreshold = 0.10

// Diff verdicts per metric.
const (
	DiffRegression  = "REGRESSION"
	DiffImprovement = "improved"
	DiffNoise       = "within noise"
	DiffUnchanged   = "unchanged"
	DiffOnlyBase    = "only in base"
	DiffOnlyNew     = "only in new"
	// DiffResidencyCheck marks a page_cache stage that only checked
	// residency (the engine read the files inside its upload): its time
	// says nothing about loading, so it is neither a regression nor an
	// improvement; the upload's read_wait row carries the reading.
	DiffResidencyCheck = "residency check only"
)

// Metric names of the upload's split (trace.AttrReadWaitMS,
// trace.AttrCopyWaitMS) and of a page_cache span that did not read
// (trace.ReadsDeferred).
const (
	metricUploadReadWait = "stage/" + string(trace.StageDecoderTensorUpload) + ".read_wait"
	metricUploadCopyWait = "stage/" + string(trace.StageDecoderTensorUpload) + ".copy_wait"
	metricResidencyCheck = "stage/" + string(trace.StagePageCache) + ".residency_check"
)

// DiffOptions tunes Diff.
type DiffOptions struct {
	// Threshold is the relative change (0.10 = 10%) below which nothing is
	// called; zero means DefaultThreshold.
	Threshold float64
}

// DiffRow compares one metric. Every metric is a time in milliseconds
// where lower is better.
type DiffRow struct {
	Metric string `json:"metric"`
	Base   Stats  `json:"base"`
	New    Stats  `json:"new"`
	// Change is (new median − base median) ÷ base median.
	Change float64 `json:"change"`
	// Noise is the larger run-to-run spread of the two sides; a change
	// must exceed it (and the threshold) to count.
	Noise   float64 `json:"noise"`
	Verdict string  `json:"verdict"`
	// Why explains a regression in words, with evidence when there is any.
	Why string `json:"why,omitempty"`
}

// DiffResult is the comparison of two sets of sessions.
type DiffResult struct {
	Threshold    float64   `json:"threshold"`
	Base         []string  `json:"base"`
	New          []string  `json:"new"`
	Rows         []DiffRow `json:"rows"`
	Regressions  int       `json:"regressions"`
	Improvements int       `json:"improvements"`
}

// ErrUnusable is wrapped when a side of a diff has nothing to compare.
var ErrUnusable = errors.New("unusable input")

// Diff compares sessions: every run of every session on a side contributes
// one value per metric (stage durations, cold total, cold TTFT) or several
// (warm request metrics), so repeated runs widen the spread honestly.
func Diff(base, new []*Session, opts DiffOptions) (DiffResult, error) {
	th := opts.Threshold
	if th <= 0 {
		th = DefaultThreshold
	}
	res := DiffResult{Threshold: th}
	for _, s := range base {
		res.Base = append(res.Base, s.Path)
	}
	for _, s := range new {
		res.New = append(res.New, s.Path)
	}
	bm, bn := collectMetrics(base)
	nm, nn := collectMetrics(new)
	if bn == 0 {
		return res, fmt.Errorf("%w: the base sessions contain no run to compare", ErrUnusable)
	}
	if nn == 0 {
		return res, fmt.Errorf("%w: the new sessions contain no run to compare", ErrUnusable)
	}
	names := map[string]bool{}
	for k := range bm {
		names[k] = true
	}
	for k := range nm {
		names[k] = true
	}
	var keys []string
	for k := range names {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return metricOrder(keys[i]) < metricOrder(keys[j]) || (metricOrder(keys[i]) == metricOrder(keys[j]) && keys[i] < keys[j])
	})
	for _, k := range keys {
		row := DiffRow{Metric: k, Base: stat.Summarize(bm[k]), New: stat.Summarize(nm[k])}
		switch {
		case row.Base.N == 0:
			row.Verdict = DiffOnlyNew
		case row.New.N == 0:
			row.Verdict = DiffOnlyBase
		case k == metricResidencyCheck:
			row.Change = relChange(row.Base.Median, row.New.Median)
			row.Verdict = DiffResidencyCheck
			row.Why = "the page_cache stage only checked residency: the weights were read inside " +
				string(trace.StageDecoderTensorUpload) + ", whose read_wait row is the reading"
		default:
			if row.Base.Median > 0 {
				row.Change = (row.New.Median - row.Base.Median) / row.Base.Median
			}
			row.Noise = math.Max(row.Base.Spread, row.New.Spread)
			mag := math.Abs(row.Change)
			switch {
			case mag < 0.005:
				row.Verdict = DiffUnchanged
			case mag <= th || mag <= row.Noise:
				row.Verdict = DiffNoise
			case row.Change > 0:
				row.Verdict = DiffRegression
				res.Regressions++
			default:
				row.Verdict = DiffImprovement
				res.Improvements++
			}
		}
		if row.Verdict == DiffRegression {
			row.Why = explainRegression(k, base, new)
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// relChange is (new − base) ÷ base, 0 when base is not positive.
func relChange(base, new float64) float64 {
	if base <= 0 {
		return 0
	}
	return (new - base) / base
}

// explainRegression says in words what the diagnosis saw differently on the
// two sides: the page-cache state for loading stages, the dominant term
// otherwise.
func explainRegression(metric string, base, new []*Session) string {
	bf, bd := sideFacts(base)
	nf, nd := sideFacts(new)
	loading := metric == "stage/"+string(trace.StagePageCache) || strings.HasPrefix(metric, "stage/"+string(trace.StageDecoderTensorUpload)) ||
		metric == "stage/"+string(trace.StageModelLoad) || strings.HasPrefix(metric, "cold_")
	if loading && bf >= 0 && nf >= 0 && nf < ColdResidency && bf >= WarmResidency {
		return fmt.Sprintf("the page cache was cold in NEW, %.0f%% of the weights resident against %.0f%% in BASE", 100*nf, 100*bf)
	}
	if loading && bf >= 0 && nf >= 0 && bf < ColdResidency && nf >= WarmResidency {
		return fmt.Sprintf("not the page cache: BASE was the cold one (%.0f%% resident) and NEW had %.0f%%", 100*bf, 100*nf)
	}
	if nd != "" && nd != bd {
		return "the dominant cold term changed: BASE " + orNone(bd) + ", NEW " + nd
	}
	if nd != "" {
		return "dominant cold term on both sides: " + nd
	}
	return ""
}

// sideFacts returns the median residency before launch (−1 if unknown) and
// the most common dominant-hypothesis description of a side's runs.
func sideFacts(ss []*Session) (float64, string) {
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
		return -1, best
	}
	return stat.Summarize(res).Median, best
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// collectMetrics gathers every metric value of every run of the sessions.
func collectMetrics(ss []*Session) (map[string][]float64, int) {
	m := map[string][]float64{}
	runs := 0
	for _, s := range ss {
		for _, run := range s.Runs() {
			runs++
			// A wake's cold metrics are its own (Wake.metricPrefix).
			w := run.Wake.metricPrefix()
			if run.ColdEndKind != ColdEndLastStage {
				m[w+"cold_total/"+run.ColdEndKind] = append(m[w+"cold_total/"+run.ColdEndKind], stat.MS(run.ColdTotal()))
			}
			// The engine's own split of its upload: a cold page cache
			// shows up as read wait.
			ls := splitLoad(run.Spans)
			if ls.readWaitMS >= 0 {
				m[w+metricUploadReadWait] = append(m[w+metricUploadReadWait], ls.readWaitMS)
			}
			if ls.copyWaitMS >= 0 {
				m[w+metricUploadCopyWait] = append(m[w+metricUploadCopyWait], ls.copyWaitMS)
			}
			for _, st := range run.Attribution.Stages {
				k := "stage/" + string(st.Name)
				if st.Name == trace.StagePageCache && ls.deferred {
					k = metricResidencyCheck
				}
				m[w+k] = append(m[w+k], stat.MS(st.Duration))
			}
			if len(run.Attribution.Stages) > 0 {
				m[w+"stage/"+string(trace.StageUnattributed)] = append(m[w+"stage/"+string(trace.StageUnattributed)], stat.MS(run.Attribution.Unattributed))
			}
			rs := SummarizeRequests(run.Requests)
			if rs.Cold != nil {
				m[w+"cold_ttft"] = append(m[w+"cold_ttft"], rs.Cold.TTFT)
				m[w+"cold_e2e"] = append(m[w+"cold_e2e"], rs.Cold.E2E)
			}
			for _, row := range rs.Rows {
				if row.Phase != trace.PhaseWarm || row.Error != "" {
					continue
				}
				m["warm_ttft"] = append(m["warm_ttft"], row.TTFT)
				if row.TTFB > 0 {
					m["warm_ttfb"] = append(m["warm_ttfb"], row.TTFB)
				}
				if row.ITLP50 > 0 {
					m["warm_itl_p50"] = append(m["warm_itl_p50"], row.ITLP50)
				}
				if row.TPOT > 0 {
					m["warm_tpot"] = append(m["warm_tpot"], row.TPOT)
				}
				m["warm_e2e"] = append(m["warm_e2e"], row.E2E)
			}
		}
	}
	return m, runs
}

// metricOrder sorts cold totals first, then stages in taxonomy order, then
// request metrics.
func metricOrder(k string) int {
	if rest, ok := strings.CutPrefix(k, "wake_l"); ok {
		// After the cold start's rows, level 1's before level 2's.
		_, m, _ := strings.Cut(rest, "/")
		return 1000*int(rest[0]-'0') + metricOrder(m)
	}
	switch {
	case strings.HasPrefix(k, "cold_total"):
		return 0
	case strings.HasPrefix(k, "stage/"):
		// A stage's parts (".read_wait") sort right after it.
		name, _, _ := strings.Cut(strings.TrimPrefix(k, "stage/"), ".")
		return 10 + trace.Stage(name).Order()
	case strings.HasPrefix(k, "cold_"):
		return 100
	}
	return 200
}

// JSON renders the diff for scripts.
func (d DiffResult) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode diff: %w", err)
	}
	return append(b, '\n'), nil
}

// Text renders the diff for people and CI logs: a verdict line first, then
// the table, then one line per regression.
func (d DiffResult) Text() string {
	var b strings.Builder
	switch {
	case d.Regressions > 0:
		fmt.Fprintf(&b, "REGRESSION: %d metric(s) slower by more than %.0f%% and more than the run-to-run spread\n", d.Regressions, 100*d.Threshold)
	default:
		fmt.Fprintf(&b, "OK: no regression beyond %.0f%% and the run-to-run spread", 100*d.Threshold)
		if d.Improvements > 0 {
			fmt.Fprintf(&b, " (%d improved)", d.Improvements)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "base: %s\nnew:  %s\n\n", strings.Join(d.Base, ", "), strings.Join(d.New, ", "))
	fmt.Fprintf(&b, "%-40s %24s %24s %9s %7s  %s\n", "metric (ms)", "base min/med/max", "new min/med/max", "change", "noise", "verdict")
	for _, r := range d.Rows {
		change := "—"
		if r.Base.N > 0 && r.New.N > 0 {
			change = fmt.Sprintf("%+.1f%%", 100*r.Change)
		}
		fmt.Fprintf(&b, "%-40s %24s %24s %9s %6.0f%%  %s\n", r.Metric, triple(r.Base), triple(r.New), change, 100*r.Noise, r.Verdict)
	}
	for _, r := range d.Rows {
		if r.Verdict == DiffResidencyCheck {
			fmt.Fprintf(&b, "\n%s: %s", r.Metric, r.Why)
		}
	}
	for _, r := range d.Rows {
		if r.Verdict == DiffRegression {
			fmt.Fprintf(&b, "\n%s %+.0f%%: median %s → %s ms (n=%d → %d)", r.Metric, 100*r.Change, stat.FormatMS(r.Base.Median), stat.FormatMS(r.New.Median), r.Base.N, r.New.N)
			if r.Why != "" {
				b.WriteString(" — " + r.Why)
			}
		}
	}
	if d.Regressions > 0 || slices.ContainsFunc(d.Rows, func(r DiffRow) bool { return r.Verdict == DiffResidencyCheck }) {
		b.WriteString("\n")
	}
	return b.String()
}

func triple(s Stats) string {
	if s.N == 0 {
		return "—"
	}
	return fmt.Sprintf("%s/%s/%s", stat.FormatMeasuredMS(s.Min), stat.FormatMeasuredMS(s.Median), stat.FormatMeasuredMS(s.Max))
}
