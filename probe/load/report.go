package load

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Schema names the JSON report format and its version. Bump the number on
// any change that could break a reader (a renamed or removed field, a unit
// change); adding a field is compatible. docs/BENCH_SCHEMA.md documents it.
const Schema = "treni-top-bench/1"

// Report is a bench's result: every measured run of every workload and the
// min/median/max across repeats.
type Report struct {
	Schema      string    `json:"schema"`
	Tool        string    `json:"tool,omitempty"`
	Started     time.Time `json:"started"`
	URL         string    `json:"url"`
	Model       string    `json:"model"`
	Endpoint    string    `json:"endpoint"`
	Seed        uint64    `json:"seed"`
	Concurrency int       `json:"concurrency"`
	// Timestamps is where token times come from: "kernel" or "read"
	// (Client.TimestampSource).
	Timestamps string `json:"timestamps,omitempty"`
	WarmupRuns int    `json:"warmup_runs"`
	RepeatRuns int    `json:"repeat_runs"`
	SLO        *SLO   `json:"slo,omitempty"`
	// Session is the session file the run was recorded in, if any.
	Session   string           `json:"session,omitempty"`
	Workloads []WorkloadReport `json:"workloads"`
	// Interrupted is set when the bench was stopped before the end.
	Interrupted bool `json:"interrupted,omitempty"`
	// ColdContaminated is set when a measured run began with requests whose
	// TTFT is far outside the run's warm spread (ColdLeading): a cold
	// engine inside the measured sample. ColdRequests lists them.
	ColdContaminated bool          `json:"cold_contaminated"`
	ColdRequests     []ColdRequest `json:"cold_requests,omitempty"`
	// ServerUptimeS is how long the server's process had been running
	// when the bench started, when its /metrics page says when it started
	// (ServerStart); nil when unknown.
	ServerUptimeS *float64 `json:"server_uptime_s,omitempty"`
	// Saturation is a QPS sweep's verdict (saturation.go): the highest
	// rate the server kept up with at an acceptable TPOT. Nil unless the
	// workloads are levels of one workload at several rates.
	Saturation *Saturation `json:"saturation,omitempty"`
}

// freshServerS is the uptime under which a server counts as just started:
// the report then suggests a warm-up run even when no request stood out.
const freshServerS = 120

// WorkloadReport is one workload: its definition, each measured run, and
// the summary across runs.
type WorkloadReport struct {
	Spec   Spec         `json:"spec"`
	Runs   []RunMetrics `json:"runs"`
	Across Across       `json:"across_repeats"`
}

func (w WorkloadReport) finish() WorkloadReport {
	if w.Runs == nil {
		w.Runs = []RunMetrics{}
	}
	w.Across = Aggregate(w.Runs)
	return w
}

// JSON renders the report, indented.
func (r Report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the bench report: %w", err)
	}
	return append(b, '\n'), nil
}

// median of a workload's runs for one metric (the table's value).
func med(w WorkloadReport, f func(RunMetrics) float64) float64 {
	xs := make([]float64, len(w.Runs))
	for i, r := range w.Runs {
		xs[i] = f(r)
	}
	return spreadOf(xs).Median
}

// Markdown renders the report as the serving benchmark log's tables: one
// cross-workload table (metric rows, one column per workload; the median
// across repeats when there are several), then per workload the repeats
// with min/median/max when there is more than one.
func (r Report) Markdown() string {
	var b strings.Builder
	writePreamble(&b, r)
	if len(r.Workloads) == 0 {
		b.WriteString("\nNo workload ran.\n")
		return b.String()
	}
	b.WriteString("\n| Workload | Requests | Prompt tokens | Max tokens | Arrival |\n|---|--:|---|---|---|\n")
	for _, w := range r.Workloads {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", w.Spec.Name, w.Spec.Requests, w.Spec.PromptDescription(), w.Spec.MaxTokens, w.Spec.Arrival)
	}
	writeMetrics(&b, r)
	writeErrorKinds(&b, r)
	if r.SLO != nil {
		fmt.Fprintf(&b, "\nGoodput counts requests that met every SLO:%s.\n", sloText(*r.SLO))
	}
	writeBounds(&b, r)
	if r.Saturation != nil {
		writeSaturation(&b, r.Saturation)
	}
	if r.RepeatRuns > 1 {
		for _, w := range r.Workloads {
			writeRepeats(&b, w)
		}
	}
	return b.String()
}

// writePreamble writes the title, the server and the settings, and what
// the reader must know before the figures: an interrupted bench, a cold
// server.
func writePreamble(b *strings.Builder, r Report) {
	fmt.Fprintf(b, "## treni-top bench — %s\n\n", r.Model)
	fmt.Fprintf(b, "Server %s (%s endpoint), seed %d", r.URL, r.Endpoint, r.Seed)
	if r.Concurrency > 0 {
		fmt.Fprintf(b, ", concurrency ≤ %d", r.Concurrency)
	}
	fmt.Fprintf(b, ", %d warm-up run(s) not counted, %d measured run(s)", r.WarmupRuns, r.RepeatRuns)
	if r.RepeatRuns > 1 {
		b.WriteString(" (values are medians across runs)")
	}
	switch r.Timestamps {
	case "kernel":
		b.WriteString("; tokens timed at the kernel's receive stamp")
	case "read":
		b.WriteString("; tokens timed when read")
	}
	b.WriteString(".\n")
	if r.Interrupted {
		b.WriteString("\n**Interrupted**: the bench was stopped; the figures cover what ran.\n")
	}
	if r.ColdContaminated {
		writeCold(b, r)
	} else if up := r.ServerUptimeS; up != nil && *up < freshServerS && r.WarmupRuns == 0 {
		fmt.Fprintf(b, "\nThe server had been up only %.0f s when the bench started and no warm-up run was given. No request stood out as cold, but if the server initialises anything on first use it is in the figures; `--warmup-runs 1` keeps it out.\n", *up)
	}
}

// metricRow is one row of the metrics table: its name, the run's value
// and the decimals shown.
type metricRow struct {
	name string
	f    func(RunMetrics) float64
	prec int
}

// metricRows are the metrics table's rows; goodput's only with an SLO.
func metricRows(slo bool) []metricRow {
	rows := []metricRow{
		{"Throughput (tok/s)", func(m RunMetrics) float64 { return m.OutputTokPerSec }, 1},
		{"Requests/s", func(m RunMetrics) float64 { return m.ReqPerSec }, 2},
		{"TTFT P50 (ms)", func(m RunMetrics) float64 { return m.TTFT.P50 }, 0},
		{"TTFT P95 (ms)", func(m RunMetrics) float64 { return m.TTFT.P95 }, 0},
		{"TTFT P99 (ms)", func(m RunMetrics) float64 { return m.TTFT.P99 }, 0},
		{"TTFB P50 (ms)", func(m RunMetrics) float64 { return m.TTFB.P50 }, 0},
		{"ITL P50 (ms)", func(m RunMetrics) float64 { return m.ITL.P50 }, 0},
		{"ITL P95 (ms)", func(m RunMetrics) float64 { return m.ITL.P95 }, 0},
		{"ITL P99 (ms)", func(m RunMetrics) float64 { return m.ITL.P99 }, 0},
		{"TPOT P50 (ms)", func(m RunMetrics) float64 { return m.TPOT.P50 }, 1},
		{"TPOT P99 (ms)", func(m RunMetrics) float64 { return m.TPOT.P99 }, 1},
		{"Latency P50 (s)", func(m RunMetrics) float64 { return m.E2E.P50 / 1000 }, 3},
		{"Latency P99 (s)", func(m RunMetrics) float64 { return m.E2E.P99 / 1000 }, 3},
		{"Errors", func(m RunMetrics) float64 { return float64(m.Failed) }, 0},
	}
	if slo {
		rows = append(rows,
			metricRow{"Goodput (req/s)", func(m RunMetrics) float64 {
				if m.Goodput == nil {
					return 0
				}
				return m.Goodput.ReqPerSec
			}, 2},
			metricRow{"SLO met (%)", func(m RunMetrics) float64 {
				if m.Goodput == nil {
					return 0
				}
				return 100 * m.Goodput.Fraction
			}, 0})
	}
	return rows
}

// writeMetrics writes the metrics table: a column per workload, the
// median of its runs.
func writeMetrics(b *strings.Builder, r Report) {
	b.WriteString("\n| Metric |")
	for _, w := range r.Workloads {
		fmt.Fprintf(b, " %s |", w.Spec.Name)
	}
	b.WriteString("\n|---|")
	for range r.Workloads {
		b.WriteString("--:|")
	}
	b.WriteString("\n")
	for _, rw := range metricRows(r.SLO != nil) {
		fmt.Fprintf(b, "| %s |", rw.name)
		for _, w := range r.Workloads {
			if len(w.Runs) == 0 {
				b.WriteString(" — |")
				continue
			}
			v, prec := med(w, rw.f), rw.prec
			if prec == 0 && strings.HasSuffix(rw.name, "(ms)") && v != 0 && math.Abs(v) < 10 {
				prec = 1 // "2" ms would hide what "2.4" shows
			}
			fmt.Fprintf(b, " %.*f |", prec, v)
		}
		b.WriteString("\n")
	}
}

// writeErrorKinds writes the errors by kind of all runs, when there are
// any.
func writeErrorKinds(b *strings.Builder, r Report) {
	kinds := map[string]int{}
	for _, w := range r.Workloads {
		for _, run := range w.Runs {
			for k, n := range run.ErrorsByKind {
				kinds[k] += n
			}
		}
	}
	if len(kinds) == 0 {
		return
	}
	var names []string
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	b.WriteString("\nErrors by kind (all runs):")
	for _, k := range names {
		fmt.Fprintf(b, " %s %d;", k, kinds[k])
	}
	b.WriteString("\n")
}

func sloText(s SLO) string {
	var parts []string
	if s.TTFTms > 0 {
		parts = append(parts, fmt.Sprintf(" TTFT ≤ %g ms", s.TTFTms))
	}
	if s.TPOTms > 0 {
		parts = append(parts, fmt.Sprintf(" TPOT ≤ %g ms", s.TPOTms))
	}
	if s.E2Ems > 0 {
		parts = append(parts, fmt.Sprintf(" E2E ≤ %g ms", s.E2Ems))
	}
	return strings.Join(parts, ",")
}

// writeRepeats is the roseinfer-style table: every measured run, then
// min / median / max and spread.
func writeRepeats(b *strings.Builder, w WorkloadReport) {
	fmt.Fprintf(b, "\n### %s — %d runs\n\n", w.Spec.Name, len(w.Runs))
	b.WriteString("| Run | Throughput (tok/s) | TTFT P50 (ms) | TTFT P99 (ms) | ITL P50 (ms) | ITL P99 (ms) | TPOT P50 (ms) | Latency P50 (s) | Errors |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, m := range w.Runs {
		fmt.Fprintf(b, "| %d | %.1f | %.0f | %.0f | %.1f | %.1f | %.1f | %.3f | %d |\n", m.Repeat,
			m.OutputTokPerSec, m.TTFT.P50, m.TTFT.P99, m.ITL.P50, m.ITL.P99, m.TPOT.P50, m.E2E.P50/1000, m.Failed)
	}
	a := w.Across
	for _, k := range []struct {
		name string
		f    func(Spread) float64
	}{{"min", func(s Spread) float64 { return s.Min }}, {"median", func(s Spread) float64 { return s.Median }}, {"max", func(s Spread) float64 { return s.Max }}} {
		fmt.Fprintf(b, "| **%s** | %.1f | %.0f | %.0f | %.1f | %.1f | %.1f | %.3f | %.0f |\n", k.name,
			k.f(a.OutputTokPerSec), k.f(a.TTFTP50), k.f(a.TTFTP99), k.f(a.ITLP50), k.f(a.ITLP99), k.f(a.TPOTP50), k.f(a.E2EP50)/1000, k.f(a.Failed))
	}
	fmt.Fprintf(b, "| **spread %%** | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | — |\n",
		100*a.OutputTokPerSec.Spread, 100*a.TTFTP50.Spread, 100*a.TTFTP99.Spread, 100*a.ITLP50.Spread,
		100*a.ITLP99.Spread, 100*a.TPOTP50.Spread, 100*a.E2EP50.Spread)
}

// writeCold says which measured requests were cold and what to do: they
// stay in the figures (hiding them would hide what a user's first request
// meets), so the report says so and how to keep them out of the sample.
func writeCold(b *strings.Builder, r Report) {
	b.WriteString("\n**Cold contamination**: the first request(s) of a measured run took far longer to the first token than the run's later requests; they are in the figures below.\n\n")
	b.WriteString("| Workload | Run | Request | TTFT (ms) | Later requests' median (ms) | Threshold (ms) |\n|---|--:|--:|--:|--:|--:|\n")
	for _, c := range r.ColdRequests {
		fmt.Fprintf(b, "| %s | %d | %d | %.0f | %.1f | %.1f |\n", c.Workload, c.Repeat, c.Index, c.TTFTms, c.WarmMedianMs, c.ThresholdMs)
	}
	if up := r.ServerUptimeS; up != nil {
		fmt.Fprintf(b, "\nThe server had been up %.0f s when the bench started (its /metrics `process_start_time_seconds`).\n", *up)
	}
	if r.WarmupRuns == 0 {
		b.WriteString("\nRerun with `--warmup-runs 1` (or more) so a cold engine is warmed before measuring.\n")
	} else {
		fmt.Fprintf(b, "\n%d warm-up run(s) did not warm the server; rerun with more `--warmup-runs`.\n", r.WarmupRuns)
	}
}
