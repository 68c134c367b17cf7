package sessions

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// BenchRun is one run of a load workload recorded by `treni-top bench`,
// delimited by its bench_start and bench_end markers.
type BenchRun struct {
	Workload string        `json:"workload"`
	Run      int           `json:"run"`
	Warmup   bool          `json:"warmup,omitempty"`
	Start    time.Duration `json:"start"`
	End      time.Duration `json:"end"`
	Requests int           `json:"requests"`
	Errors   int           `json:"errors"`
	// OutputTokPerS is output tokens ÷ the run's wall time.
	OutputTokPerS float64 `json:"output_tok_per_s"`
	ReqPerS       float64 `json:"req_per_s"`
	TTFT          Stats   `json:"ttft_ms"`
	ITL           Stats   `json:"itl_ms"`
	TPOT          Stats   `json:"tpot_ms"`
	E2E           Stats   `json:"e2e_ms"`
	// ColdRequests are the ids of the run's leading requests whose TTFT
	// lies far outside the later half's spread (stat.LeadingOutliers): a
	// cold engine inside the measured sample. ColdThresholdMS is the TTFT
	// above which they count as cold.
	ColdRequests    []string `json:"cold_requests,omitempty"`
	ColdThresholdMS float64  `json:"cold_threshold_ms,omitempty"`
}

// BenchRuns finds the load runs in a session's events.
func BenchRuns(events []trace.Event) []BenchRun {
	var runs []BenchRun
	var reqs []trace.Request
	seen := map[string]int{}
	for _, e := range events {
		if e.Kind == trace.KindRequest && e.Request.Done && (e.Request.Phase == trace.PhaseBench || e.Request.Phase == trace.PhaseWarmup) {
			if i, ok := seen[e.Request.ID]; ok {
				reqs[i] = *e.Request
			} else {
				seen[e.Request.ID] = len(reqs)
				reqs = append(reqs, *e.Request)
			}
		}
	}
	var open *BenchRun
	for _, e := range events {
		if e.Kind != trace.KindMarker {
			continue
		}
		switch e.Marker.Name {
		case trace.MarkerBenchStart:
			w, _ := e.Marker.Attrs.String("workload")
			r, _ := e.Marker.Attrs.Float("run")
			warm, _ := e.Marker.Attrs["warmup"].(bool)
			open = &BenchRun{Workload: w, Run: int(r), Warmup: warm, Start: e.At}
		case trace.MarkerBenchEnd:
			if open == nil {
				continue
			}
			open.End = e.At
			fillBench(open, reqs)
			runs = append(runs, *open)
			open = nil
		}
	}
	return runs
}

func fillBench(b *BenchRun, reqs []trace.Request) {
	var ttft, itl, tpot, e2e []float64
	var ok []trace.Request // successful, for the cold check
	var out int
	last := b.Start
	for _, q := range reqs {
		if q.Sent < b.Start || q.Sent > b.End {
			continue
		}
		b.Requests++
		if !q.OK() {
			b.Errors++
			continue
		}
		out += q.OutputTokens()
		if q.FirstToken > 0 {
			ok = append(ok, q)
		}
		if end := q.Sent + q.End; end > last {
			last = end
		}
		row := Row(q)
		ttft = append(ttft, row.TTFT)
		itl = append(itl, durationsMS(q.ITLs())...)
		if row.TPOT > 0 {
			tpot = append(tpot, row.TPOT)
		}
		e2e = append(e2e, row.E2E)
	}
	if d := (last - b.Start).Seconds(); d > 0 {
		b.OutputTokPerS = float64(out) / d
		b.ReqPerS = float64(b.Requests-b.Errors) / d
	}
	b.TTFT, b.ITL, b.TPOT, b.E2E = stat.Summarize(ttft), stat.Summarize(itl), stat.Summarize(tpot), stat.Summarize(e2e)
	sort.SliceStable(ok, func(i, j int) bool { return ok[i].Sent < ok[j].Sent })
	sent := make([]float64, len(ok))
	for i, q := range ok {
		sent[i] = stat.MS(q.FirstToken)
	}
	if lead, _, thr, judged := stat.LeadingOutliers(sent); judged && len(lead) > 0 {
		for _, i := range lead {
			b.ColdRequests = append(b.ColdRequests, ok[i].ID)
		}
		b.ColdThresholdMS = thr
	}
}

// writeBenchMarkdown renders load runs as the serving benchmark log's
// table: one column per run.
func writeBenchMarkdown(b *strings.Builder, runs []BenchRun) {
	var shown []BenchRun
	for _, r := range runs {
		if !r.Warmup {
			shown = append(shown, r)
		}
	}
	if len(shown) == 0 {
		return
	}
	b.WriteString("\n## Load runs\n\n| metric |")
	for _, r := range shown {
		fmt.Fprintf(b, " %s #%d |", r.Workload, r.Run)
	}
	b.WriteString("\n|---|")
	for range shown {
		b.WriteString("--:|")
	}
	row := func(name string, f func(BenchRun) string) {
		fmt.Fprintf(b, "\n| %s |", name)
		for _, r := range shown {
			fmt.Fprintf(b, " %s |", f(r))
		}
	}
	row("Requests", func(r BenchRun) string { return fmt.Sprint(r.Requests) })
	row("Throughput (tok/s)", func(r BenchRun) string { return fmt.Sprintf("%.1f", r.OutputTokPerS) })
	row("TTFT P50 (ms)", func(r BenchRun) string { return stat.FormatMS(r.TTFT.Median) })
	row("TTFT P99 (ms)", func(r BenchRun) string { return stat.FormatMS(r.TTFT.P99) })
	row("ITL P50 (ms)", func(r BenchRun) string { return stat.FormatMS(r.ITL.Median) })
	row("ITL P99 (ms)", func(r BenchRun) string { return stat.FormatMS(r.ITL.P99) })
	row("TPOT P50 (ms)", func(r BenchRun) string { return stat.FormatMS(r.TPOT.Median) })
	row("Latency P50 (s)", func(r BenchRun) string { return fmt.Sprintf("%.3f", r.E2E.Median/1000) })
	row("Errors", func(r BenchRun) string { return fmt.Sprint(r.Errors) })
	row("Cold requests", func(r BenchRun) string { return fmt.Sprint(len(r.ColdRequests)) })
	b.WriteString("\n")
	for _, r := range shown {
		if len(r.ColdRequests) > 0 {
			fmt.Fprintf(b, "\n%s #%d: the first %d request(s) (%s) took longer than %s ms to the first token, far outside the rest's spread: a cold engine inside the measured sample. Run the bench with `--warmup-runs 1` to keep it out.\n",
				r.Workload, r.Run, len(r.ColdRequests), strings.Join(r.ColdRequests, ", "), stat.FormatMS(r.ColdThresholdMS))
		}
	}
}
