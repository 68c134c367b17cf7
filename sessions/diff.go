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

// Check refuses levels and bounds out of range (flag names as the CLI
// spells them): Diff would take a zero for the default, not for "none".
func (o DiffOptions) Check() error {
	if o.Alpha <= 0 || o.Alpha >= 0.5 {
		return fmt.Errorf("--alpha %v is out of range: give a level such as 0.05", o.Alpha)
	}
	if o.Threshold <= 0 || o.Threshold > 10 {
		return fmt.Errorf("--threshold %v is out of range: give a fraction such as 0.1 for 10%% (0.001 for almost none)", o.Threshold)
	}
	if o.MinDelta <= 0 {
		return fmt.Errorf("--min-delta %v: give a positive duration such as 5ms (1us for almost none)", o.MinDelta)
	}
	return nil
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
	// BaseOmitted and NewOmitted count the runs a digest did not read
	// (OpenDigest: a file of more than 100 runs keeps its first ones and
	// its last in detail); they are not samples.
	BaseOmitted int `json:"base_omitted,omitempty"`
	NewOmitted  int `json:"new_omitted,omitempty"`
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
	runs    int // cold starts; a wake is a sample of its own metrics only
	failed  int // runs left out: they did not complete their cold sequence
	omitted int // runs a digest did not read
	vals    map[string][][]float64
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
	res.BaseOmitted, res.NewOmitted = bs.omitted, ns.omitted
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
		if s.Digest != nil {
			sd.omitted += s.Digest.Omitted
		}
		for _, run := range s.Runs() {
			if run.Failed != "" {
				// Its numbers stop where it failed: a sample of
				// nothing in particular.
				sd.failed++
				continue
			}
			if run.Wake == nil {
				sd.runs++
			}
			// A wake's metrics are its own (Wake.metricPrefix): a wake
			// and a cold start are different things to compare.
			w := run.Wake.metricPrefix()
			for k, v := range runMetrics(run) {
				sd.vals[w+k] = append(sd.vals[w+k], v)
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

// buildRows makes one row per metric seen on either side: the cold start's
// rows, headline first, then the secondary request metrics, then the
// stages in taxonomy order (a stage's parts right after it, unattributed
// last); then each wake level's rows in the same order.
func buildRows(bs, ns side) []DiffRow {
	groups := map[string]map[string]bool{} // wake prefix → unprefixed names
	for _, vals := range []map[string][][]float64{bs.vals, ns.vals} {
		for k := range vals {
			w, rest := splitWake(k)
			if groups[w] == nil {
				groups[w] = map[string]bool{}
			}
			groups[w][rest] = true
		}
	}
	prefixes := make([]string, 0, len(groups))
	for w := range groups {
		prefixes = append(prefixes, w)
	}
	slices.Sort(prefixes) // "" (the cold start) first, then wake_l1/, wake_l2/
	var rows []DiffRow
	for _, w := range prefixes {
		names := groups[w]
		for _, mi := range metricInfo {
			if names[mi.key] {
				rows = append(rows, newRow(w, mi.key, mi.label, wakeRole(w, mi.key, mi.role), mi.perToken, bs, ns))
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
			rows = append(rows, newRow(w, k, strings.TrimPrefix(k, "stage/"), RoleStage, false, bs, ns))
		}
	}
	return rows
}

// splitWake splits a metric into its wake prefix ("wake_l1/", or "" for
// the cold start's) and the metric.
func splitWake(metric string) (prefix, rest string) {
	if !strings.HasPrefix(metric, "wake_l") {
		return "", metric
	}
	if i := strings.IndexByte(metric, '/'); i >= 0 {
		return metric[:i+1], metric[i+1:]
	}
	return "", metric
}

// withoutWake is the metric without its wake prefix.
func withoutWake(metric string) string {
	_, m := splitWake(metric)
	return m
}

// wakeRole is a metric's role within a wake: the wake to its first token
// is a headline metric (what scale to zero costs a user); the wake's
// requests explain it, as secondary rows.
func wakeRole(prefix, key, role string) string {
	if prefix == "" || role != RoleHeadline || strings.HasPrefix(key, "cold_total/") {
		return role
	}
	return RoleSecondary
}

// wakeLabel is "wake L1 first token" for a wake's "cold first token".
func wakeLabel(prefix, label string) string {
	if prefix == "" {
		return label
	}
	lvl := strings.TrimSuffix(strings.TrimPrefix(prefix, "wake_l"), "/")
	return "wake L" + lvl + " " + strings.TrimPrefix(label, "cold ")
}

func newRow(prefix, key, label, role string, perToken bool, bs, ns side) DiffRow {
	key = prefix + key
	r := DiffRow{Metric: key, Label: wakeLabel(prefix, label), Role: role, perToken: perToken}
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
