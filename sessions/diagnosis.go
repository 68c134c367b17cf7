package sessions

import (
	"fmt"
	"sort"
	"strings"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// Verdict is the outcome for one hypothesis of the diagnosis table.
type Verdict string

// Verdicts, from strongest to weakest.
const (
	VerdictDominant     Verdict = "dominant"              // this term explains the largest share of the cold start
	VerdictContributes  Verdict = "contributes"           // a real but smaller term
	VerdictRuledOut     Verdict = "ruled out"             // the evidence says no
	VerdictInsufficient Verdict = "insufficient evidence" // a probe is missing; Missing says which
)

// Thresholds of the decision table. Each is a signal of a hypothesis
// turned into a number (docs/ARCHITECTURE.md, "Diagnosis"); the comment
// says why the number is where it is.
const (
	// ColdResidency: below this fraction of the weight bytes resident in the
	// page cache before launch, the weights must come from storage (signal
	// A: "weight files not resident before start"). Half, because a
	// partially warm cache still makes storage reads a large term.
	ColdResidency = 0.5
	// WarmResidency: at or above this fraction before launch the page
	// cache is warm (signal B: "page cache warm"); 90% rather than 100%
	// because readahead and small files (config, tokenizer) leave a few
	// pages out even right after a full read.
	WarmResidency = 0.9
	// IOReadMatchesWeights: bytes the target read during the cold window
	// at or above this fraction of the weight bytes count as "IO read ≈
	// weight bytes" (signal A), when residency was not sampled.
	IOReadMatchesWeights = 0.5
	// DominantShare: a term must cover at least this share of the cold
	// total to be called dominant; below it the cold start has no single
	// dominant term and the verdict is at most "contributes".
	DominantShare = 0.25
	// ContributesShare: terms below this share of the cold total are ruled
	// out — a 10% term is inside the run-to-run spread of most servers.
	ContributesShare = 0.10
	// FirstRequestMemJump: a memory jump during the cold request of at
	// least this many bytes (GPU memory or RSS) is "first-time allocation"
	// (signal D); 64 MiB is above allocator noise and below any KV pool.
	FirstRequestMemJump = 64 << 20
	// WarmStableSpread: warm requests whose TTFT spread is at most this
	// fraction are "stable after 1–2 runs" (signal C); the warm
	// band for a healthy server is within ±10–20%.
	WarmStableSpread = 0.25
	// QueueingGrowth: TTFT at the highest observed concurrency at least
	// this many times TTFT at the lowest is queueing (signal F), when the
	// server's own prefill time did not grow the same way.
	QueueingGrowth = 2.0
)

// Evidence is one number behind a verdict, formatted for people.
type Evidence struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Hypothesis is one row of the decision table (docs/ARCHITECTURE.md,
// "Diagnosis").
type Hypothesis struct {
	Code  string `json:"code"` // A–F
	Title string `json:"title"`
	// Score is the term's share of the cold total (for F, of the warm
	// TTFT), used for ranking.
	Score float64 `json:"score"`
	// TermMS is the time this hypothesis accounts for, in milliseconds.
	TermMS   float64    `json:"term_ms"`
	Verdict  Verdict    `json:"verdict"`
	Evidence []Evidence `json:"evidence,omitempty"`
	// Missing names the probes whose absence keeps this undecided.
	Missing  []string `json:"missing,omitempty"`
	NextKnob string   `json:"next_knob,omitempty"`
}

// Diagnosis is the ranked decision table for one cold run, with the
// decomposition (docs/ARCHITECTURE.md, "Diagnosis").
type Diagnosis struct {
	Run        int          `json:"run"`
	Hypotheses []Hypothesis `json:"hypotheses"` // ranked, strongest first
	// Dominant is the code of the dominant hypothesis, "" when undecided.
	Dominant string `json:"dominant,omitempty"`
	// ColdTotalMS is the cold window; ColdPenalty is cold_1 ÷ warm median
	// TTFT; WarmBand is the warm median ± spread.
	ColdTotalMS float64 `json:"cold_total_ms"`
	ColdPenalty float64 `json:"cold_penalty,omitempty"`
	WarmBand    string  `json:"warm_band,omitempty"`
	// Engine is the kind of target the next knobs were chosen for, and
	// Device what it computes on ("" while the session has not said).
	Engine Engine `json:"engine,omitempty"`
	Device Device `json:"device,omitempty"`
	// Summary is one line for headers, reports and diffs.
	Summary string `json:"summary"`
	// Failed is set for a run that failed before it became healthy: its
	// cold window is partial, so no hypothesis is ranked, and what is
	// known of the failure is kept instead: the run's error, the target's
	// exit code or signal when it exited on its own, and its last output.
	Failed   string   `json:"failed,omitempty"`
	ExitCode *int     `json:"exit_code,omitempty"`
	Signal   string   `json:"signal,omitempty"`
	LogTail  []string `json:"log_tail,omitempty"`
	// Facts are the measured inputs, reused by diff to explain changes.
	Facts RunFacts `json:"facts"`
}

// Hypothesis returns the row with the given code.
func (d Diagnosis) Hypothesis(code string) (Hypothesis, bool) {
	for _, h := range d.Hypotheses {
		if h.Code == code {
			return h, true
		}
	}
	return Hypothesis{}, false
}

// RunFacts are the probe readings the decision table uses. Fractions and
// byte counts are −1 when the probe was missing.
type RunFacts struct {
	WeightBytes float64 `json:"weight_bytes"`
	// ResidentBefore / ResidentAfter: fraction of the weight bytes in the
	// page cache at launch and at the end of the cold window.
	ResidentBefore float64 `json:"resident_before"`
	ResidentAfter  float64 `json:"resident_after"`
	// Evicted is true when treni-top evicted the weights before launch.
	Evicted bool `json:"evicted,omitempty"`
	// IOReadBytes the target's tree read during the cold window.
	IOReadBytes float64 `json:"io_read_bytes"`
	// CachedRise is the growth of the system's page cache in the window.
	CachedRise float64 `json:"cached_rise_bytes"`
	// GPUMemRise is GPU memory growth over the cold window, GPUMemFirstReq
	// during the cold request, RSSFirstReq the RSS growth during it.
	GPUMemRise     float64 `json:"gpu_mem_rise_bytes"`
	GPUMemFirstReq float64 `json:"gpu_mem_first_request_bytes"`
	RSSFirstReq    float64 `json:"rss_first_request_bytes"`
	PCIeRXMax      float64 `json:"pcie_rx_max_bytes_per_s"`
	HaveGPU        bool    `json:"have_gpu"`
	// UntimedLog is true for an imported log none of whose lines carried a
	// timestamp.
	UntimedLog bool `json:"untimed_log,omitempty"`
	// Imported is true for a session imported from a server log: nothing
	// was sampled, and the device is what the log states (LogDevice, the
	// platform it names; LogGPU: it names a GPU), not this machine.
	Imported  bool   `json:"imported,omitempty"`
	LogDevice string `json:"log_device,omitempty"`
	LogGPU    bool   `json:"log_gpu,omitempty"`
	// ServerTTFTMeanMS is the server's own mean TTFT over the run's
	// requests (its /metrics histogram), over ServerTTFTCount first tokens;
	// ServerQueueMeanMS its mean queue time. Zero when not scraped.
	ServerTTFTMeanMS  float64 `json:"server_ttft_mean_ms,omitempty"`
	ServerTTFTCount   float64 `json:"server_ttft_count,omitempty"`
	ServerQueueMeanMS float64 `json:"server_queue_mean_ms,omitempty"`
}

// Diagnose evaluates the decision table on the last cold run of events.
func Diagnose(events []trace.Event) Diagnosis {
	runs := Analyze(events)
	for len(runs) > 0 && runs[len(runs)-1].NeverLaunched() {
		// A run that failed before its launch has nothing to diagnose.
		runs = runs[:len(runs)-1]
	}
	if len(runs) == 0 {
		d := Diagnosis{Summary: "insufficient evidence: no cold run recorded yet"}
		for _, r := range rules() {
			d.Hypotheses = append(d.Hypotheses, Hypothesis{Code: r.code, Title: r.titleFor(DeviceUnknown), Verdict: VerdictInsufficient, Missing: []string{"a cold run"}})
		}
		return d
	}
	return DiagnoseRun(events, runs[len(runs)-1])
}

// DiagnoseRun evaluates the decision table for one run: the facts are
// gathered once, every rule turns them into its row (term, evidence,
// missing probes), the next knob is chosen for the target's kind, and a
// separate ranking step gives the verdicts.
func DiagnoseRun(events []trace.Event, run Run) Diagnosis {
	x := gatherFacts(events, run)
	d := Diagnosis{Run: run.Index, ColdTotalMS: stat.MS(run.ColdTotal()), Facts: x.RunFacts, Engine: x.engine.Engine, Device: x.engine.Device}
	d.ColdPenalty = x.reqs.ColdPenalty
	if x.reqs.WarmTTFT.N > 0 {
		d.WarmBand = fmt.Sprintf("%s ms ± %.0f%%", stat.FormatMS(x.reqs.WarmTTFT.Median), 100*x.reqs.WarmTTFT.Spread)
	}
	rs := rules()
	rows := make([]*Hypothesis, len(rs))
	for i, r := range rs {
		h := &Hypothesis{Code: r.code, Title: r.titleFor(x.engine.Device)}
		r.eval(x, h)
		h.NextKnob = nextKnob(r.code, x.engine)
		rows[i] = h
	}
	if failedBeforeHealthy(run) {
		diagnoseFailure(&d, rows, events, run)
		return d
	}
	rank(&d, rs, rows, x)
	d.Summary = summarize(d, run)
	return d
}

// failedBeforeHealthy reports a run that ended before its target became
// healthy: it failed (run_failed), or its target exited on its own and
// the failure is about to be reported.
func failedBeforeHealthy(run Run) bool {
	return run.Healthy == 0 && (run.Failed != "" || run.Crashed)
}

// failureTailLines is how many of the target's last output lines the
// diagnosis of a failed run quotes.
const failureTailLines = 5

// diagnoseFailure is the diagnosis of a run that failed before it was
// healthy. Its cold window stops where the failure did, so shares of it
// would rank a cause of a start that never finished (a shell that exits
// at once would be "E dominant"): every row stays undecided with the
// failure as what is missing and no knob, and the summary says what is
// known instead: the error, the exit code or signal, the last output.
func diagnoseFailure(d *Diagnosis, rows []*Hypothesis, events []trace.Event, run Run) {
	d.Failed = run.Failed
	if d.Failed == "" {
		d.Failed = "the target exited before it became healthy"
	}
	if run.Crashed && run.Exit != nil {
		if run.Exit.Signal != "" {
			d.Signal = run.Exit.Signal
		} else {
			code := run.Exit.ExitCode
			d.ExitCode = &code
		}
	}
	d.LogTail = logTail(events, run.Index, failureTailLines)
	missing := "a start that reached healthy (this run failed before it; fix the failure and run again)"
	for _, h := range rows {
		h.Verdict, h.Score, h.NextKnob = VerdictInsufficient, 0, ""
		h.Missing = []string{missing}
		d.Hypotheses = append(d.Hypotheses, *h)
	}
	when := "before it became healthy"
	if run.Wake != nil {
		// A wake has no health to reach: its window ends at the first
		// token after it.
		when = "before its first token after the " + run.Wake.String()
	}
	parts := []string{fmt.Sprintf("run %d failed %s: %s", run.Index, when, d.Failed)}
	switch {
	case d.ExitCode != nil:
		parts = append(parts, fmt.Sprintf("exit code %d", *d.ExitCode))
	case d.Signal != "":
		parts = append(parts, "killed by "+d.Signal)
	}
	if len(d.LogTail) > 0 {
		parts = append(parts, "last output: "+strings.Join(d.LogTail, " | "))
	}
	parts = append(parts, fmt.Sprintf("no cause is ranked on its partial cold window (%s)", stat.FormatDuration(run.ColdTotal())))
	d.Summary = strings.Join(parts, "; ")
}

// logTail is the target's last n non-blank output lines in run.
func logTail(events []trace.Event, run, n int) []string {
	var out []string
	for _, e := range events {
		if e.Run == run && e.Kind == trace.KindLog && e.Log != nil {
			if l := strings.TrimSpace(e.Log.Text); l != "" {
				out = append(out, l)
			}
		}
	}
	return out[max(len(out)-n, 0):]
}

// rank turns the cold rules' terms into shares of the cold total and
// verdicts (the largest share at or above DominantShare is dominant, unless
// more of the cold start is unexplained or undecided than it explains),
// then orders every row: dominant, contributes, insufficient, ruled out,
// larger score first.
func rank(d *Diagnosis, rs []rule, rows []*Hypothesis, x *facts) {
	var cold []*Hypothesis
	for i, r := range rs {
		if r.cold {
			cold = append(cold, rows[i])
		}
	}
	total := x.run.ColdTotal()
	for _, h := range cold {
		if total > 0 {
			h.Score = h.TermMS / stat.MS(total)
		}
		if h.TermMS > 0 {
			h.Evidence = append([]Evidence{{"term", fmt.Sprintf("%s ms = %s of cold", stat.FormatMS(h.TermMS), pct(h.Score))}}, h.Evidence...)
		}
	}
	d.Dominant = giveVerdicts(cold, candidate(cold, x))
	if x.UntimedLog {
		// Durations placed by line count are not evidence of time spent.
		d.Dominant = insufficient(cold, "timestamps in the log (without them its stages have an order but no durations)")
	}
	if total <= 0 {
		d.Dominant = insufficient(cold, "a cold window (stages or a cold request)")
	}
	for _, h := range rows {
		d.Hypotheses = append(d.Hypotheses, *h)
	}
	order := map[Verdict]int{VerdictDominant: 0, VerdictContributes: 1, VerdictInsufficient: 2, VerdictRuledOut: 3}
	sort.SliceStable(d.Hypotheses, func(i, j int) bool {
		hi, hj := d.Hypotheses[i], d.Hypotheses[j]
		if order[hi.Verdict] != order[hj.Verdict] {
			return order[hi.Verdict] < order[hj.Verdict]
		}
		return hi.Score > hj.Score
	})
}

// candidate is the cold row with the largest share, or nil when it may
// not be called dominant: more of the cold start is covered by no stage
// than it explains, or the loading term is larger but undecided (A or B,
// residency unknown). Either reason is added to the rows' evidence.
func candidate(cold []*Hypothesis, x *facts) *Hypothesis {
	var best *Hypothesis
	for _, h := range cold {
		if best == nil || h.Score > best.Score {
			best = h
		}
	}
	if best == nil {
		return nil
	}
	total := x.run.ColdTotal()
	undecided := 0.0
	if !x.coldCache && !x.warmCache && total > 0 {
		undecided = float64(x.loadTerm+x.uploadTerm) / float64(total)
	}
	if un := x.run.Attribution.UnattributedShare(); un > best.Score && (undecided == 0 || un > undecided) {
		note := fmt.Sprintf("%.0f%% of the cold start is covered by no stage", 100*un)
		for _, h := range cold {
			h.Evidence = append(h.Evidence, Evidence{"unattributed", note})
		}
		return nil
	}
	if undecided > best.Score {
		note := fmt.Sprintf("loading is the largest term (%.0f%% of cold) but where the weights came from is unknown", 100*undecided)
		for _, h := range cold {
			if h.Code == "A" || h.Code == "B" {
				h.Evidence = append(h.Evidence, Evidence{"undecided", note})
			}
		}
		return nil
	}
	return best
}

// giveVerdicts sets the cold rows' verdicts from their shares and returns
// the dominant row's code ("" when none).
func giveVerdicts(cold []*Hypothesis, best *Hypothesis) (dominant string) {
	for _, h := range cold {
		switch {
		case len(h.Missing) > 0 && h.TermMS == 0:
			h.Verdict = VerdictInsufficient
		case best != nil && h == best && h.Score >= DominantShare:
			h.Verdict = VerdictDominant
			dominant = h.Code
		case h.Score >= ContributesShare:
			h.Verdict = VerdictContributes
		default:
			h.Verdict = VerdictRuledOut
		}
	}
	return dominant
}

// insufficient marks every cold row undecided for want of what and returns
// the (empty) dominant code.
func insufficient(cold []*Hypothesis, what string) string {
	for _, h := range cold {
		h.Verdict = VerdictInsufficient
		h.Missing = append(h.Missing, what)
	}
	return ""
}

// pct renders a fraction as a whole percentage.
func pct(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

// gb renders bytes in decimal gigabytes, as the evidence rows do.
func gb(b float64) string { return fmt.Sprintf("%.2f GB", b/1e9) }

// summarize writes the one-line conclusion.
func summarize(d Diagnosis, run Run) string {
	var parts []string
	if d.Dominant != "" {
		h, _ := d.Hypothesis(d.Dominant)
		parts = append(parts, fmt.Sprintf("%s: %s (%s of %s cold)", h.Code, h.Title, fmt.Sprintf("%.0f%%", 100*h.Score), stat.FormatDuration(run.ColdTotal())))
	} else {
		parts = append(parts, "no single dominant cold term")
		// Only the cold rows decide the cold start: F's want of a bench
		// is not why no cold term is dominant.
		cold := map[string]bool{}
		for _, r := range rules() {
			cold[r.code] = r.cold
		}
		var missing []string
		var largest *Hypothesis
		for i, h := range d.Hypotheses {
			if !cold[h.Code] {
				continue
			}
			missing = append(missing, h.Missing...)
			if largest == nil || h.Score > largest.Score {
				largest = &d.Hypotheses[i]
			}
		}
		switch {
		case len(missing) > 0:
			parts[0] = "insufficient evidence: missing " + strings.Join(dedupe(missing), "; ")
		case largest != nil && largest.Score > 0 && largest.Score < DominantShare:
			parts[0] = fmt.Sprintf("no single dominant cold term: none reaches %.0f%% of the cold start (the largest, %s %s, is %.0f%%)",
				100*DominantShare, largest.Code, strings.TrimSuffix(largest.Title, " dominated"), 100*largest.Score)
		}
	}
	if d.ColdPenalty > 0 {
		parts = append(parts, fmt.Sprintf("cold penalty %.1f×", d.ColdPenalty))
	}
	if d.WarmBand != "" {
		parts = append(parts, "warm "+d.WarmBand)
	}
	if d.Dominant != "" {
		h, _ := d.Hypothesis(d.Dominant)
		parts = append(parts, "next: "+h.NextKnob)
	}
	return strings.Join(parts, "; ")
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
