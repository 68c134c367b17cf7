package sessions

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
	"github.com/treni-top/treni-top/trace/stat/compare"
)

// Defaults of diff's rules; docs/DIFF.md says why each is what it is.
const (
	// DefaultAlpha is the family-wise significance level of the headline
	// metrics (and the level of each stage's own test).
	DefaultAlpha = 0.05
	// DefaultThreshold is the smallest relative change called a
	// regression (10%).
	DefaultThreshold = 0.10
	// DefaultMinDelta is the smallest absolute change called a regression:
	// a few scheduler ticks of a loaded machine, far below what anyone
	// acts on in a cold start of hundreds of milliseconds.
	DefaultMinDelta = 5 * time.Millisecond
)

// The bound past which a change is called even when the samples are too
// few for the test: every NEW run at least BeyondNoiseRatio times every
// BASE run and at least BeyondNoiseFloor slower (or the same the other
// way). docs/DIFF.md derives both from the A/A spread measured on a
// loaded 2-core machine (docs/BENCHMARKS.md, "diff calibration").
const (
	BeyondNoiseRatio = 5.0
	BeyondNoiseFloor = 500 * time.Millisecond
)

// Diff verdicts. Headline rows are REGRESSION, improved or ~; the other
// rows (stages and the secondary request metrics) explain and never fail
// the comparison, so they say slower or faster instead.
const (
	DiffRegression  = "REGRESSION"
	DiffImprovement = "improved"
	DiffSlower      = "slower"
	DiffFaster      = "faster"
	// DiffNoChange: not significant, too few runs for the test, or a
	// change smaller than --threshold or --min-delta (Note says which).
	DiffNoChange = "~"
	DiffOnlyBase = "only in base"
	DiffOnlyNew  = "only in new"
	// DiffResidencyCheck marks a page_cache stage that only checked
	// residency (the engine read the files inside its upload): its time
	// says nothing about loading, so it is never flagged; the upload's
	// read_wait row carries the reading.
	DiffResidencyCheck = "residency check only"
)

// Row roles: what a row is for.
const (
	// RoleHeadline rows are what a user feels (the cold start to its first
	// token, the cold and warm requests); only they decide the verdict.
	RoleHeadline = "headline"
	// RoleSecondary rows are request metrics that explain a headline one.
	RoleSecondary = "secondary"
	// RoleStage rows are the cold stages, unattributed time and the
	// upload's parts; they explain the cold start.
	RoleStage = "stage"
)

// Metric names of the upload's split (trace.AttrReadWaitMS,
// trace.AttrCopyWaitMS) and of a page_cache span that did not read
// (trace.ReadsDeferred).
const (
	metricUploadReadWait = "stage/" + string(trace.StageDecoderTensorUpload) + ".read_wait"
	metricUploadCopyWait = "stage/" + string(trace.StageDecoderTensorUpload) + ".copy_wait"
	metricResidencyCheck = "stage/" + string(trace.StagePageCache) + ".residency_check"
	metricUnattributed   = "stage/" + string(trace.StageUnattributed)
)

// metricInfo describes the metrics that are not stages, in the order the
// headline is printed.
var metricInfo = []struct {
	key, label, role string
	perToken         bool // a time per token: --min-delta does not apply
}{
	{"cold_total/" + ColdEndFirstToken, "cold first token", RoleHeadline, false},
	{"cold_total/" + ColdEndHealthy, "cold start → healthy", RoleHeadline, false},
	{"cold_total/" + ColdEndLastStage, "cold start → last stage", RoleHeadline, false},
	{"cold_ttft", "cold TTFT", RoleHeadline, false},
	{"warm_ttft", "warm TTFT", RoleHeadline, false},
	{"warm_itl_p50", "warm ITL (p50)", RoleHeadline, true},
	{"warm_tpot", "warm TPOT", RoleHeadline, true},
	{"warm_e2e", "warm E2E", RoleHeadline, false},
	{"cold_e2e", "cold E2E", RoleSecondary, false},
	{"warm_ttfb", "warm TTFB", RoleSecondary, false},
}

// DiffOptions tunes Diff; zero values take the defaults.
type DiffOptions struct {
	// Alpha is the significance level (0.05).
	Alpha float64
	// Threshold is the relative change (0.10 = 10%) a regression must
	// exceed.
	Threshold float64
	// MinDelta is the absolute change a regression must exceed (5 ms);
	// per-token times (ITL, TPOT) are held to Threshold alone.
	MinDelta time.Duration
}

func (o DiffOptions) withDefaults() DiffOptions {
	if o.Alpha <= 0 {
		o.Alpha = DefaultAlpha
	}
	if o.Threshold <= 0 {
		o.Threshold = DefaultThreshold
	}
	if o.MinDelta <= 0 {
		o.MinDelta = DefaultMinDelta
	}
	return o
}

// DiffRow compares one metric, a time in milliseconds where lower is
// better. The sample unit is the cold run: a cold metric has one value per
// run, a warm one the median of the run's warm requests, since requests of
// one process share its state and the machine's load of the moment and
// are not independent of each other (docs/DIFF.md).
type DiffRow struct {
	Metric string `json:"metric"`
	Label  string `json:"label"`
	Role   string `json:"role"`
	// Base and New summarise every value (every warm request, not only
	// the runs' medians): what the requests saw.
	Base Stats `json:"base"`
	New  Stats `json:"new"`
	// BaseRuns and NewRuns are the sample sizes of the test: the runs that
	// have this metric.
	BaseRuns int `json:"base_runs"`
	NewRuns  int `json:"new_runs"`
	// ShiftMS is the Hodges–Lehmann shift NEW − BASE of the runs' values,
	// the change of the median; Change is ShiftMS ÷ the median of BASE's
	// runs.
	ShiftMS float64 `json:"shift_ms"`
	Change  float64 `json:"change"`
	// CILowMS and CIHighMS bound ShiftMS with confidence CILevel (at least
	// 1 − Alpha); CILevel is 0 when the runs are too few for an interval.
	CILowMS  float64 `json:"ci_low_ms"`
	CIHighMS float64 `json:"ci_high_ms"`
	CILevel  float64 `json:"ci_level"`
	// P is the two-sided Mann–Whitney p-value of the runs' values;
	// PAdjusted is the p the verdict used: Holm-adjusted over the
	// headline rows for a headline row, P itself otherwise.
	P         float64 `json:"p"`
	PAdjusted float64 `json:"p_adjusted"`
	// TooFew says that no outcome of samples this small could be
	// significant; the verdict is then ~ unless BeyondNoise.
	TooFew bool `json:"too_few,omitempty"`
	// BeyondNoise says the change passed BeyondNoiseRatio and
	// BeyondNoiseFloor, which calls it without the test.
	BeyondNoise bool   `json:"beyond_noise,omitempty"`
	Verdict     string `json:"verdict"`
	// Note says why a row is ~; Why explains a flagged row with evidence
	// from the diagnosis when there is any.
	Note string `json:"note,omitempty"`
	Why  string `json:"why,omitempty"`

	perToken bool
	baseRun  []float64 // each run's value
	newRun   []float64
}

// Flagged reports whether the row moved past every rule in either
// direction.
func (r DiffRow) Flagged() bool {
	switch r.Verdict {
	case DiffRegression, DiffImprovement, DiffSlower, DiffFaster:
		return true
	}
	return false
}

// DiffResult is the comparison of two sets of sessions.
type DiffResult struct {
	Alpha      float64 `json:"alpha"`
	Threshold  float64 `json:"threshold"`
	MinDeltaMS float64 `json:"min_delta_ms"`
	// Base and New are the session files of each side; BaseRuns and
	// NewRuns their cold runs.
	Base     []string `json:"base"`
	New      []string `json:"new"`
	BaseRuns int      `json:"base_runs"`
	NewRuns  int      `json:"new_runs"`
	// BaseFailed and NewFailed count the runs left out because they failed
	// before completing their cold sequence (run_failed).
	BaseFailed int `json:"base_failed,omitempty"`
	NewFailed  int `json:"new_failed,omitempty"`
	// Verdict is REGRESSION (a headline metric regressed), OK (none did)
	// or ~ (the runs are too few to tell); Summary says it in sentences,
	// the headline first.
	Verdict string   `json:"verdict"`
	Summary []string `json:"summary"`
	// HeadlineTests is the number of headline metrics the Holm correction
	// covers.
	HeadlineTests int       `json:"headline_tests"`
	Rows          []DiffRow `json:"rows"`
	Regressions   int       `json:"regressions"`
	Improvements  int       `json:"improvements"`
	// RunsNeeded is, when the runs are too few, how many a side needs.
	RunsNeeded int `json:"runs_needed,omitempty"`
}

// Overall verdicts of a diff.
const (
	VerdictRegression = "REGRESSION"
	VerdictOK         = "OK"
	VerdictTooFew     = "~"
)

// ErrUnusable is wrapped when a side of a diff has nothing to compare.
var ErrUnusable = errors.New("unusable input")

// side is one side's samples: for every metric, the values of each run
// that has it (one for a cold metric, one per warm request for a warm one).
type side struct {
	runs   int
	failed int // runs left out: they did not complete their cold sequence
	vals   map[string][][]float64
}

// Diff compares sessions. Every cold run of every session of a side is one
// sample (a session file may hold several runs; several files are pooled),
// tested with Mann–Whitney and estimated with Hodges–Lehmann; docs/DIFF.md
// has the rules.
func Diff(base, new []*Session, opts DiffOptions) (DiffResult, error) {
	opts = opts.withDefaults()
	res := DiffResult{Alpha: opts.Alpha, Threshold: opts.Threshold, MinDeltaMS: stat.MS(opts.MinDelta)}
	for _, s := range base {
		res.Base = append(res.Base, s.Path)
	}
	for _, s := range new {
		res.New = append(res.New, s.Path)
	}
	bs, ns := collectSide(base), collectSide(new)
	res.BaseRuns, res.NewRuns = bs.runs, ns.runs
	res.BaseFailed, res.NewFailed = bs.failed, ns.failed
	if bs.runs == 0 {
		return res, fmt.Errorf("%w: the base sessions contain no complete run to compare%s", ErrUnusable, failedPhrase(bs.failed))
	}
	if ns.runs == 0 {
		return res, fmt.Errorf("%w: the new sessions contain no complete run to compare%s", ErrUnusable, failedPhrase(ns.failed))
	}
	res.Rows = buildRows(bs, ns)
	judgeRows(&res, opts)
	var facts *[2]sideEvidence // diagnosed once, when a row needs it
	for i := range res.Rows {
		r := &res.Rows[i]
		if r.Verdict == DiffRegression || r.Verdict == DiffSlower && explainsLoading(r.Metric) {
			if facts == nil {
				facts = &[2]sideEvidence{sideFacts(base), sideFacts(new)}
			}
			r.Why = explainRegression(r.Metric, facts[0], facts[1])
		}
	}
	summarizeDiff(&res)
	return res, nil
}

// collectSide gathers every metric of every run of the sessions.
func collectSide(ss []*Session) side {
	sd := side{vals: map[string][][]float64{}}
	for _, s := range ss {
		for _, run := range s.Runs() {
			if run.Failed != "" {
				// Its numbers stop where it failed: a sample of
				// nothing in particular.
				sd.failed++
				continue
			}
			sd.runs++
			for k, v := range runMetrics(run) {
				sd.vals[k] = append(sd.vals[k], v)
			}
		}
	}
	return sd
}

// runMetrics is every metric value of one run.
func runMetrics(run Run) map[string][]float64 {
	m := map[string][]float64{}
	add := func(k string, v float64) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			m[k] = append(m[k], v)
		}
	}
	if run.ColdEndKind != ColdEndNone {
		add("cold_total/"+run.ColdEndKind, stat.MS(run.ColdTotal()))
	}
	// The engine's own split of its upload: a cold page cache shows up as
	// read wait.
	ls := splitLoad(run.Spans)
	if ls.readWaitMS >= 0 {
		add(metricUploadReadWait, ls.readWaitMS)
	}
	if ls.copyWaitMS >= 0 {
		add(metricUploadCopyWait, ls.copyWaitMS)
	}
	for _, st := range run.Attribution.Stages {
		k := "stage/" + string(st.Name)
		if st.Name == trace.StagePageCache && ls.deferred {
			k = metricResidencyCheck
		}
		add(k, stat.MS(st.Duration))
	}
	if len(run.Attribution.Stages) > 0 {
		add(metricUnattributed, stat.MS(run.Attribution.Unattributed))
	}
	rs := SummarizeRequests(run.Requests)
	if rs.Cold != nil {
		add("cold_ttft", rs.Cold.TTFT)
		add("cold_e2e", rs.Cold.E2E)
	}
	for _, row := range rs.Rows {
		if row.Phase != trace.PhaseWarm || row.Error != "" {
			continue
		}
		add("warm_ttft", row.TTFT)
		if row.TTFB > 0 {
			add("warm_ttfb", row.TTFB)
		}
		if row.ITLP50 > 0 {
			add("warm_itl_p50", row.ITLP50)
		}
		if row.TPOT > 0 {
			add("warm_tpot", row.TPOT)
		}
		add("warm_e2e", row.E2E)
	}
	return m
}

// buildRows makes one row per metric seen on either side, headline first,
// then the secondary request metrics, then the stages in taxonomy order
// (a stage's parts right after it, unattributed last).
func buildRows(bs, ns side) []DiffRow {
	names := map[string]bool{}
	for k := range bs.vals {
		names[k] = true
	}
	for k := range ns.vals {
		names[k] = true
	}
	var rows []DiffRow
	for _, mi := range metricInfo {
		if names[mi.key] {
			rows = append(rows, newRow(mi.key, mi.label, mi.role, mi.perToken, bs, ns))
			delete(names, mi.key)
		}
	}
	var stages []string
	for k := range names {
		stages = append(stages, k)
	}
	sort.Slice(stages, func(i, j int) bool {
		oi, oj := stageOrder(stages[i]), stageOrder(stages[j])
		return oi < oj || oi == oj && stages[i] < stages[j]
	})
	for _, k := range stages {
		rows = append(rows, newRow(k, strings.TrimPrefix(k, "stage/"), RoleStage, false, bs, ns))
	}
	return rows
}

func newRow(key, label, role string, perToken bool, bs, ns side) DiffRow {
	r := DiffRow{Metric: key, Label: label, Role: role, perToken: perToken}
	var all []float64
	for _, v := range bs.vals[key] {
		all = append(all, v...)
		r.baseRun = append(r.baseRun, median(v))
	}
	r.Base = stat.Summarize(all)
	all = nil
	for _, v := range ns.vals[key] {
		all = append(all, v...)
		r.newRun = append(r.newRun, median(v))
	}
	r.New = stat.Summarize(all)
	r.BaseRuns, r.NewRuns = len(r.baseRun), len(r.newRun)
	return r
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return stat.Percentile(s, 50)
}

// stageOrder sorts stages in taxonomy order, a stage's parts
// (".read_wait") right after it and unattributed last.
func stageOrder(k string) int {
	name, _, _ := strings.Cut(strings.TrimPrefix(k, "stage/"), ".")
	if trace.Stage(name) == trace.StageUnattributed {
		return 1 << 20
	}
	return trace.Stage(name).Order()
}

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
	case r.Metric == metricResidencyCheck:
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

// explainsLoading reports whether the residency evidence speaks to a
// metric: the cold start as a whole, and the stages that load weights.
func explainsLoading(metric string) bool {
	return metric == "stage/"+string(trace.StagePageCache) || strings.HasPrefix(metric, "stage/"+string(trace.StageDecoderTensorUpload)) ||
		metric == "stage/"+string(trace.StageModelLoad) || strings.HasPrefix(metric, "cold_")
}

// explainRegression says in words what the diagnosis saw differently on the
// two sides: the page-cache state for loading metrics, the dominant term
// otherwise.
func explainRegression(metric string, base, new sideEvidence) string {
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
		return r.Verdict == DiffRegression && strings.HasPrefix(r.Metric, "cold_total/")
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
	if strings.HasPrefix(r.Metric, "cold_total/") {
		s += ": " + explainByStages(r, rows)
	}
	if r.Why != "" {
		s += " — " + r.Why
	}
	return s
}

// explainByStages names the stages that moved the same way as a cold-start
// regression, each with its share of the shift. A stage's parts
// (read_wait) are inside it and not counted again.
func explainByStages(head DiffRow, rows []DiffRow) string {
	var parts []string
	for _, r := range sortedByShift(rows) {
		if r.Role != RoleStage || r.Verdict != DiffSlower || strings.Contains(strings.TrimPrefix(r.Metric, "stage/"), ".") {
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
