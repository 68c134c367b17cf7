package sessions

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// Report is what `treni-top report` prints: per run, the stage table and
// the cold/warm request decomposition, then the diagnosis.
type Report struct {
	Header    Header      `json:"header"`
	Runs      []RunReport `json:"runs"`
	Bench     []BenchRun  `json:"bench,omitempty"`
	Diagnosis Diagnosis   `json:"diagnosis"`
	// Truncated: the file ends inside a line; Unfinished: it lacks the
	// clean end its recorder writes on close. Either way the session may
	// miss its last events.
	Truncated  bool `json:"truncated,omitempty"`
	Unfinished bool `json:"unfinished,omitempty"`
	// RunsTotal is how many runs the session holds; RunsOmitted the ones
	// a digest left out of Runs (a log with many restarts); ColdTotals
	// summarises every launched run's cold window, omitted ones included.
	RunsTotal   int   `json:"runs_total"`
	RunsOmitted int   `json:"runs_omitted,omitempty"`
	ColdTotals  Stats `json:"cold_total_ms"`
	// Interrupted is the cause when a signal ended the live session early
	// (trace.MarkerInterrupted).
	Interrupted string `json:"interrupted,omitempty"`
	// DroppedEvents counts events a digest did not keep (more than it
	// keeps of one run).
	DroppedEvents int `json:"dropped_events,omitempty"`
}

// RunReport is one cold run in a report. Times are milliseconds; stage
// starts are relative to the run's start.
type RunReport struct {
	Index       int     `json:"index"`
	ColdTotalMS float64 `json:"cold_total_ms"`
	// ColdEnd says what closed the cold window (first_token, healthy, …).
	ColdEnd         string           `json:"cold_end"`
	HealthyMS       float64          `json:"healthy_ms,omitempty"`
	Stages          []StageRow       `json:"stages"`
	UnattributedMS  float64          `json:"unattributed_ms"`
	UnattributedPct float64          `json:"unattributed_share"`
	Dominant        trace.Stage      `json:"dominant,omitempty"`
	CriticalPath    []trace.PathStep `json:"critical_path,omitempty"`
	Requests        RequestSummary   `json:"requests"`
	Crashed         bool             `json:"crashed,omitempty"`
	ExitCode        int              `json:"exit_code,omitempty"`
	// Failed is why the run did not complete (Run.Failed).
	Failed string `json:"failed,omitempty"`
	// Wake is set for a wake of a sleeping target (Run.Wake).
	Wake *Wake `json:"wake,omitempty"`
	// Untimed: the run comes from a log none of whose lines carried a
	// timestamp; its stages have an order but no durations (but the ones
	// the server stated), and its cold window is unknown.
	Untimed bool `json:"untimed,omitempty"`
	// DroppedSpans counts spans beyond the analysis' bound that were not
	// kept (Run.DroppedSpans).
	DroppedSpans int `json:"dropped_spans,omitempty"`
}

// StageRow is one stage in a report.
type StageRow struct {
	Name        trace.Stage   `json:"name"`
	StartMS     float64       `json:"start_ms"`
	DurationMS  float64       `json:"duration_ms"`
	Share       float64       `json:"share"`
	ExclusiveMS float64       `json:"exclusive_ms"`
	Overlaps    []trace.Stage `json:"overlaps,omitempty"`
	Workers     int           `json:"workers,omitempty"`
	Attrs       trace.Attrs   `json:"attrs,omitempty"`
	// AfterWindow: the stage lies after the cold window (a listener
	// logged after the server said it was ready); DurationMS is its own
	// length, and it counts toward no share.
	AfterWindow bool `json:"after_window,omitempty"`
}

// BuildReport computes the report of a session.
func BuildReport(s *Session) Report {
	r := Report{Header: s.Header, Diagnosis: Diagnose(s.Events), Truncated: s.Truncated, Unfinished: s.Unfinished, Bench: BenchRuns(s.Events)}
	untimed := untimedRuns(s.Events)
	runs := s.Runs()
	var cold []float64
	for _, run := range runs {
		rr := buildRunReport(run)
		if untimed[run.Index] {
			untimeRun(&rr, run)
		}
		r.Runs = append(r.Runs, rr)
		if run.ColdEndKind != ColdEndNone && !rr.Untimed {
			cold = append(cold, stat.MS(run.ColdTotal()))
		}
	}
	for _, e := range s.Events {
		if e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerInterrupted {
			r.Interrupted, _ = e.Marker.Attrs.String("cause")
			if r.Interrupted == "" {
				r.Interrupted = "a signal"
			}
		}
	}
	r.RunsTotal = len(runs)
	if d := s.Digest; d != nil {
		r.RunsTotal, r.RunsOmitted, r.DroppedEvents = d.Runs, d.Omitted, d.Dropped
		if d.Omitted > 0 {
			cold = cold[:0]
			for _, c := range d.ColdTotals {
				cold = append(cold, stat.MS(c))
			}
		}
	}
	r.ColdTotals = stat.Summarize(cold)
	return r
}

// untimeRun turns a run of a log without timestamps into what it can
// say: its stages in the order the log named them (all sit at offset
// zero), no dominant stage and no critical path.
func untimeRun(rr *RunReport, run Run) {
	rr.Untimed = true
	rr.Dominant, rr.CriticalPath = "", nil
	first := map[trace.Stage]int{}
	for i, sp := range run.Spans {
		if _, ok := first[sp.Name]; !ok {
			first[sp.Name] = i
		}
	}
	sort.SliceStable(rr.Stages, func(i, j int) bool { return first[rr.Stages[i].Name] < first[rr.Stages[j].Name] })
}

// untimedRuns are the runs of an imported log none of whose lines carried
// a timestamp (its trace.MarkerLogClock says so).
func untimedRuns(events []trace.Event) map[int]bool {
	out := map[int]bool{}
	for _, e := range events {
		if e.Kind == trace.KindMarker && e.Marker != nil && e.Marker.Name == trace.MarkerLogClock {
			if n, ok := e.Marker.Attrs.Float("timed_lines"); ok && n == 0 {
				out[e.Run] = true
			}
		}
	}
	return out
}

func buildRunReport(run Run) RunReport {
	a := run.Attribution
	rr := RunReport{
		Index: run.Index, ColdTotalMS: stat.MS(run.ColdTotal()), ColdEnd: run.ColdEndKind,
		UnattributedMS: stat.MS(a.Unattributed), UnattributedPct: a.UnattributedShare(),
		Dominant: a.Dominant, CriticalPath: a.CriticalPath,
		Requests: SummarizeRequests(run.Requests), Crashed: run.Crashed, Failed: run.Failed, Wake: run.Wake, DroppedSpans: run.DroppedSpans,
	}
	if run.Healthy > 0 {
		rr.HealthyMS = stat.MS(run.Healthy - run.Start)
	}
	if run.Exit != nil {
		rr.ExitCode = run.Exit.ExitCode
	}
	workers := map[trace.Stage]int{}
	for _, sp := range run.Spans {
		if sp.Workers > workers[sp.Name] {
			workers[sp.Name] = sp.Workers
		}
	}
	inWindow := map[trace.Stage]bool{}
	for _, st := range a.Stages {
		inWindow[st.Name] = true
		rr.Stages = append(rr.Stages, StageRow{
			Name: st.Name, StartMS: stat.MS(st.Start - run.Start), DurationMS: stat.MS(st.Duration),
			Share: st.Share, ExclusiveMS: stat.MS(st.Exclusive), Overlaps: st.Overlaps,
			Workers: workers[st.Name], Attrs: st.Attrs,
		})
	}
	if run.ColdEndKind == ColdEndNone {
		return rr
	}
	// Stages the cold window does not reach still belong to the run: they
	// are listed after it, each with its own length.
	for _, sp := range run.Spans {
		if inWindow[sp.Name] || sp.Start < run.ColdEnd {
			continue
		}
		inWindow[sp.Name] = true
		rr.Stages = append(rr.Stages, StageRow{Name: sp.Name, StartMS: stat.MS(sp.Start - run.Start), DurationMS: stat.MS(sp.Duration()),
			Workers: workers[sp.Name], Attrs: sp.Attrs, AfterWindow: true})
	}
	return rr
}

// JSON renders the report for scripts.
func (r Report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode report: %w", err)
	}
	return append(b, '\n'), nil
}

// Markdown renders the report for people: the stage, request and diagnosis tables.
func (r Report) Markdown() string {
	var b strings.Builder
	h := r.Header
	fmt.Fprintf(&b, "# treni-top session report\n\n")
	fmt.Fprintf(&b, "- target: %s\n", h.Target.Describe())
	if h.Target.Model != "" && h.Target.Kind != TargetBuiltin {
		fmt.Fprintf(&b, "- model: %s\n", h.Target.Model)
	}
	if h.Target.ServerKind != "" {
		fmt.Fprintf(&b, "- server: %s\n", h.Target.ServerKind)
	}
	device := h.Target.Device
	if device == "" && len(h.GPUs) > 0 {
		device = h.GPUs[0].Name
	}
	if device != "" && h.Origin == nil {
		fmt.Fprintf(&b, "- device: %s\n", device)
	}
	if o := h.Origin; o != nil {
		writeOrigin(&b, *o)
	} else {
		fmt.Fprintf(&b, "- host: %s (%s/%s, %d CPUs)\n", h.Host.Hostname, h.Host.OS, h.Host.Arch, h.Host.CPUs)
	}
	if !h.Created.IsZero() {
		fmt.Fprintf(&b, "- recorded: %s by treni-top %s\n", h.Created.Format(time.RFC3339), h.ToolVersion)
	}
	var weights int64
	for _, f := range h.ModelFiles {
		weights += f.Bytes
	}
	if weights > 0 {
		fmt.Fprintf(&b, "- weights: %d files, %.2f GB\n", len(h.ModelFiles), float64(weights)/1e9)
	}
	for _, k := range []string{"timestamps", "rejected_timestamps", "rejected_values", "start", "runs"} {
		if v := h.Notes[k]; v != "" && h.Target.Kind == TargetImport {
			fmt.Fprintf(&b, "- note: %s\n", v)
		}
	}
	switch {
	case r.Truncated:
		fmt.Fprintf(&b, "- **truncated**: the file ends mid-line (the recorder was killed); everything before that line is included, what came after is missing\n")
	case r.Unfinished:
		fmt.Fprintf(&b, "- **truncated**: the file has no clean end (its recorder did not close it: killed, out of disk, or crashed); the last events may be missing\n")
	}
	if n := r.RunsOmitted; n > 0 {
		fmt.Fprintf(&b, "- runs: %d in the session; %d are detailed below (the first %d and the last), the other %d only count in the cold-start summary\n",
			r.RunsTotal, len(r.Runs), len(r.Runs)-1, n)
	}
	if r.DroppedEvents > 0 {
		fmt.Fprintf(&b, "- note: %d events were not analysed (more than %d in one run)\n", r.DroppedEvents, maxDigestRunEvents)
	}
	if r.ColdTotals.N > 1 {
		fmt.Fprintf(&b, "- cold start over %d runs: min %s, median %s, max %s\n", r.ColdTotals.N,
			stat.FormatDuration(msDur(r.ColdTotals.Min)), stat.FormatDuration(msDur(r.ColdTotals.Median)), stat.FormatDuration(msDur(r.ColdTotals.Max)))
	}
	if r.Interrupted != "" {
		fmt.Fprintf(&b, "- note: interrupted (%s) before the session ran to its end; what ran before is complete\n", r.Interrupted)
	}
	if len(r.Runs) == 0 {
		b.WriteString("\nNo runs recorded.\n")
	}
	for _, run := range r.Runs {
		writeRunMarkdown(&b, run, len(r.Runs) > 1)
	}
	writeBenchMarkdown(&b, r.Bench)
	b.WriteString("\n## Diagnosis\n\n")
	b.WriteString("| | hypothesis | verdict | evidence |\n|---|---|---|---|\n")
	for _, hy := range r.Diagnosis.Hypotheses {
		var ev []string
		for _, e := range hy.Evidence {
			ev = append(ev, e.Name+" "+e.Value)
		}
		if len(hy.Missing) > 0 {
			ev = append(ev, "missing: "+strings.Join(hy.Missing, ", "))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", hy.Code, hy.Title, hy.Verdict, strings.Join(ev, "; "))
	}
	if r.Diagnosis.Summary != "" {
		fmt.Fprintf(&b, "\n%s\n", r.Diagnosis.Summary)
	}
	return b.String()
}

func writeRunMarkdown(b *strings.Builder, run RunReport, numbered bool) {
	title := "Cold start"
	if numbered {
		title = fmt.Sprintf("Run %d: cold start", run.Index)
	}
	if run.ColdEnd == ColdEndNone && run.Failed != "" && len(run.Requests.Rows) == 0 {
		title = "Cold start"
		if numbered {
			title = fmt.Sprintf("Run %d", run.Index)
		}
		fmt.Fprintf(b, "\n## %s: nothing measured\n\n**This run failed before anything was measured: %s.**\n", title, run.Failed)
		return
	}
	if run.ColdEnd == ColdEndNone {
		if len(run.Requests.Rows) > 0 && run.Requests.Rows[0].Phase != trace.PhaseBench {
			fmt.Fprintf(b, "\n## Requests (no cold start: the server was already running)\n")
			writeRequestsMarkdown(b, run.Requests)
		}
		return
	}
	end := map[string]string{ColdEndFirstToken: "process start → first token", ColdEndHealthy: "process start → healthy", ColdEndLastStage: "process start → last stage"}[run.ColdEnd]
	if run.Wake != nil {
		// Not a process start: the wake's request, the same process.
		title = fmt.Sprintf("Run %d: %s", run.Index, run.Wake)
		end = strings.Replace(end, "process start", "wake", 1)
	}
	if run.Untimed {
		fmt.Fprintf(b, "\n## %s: unknown (the log carries no timestamps)\n\n", title)
		b.WriteString("The stages are listed in the order the log names them; a duration shows only where the server stated it (— : unknown).\n\n")
	} else {
		fmt.Fprintf(b, "\n## %s: %s (%s)\n\n", title, stat.FormatDuration(msDur(run.ColdTotalMS)), end)
	}
	if run.Crashed {
		fmt.Fprintf(b, "**The target crashed (exit code %d).**\n\n", run.ExitCode)
	}
	if run.Failed != "" {
		fmt.Fprintf(b, "**This run failed: %s.** Its numbers are partial.\n\n", run.Failed)
	}
	b.WriteString("| stage | start | duration | share | exclusive | overlaps |\n|---|--:|--:|--:|--:|---|\n")
	for _, s := range run.Stages {
		name := string(s.Name)
		if s.Name == run.Dominant {
			name = "**" + name + "**"
		}
		if s.Workers > 1 {
			name += fmt.Sprintf(" (×%d workers)", s.Workers)
		}
		var ov []string
		for _, o := range s.Overlaps {
			ov = append(ov, string(o))
		}
		if s.AfterWindow {
			fmt.Fprintf(b, "| %s (after the cold window) | %s | %s | | | |\n", name, stat.FormatMS(s.StartMS), stat.FormatMS(s.DurationMS))
			continue
		}
		share := fmt.Sprintf("%.1f%%", 100*s.Share)
		if run.Untimed {
			share = "—"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", name, stat.FormatMS(s.StartMS), stat.FormatMS(s.DurationMS), share, stat.FormatMS(s.ExclusiveMS), strings.Join(ov, ", "))
	}
	if run.DroppedSpans > 0 {
		fmt.Fprintf(b, "\n%d more spans of this run were not analysed (more than %d distinct spans in one run).\n", run.DroppedSpans, maxRunSpans)
	}
	if run.Untimed {
		writeRequestsMarkdown(b, run.Requests)
		return
	}
	un := string(trace.StageUnattributed)
	if run.Dominant == trace.StageUnattributed {
		un = "**" + un + "**"
	}
	fmt.Fprintf(b, "| %s | | %s | %.1f%% | | |\n", un, stat.FormatMS(run.UnattributedMS), 100*run.UnattributedPct)
	if len(run.CriticalPath) > 0 {
		var steps []string
		for _, st := range run.CriticalPath {
			steps = append(steps, fmt.Sprintf("%s %s", st.Name, stat.FormatMS(stat.MS(st.End-st.Start))))
		}
		fmt.Fprintf(b, "\nCritical path: %s\n", strings.Join(steps, " → "))
	}
	writeRequestsMarkdown(b, run.Requests)
}

// msDur converts milliseconds to a duration.
func msDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// writeOrigin renders where an imported log was written, as far as it
// says: never the importing machine.
func writeOrigin(b *strings.Builder, o Origin) {
	var parts []string
	if o.Version != "" {
		parts = append(parts, o.Server+" "+o.Version)
	}
	if o.Device != "" {
		parts = append(parts, "device "+o.Device)
	}
	if len(o.GPUs) > 0 {
		parts = append(parts, "GPU "+strings.Join(o.GPUs, ", "))
	}
	if o.TP > 1 {
		parts = append(parts, fmt.Sprintf("tensor parallel %d", o.TP))
	}
	if len(parts) == 0 {
		parts = append(parts, "the log states no device, GPU or version")
	}
	fmt.Fprintf(b, "- origin (as the log states): %s\n", strings.Join(parts, " · "))
	host := "unknown (the log does not say; not this machine)"
	if o.Host != "" {
		host = o.Host + " (from the " + o.Wrapper + " prefix)"
	}
	fmt.Fprintf(b, "- host: %s\n", host)
	if o.Source != "" {
		fmt.Fprintf(b, "- source: %s\n", o.Source)
	}
	if o.Wrapper != "" {
		fmt.Fprintf(b, "- collector: %s (its prefixes stripped)\n", o.Wrapper)
	}
	if o.Clock != "" {
		fmt.Fprintf(b, "- clock: %s\n", o.Clock)
	}
}

// writeRequestsMarkdown renders the request table, warm statistics and
// the cold penalty.
func writeRequestsMarkdown(b *strings.Builder, q RequestSummary) {
	var rows []RequestRow
	for _, r := range q.Rows {
		if r.Phase != trace.PhaseBench {
			rows = append(rows, r)
		}
	}
	q.Rows = rows
	if len(q.Rows) == 0 {
		return
	}
	b.WriteString("\n| run | TTFT ms | TTFB ms | ITL p50 | ITL p99 | TPOT ms | E2E ms | tokens | notes |\n|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, row := range q.Rows {
		note := ""
		switch {
		case row.Error != "":
			note = "error: " + row.Error
		case row.Phase == trace.PhaseWarmup:
			note = "warm-up, not counted"
		case row.Phase == trace.PhaseCold:
			note = "first request after healthy"
		}
		if row.MultiChunk > 0 {
			note = strings.TrimPrefix(note+fmt.Sprintf("; %d multi-token chunks", row.MultiChunk), "; ")
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", row.Label, stat.FormatMS(row.TTFT), stat.FormatMS(row.TTFB), stat.FormatMS(row.ITLP50), stat.FormatMS(row.ITLP99), stat.FormatMS(row.TPOT), stat.FormatMS(row.E2E), row.Tokens, note)
	}
	if q.WarmTTFT.N > 0 {
		b.WriteString("\n| warm (n=" + fmt.Sprint(q.WarmTTFT.N) + ") | min | median | max | spread |\n|---|--:|--:|--:|--:|\n")
		for _, m := range []struct {
			name string
			s    Stats
		}{{"TTFT ms", q.WarmTTFT}, {"TTFB ms", q.WarmTTFB}, {"ITL ms", q.WarmITL}, {"TPOT ms", q.WarmTPOT}, {"E2E ms", q.WarmE2E}} {
			if m.s.N == 0 {
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %.1f%% |\n", m.name, stat.FormatMeasuredMS(m.s.Min), stat.FormatMeasuredMS(m.s.Median), stat.FormatMeasuredMS(m.s.Max), 100*m.s.Spread)
		}
	}
	if q.ColdPenalty > 0 {
		fmt.Fprintf(b, "\nCold penalty factor: cold_1 TTFT ÷ warm median = **%.1f×** (E2E %.1f×); warm band %s ± %.0f%%.\n",
			q.ColdPenalty, q.ColdPenaltyE2E, stat.FormatMS(q.WarmTTFT.Median)+" ms", 100*q.WarmTTFT.Spread)
	}
}
