package load

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// Saturation of a server under a QPS sweep (docs/BENCH_SCHEMA.md,
// "Saturation"): the highest arrival rate the server keeps up with, at a
// TPOT its users accept.
//
// Keeping up is read from the client's side, so any server gets the
// verdict: a request's completion lag is its end minus its planned
// arrival. A server that keeps up serves each request in about the same
// time however long the run goes on; one that falls behind builds a
// queue, and each request waits longer than the one before, so the lag
// grows with the arrival time, by λ/μ − 1 seconds a second (arrival rate
// λ over service rate μ).

// DefaultSaturationTPOTms is the TPOT p99 a level must stay under when no
// --slo-tpot-ms is given: 50 ms a token is 20 tokens a second, about
// reading speed.
const DefaultSaturationTPOTms = 50

// QueueGrowthLimit is the lag growth (seconds of lag a second of
// arrivals) above which a run is building a queue: its completions fall
// 10% or more behind its arrivals. A server that keeps up stays near 0,
// but not at it: Poisson arrivals come in clumps, and the lags rise and
// fall with them over about a lag's time, so a short level's estimate
// moves by tenths (±0.2 over 2–3 s windows on the H200, issue 44's
// first sweep); levels of 10 s or more bring it within a few hundredths.
const QueueGrowthLimit = 0.1

// queueMinJudged is the fewest successful requests the judged window
// must hold for the trend to be judged.
const queueMinJudged = 8

// queueMaxPairs caps the request pairs the slope is taken over (the
// pairs grow with the square of the requests: a sample of the requests
// keeps a run of any size cheap).
const queueMaxPairs = 1 << 20

// QueueTrend is whether a run of planned arrivals built a queue. The
// judged window leaves out both ends of the run: the ramp-up (the server
// fills from empty, its batches and so its lags grow while it does) and
// the drain (once arrivals stop, the last requests share their steps
// with ever fewer others and finish sooner), each as long as the median
// lag L0 of the run's first third of requests. The growth is the
// Theil–Sen slope of the lag against the planned arrival over the
// requests planned inside the window: the median of the slopes between
// every two of them, which a few slow requests do not move.
type QueueTrend struct {
	// Judged is how many requests were planned inside the window, and
	// WindowS how long it is (s).
	Judged  int     `json:"judged"`
	WindowS float64 `json:"window_s"`
	// RampLagMS is L0, the first third's median lag, trimmed at each end.
	RampLagMS float64 `json:"ramp_lag_p50_ms"`
	// LagMS is the judged requests' median lag.
	LagMS float64 `json:"lag_p50_ms"`
	// Growth is the lag gained per second of arrivals (s/s); nil when the
	// run could not be judged (Note says why).
	Growth *float64 `json:"growth,omitempty"`
	// Growing is Growth > QueueGrowthLimit.
	Growing bool   `json:"growing"`
	Note    string `json:"note,omitempty"`
}

// openLoop reports whether requests of the arrival pattern are sent at
// planned times regardless of the server (Poisson, uniform): only then
// does a lag that grows mean a queue.
func openLoop(a Arrival) bool { return a.Pattern == Poisson || a.Pattern == Uniform }

// queueTrend judges one run from its requests and their planned sends
// (session offsets, by item), as RunOnce recorded them.
func queueTrend(reqs []trace.Request, planned []time.Duration) *QueueTrend {
	type point struct{ at, lag float64 } // seconds
	var pts []point
	for i, r := range reqs {
		if i >= len(planned) || !r.OK() || r.Sent == 0 {
			continue
		}
		pts = append(pts, point{planned[i].Seconds(), (r.Sent + r.End - planned[i]).Seconds()})
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].at < pts[j].at })
	q := &QueueTrend{}
	if len(pts) < queueMinJudged {
		q.Note = fmt.Sprintf("%d successful requests: too few to judge a trend (at least %d); send more requests per level", len(pts), queueMinJudged)
		return q
	}
	lags := func(ps []point) float64 {
		l := make([]float64, len(ps))
		for i, p := range ps {
			l[i] = p.lag
		}
		return stat.Summarize(l).Median
	}
	ramp := lags(pts[:len(pts)/3])
	q.RampLagMS = 1e3 * ramp
	from, to := pts[0].at+ramp, pts[len(pts)-1].at-ramp
	var in []point
	for _, p := range pts {
		if p.at >= from && p.at <= to {
			in = append(in, p)
		}
	}
	q.Judged, q.WindowS = len(in), max(0, to-from)
	if q.WindowS < ramp || len(in) < queueMinJudged {
		q.Note = fmt.Sprintf("the arrivals span %.2f s; less their ramp-up and drain (%s each, the first third's median lag) that leaves %.2f s and %d requests, too little to judge (at least %s and %d); give the level more seconds of arrivals",
			pts[len(pts)-1].at-pts[0].at, stat.FormatMS(q.RampLagMS), q.WindowS, len(in), stat.FormatMS(q.RampLagMS), queueMinJudged)
		q.Judged, q.WindowS = 0, 0
		return q
	}
	q.LagMS = 1e3 * lags(in)
	step := 1
	for len(in)/step*(len(in)/step) > 2*queueMaxPairs {
		step++
	}
	var slopes []float64
	for i := 0; i < len(in); i += step {
		for j := i + step; j < len(in); j += step {
			if dt := in[j].at - in[i].at; dt > 0 {
				slopes = append(slopes, (in[j].lag-in[i].lag)/dt)
			}
		}
	}
	if len(slopes) == 0 {
		q.Note = "every judged request was planned at the same time; nothing to judge"
		return q
	}
	g := stat.Summarize(slopes).Median
	q.Growth = &g
	q.Growing = g > QueueGrowthLimit
	return q
}

// SaturationLevel is one rate of the sweep, judged.
type SaturationLevel struct {
	Workload string  `json:"workload"`
	QPS      float64 `json:"qps"`
	// TPOTP99MS and OutputTokPerS are medians across the level's runs.
	TPOTP99MS     float64 `json:"tpot_p99_ms"`
	OutputTokPerS float64 `json:"output_tok_per_s"`
	// QueueGrowth is the largest growth among its runs (s/s); nil when a
	// run could not be judged.
	QueueGrowth *float64 `json:"queue_growth,omitempty"`
	Failed      int      `json:"failed"`
	// Holds: TPOT p99 within the limit, no queue growth, no failure.
	Holds bool `json:"holds"`
	// Why says what failed, or why the level could not be judged.
	Why string `json:"why,omitempty"`
}

// Saturation is a sweep's verdict.
type Saturation struct {
	TPOTP99LimitMS   float64           `json:"tpot_p99_limit_ms"`
	QueueGrowthLimit float64           `json:"queue_growth_limit"`
	Levels           []SaturationLevel `json:"levels"`
	// QPS is the highest rate that held, every lower rate holding too;
	// 0 when the lowest did not. OutputTokPerS is that level's.
	QPS           float64 `json:"qps"`
	OutputTokPerS float64 `json:"output_tok_per_s"`
	// Reached is true when the level above QPS failed a criterion: the
	// server saturates between the two. False when every level held (the
	// sweep did not reach saturation) or the next could not be judged.
	Reached bool `json:"reached"`
	// Verdict is the finding in one sentence.
	Verdict string `json:"verdict"`
}

// isSweep reports whether the workloads are levels of one workload at
// several open-loop rates (what --qps makes): the same prompt and output
// lengths, Poisson or uniform arrivals, at least two distinct rates.
func isSweep(ws []WorkloadReport) bool {
	if len(ws) < 2 {
		return false
	}
	rates := map[float64]bool{}
	s0 := ws[0].Spec
	for _, w := range ws {
		s := w.Spec
		if !openLoop(s.Arrival) || s.Arrival.Rate <= 0 || len(s.PromptMix) > 0 || s.PromptTokens != s0.PromptTokens ||
			s.MaxTokens != s0.MaxTokens || s.SharedPrefixTokens != s0.SharedPrefixTokens || rates[s.Arrival.Rate] {
			return false
		}
		rates[s.Arrival.Rate] = true
	}
	return true
}

// saturationOf judges a sweep's levels against a TPOT p99 limit (ms); nil
// when the workloads are not a sweep.
func saturationOf(ws []WorkloadReport, tpotLimitMS float64) *Saturation {
	if !isSweep(ws) {
		return nil
	}
	s := &Saturation{TPOTP99LimitMS: tpotLimitMS, QueueGrowthLimit: QueueGrowthLimit}
	for _, w := range ws {
		if len(w.Runs) == 0 {
			continue
		}
		lv := SaturationLevel{Workload: w.Spec.Name, QPS: w.Spec.Arrival.Rate,
			TPOTP99MS: med(w, func(m RunMetrics) float64 { return m.TPOT.P99 }), OutputTokPerS: med(w, func(m RunMetrics) float64 { return m.OutputTokPerSec })}
		judged := true
		var notes []string
		for _, r := range w.Runs {
			lv.Failed += r.Failed
			switch {
			case r.Queue == nil || r.Queue.Growth == nil:
				judged = false
				if r.Queue != nil && r.Queue.Note != "" {
					notes = append(notes, r.Queue.Note)
				}
			case lv.QueueGrowth == nil || *r.Queue.Growth > *lv.QueueGrowth:
				g := *r.Queue.Growth
				lv.QueueGrowth = &g
			}
		}
		if !judged {
			lv.QueueGrowth = nil
		}
		var fails []string
		if lv.Failed > 0 {
			fails = append(fails, fmt.Sprintf("%d requests failed", lv.Failed))
		}
		if lv.TPOTP99MS > tpotLimitMS {
			fails = append(fails, fmt.Sprintf("TPOT p99 %.1f ms > %g ms", lv.TPOTP99MS, tpotLimitMS))
		}
		if lv.QueueGrowth != nil && *lv.QueueGrowth > QueueGrowthLimit {
			fails = append(fails, fmt.Sprintf("queue growth: the lag grew %.2f s a second of arrivals (> %g)", *lv.QueueGrowth, QueueGrowthLimit))
		}
		switch {
		case len(fails) > 0:
			lv.Why = strings.Join(fails, "; ")
		case !judged:
			lv.Why = "queue growth not judged: " + strings.Join(notes, "; ")
			if len(notes) == 0 {
				lv.Why = "queue growth not judged"
			}
		default:
			lv.Holds = true
		}
		s.Levels = append(s.Levels, lv)
	}
	sort.SliceStable(s.Levels, func(i, j int) bool { return s.Levels[i].QPS < s.Levels[j].QPS })
	var stop *SaturationLevel
	for i := range s.Levels {
		if !s.Levels[i].Holds {
			stop = &s.Levels[i]
			break
		}
		s.QPS, s.OutputTokPerS = s.Levels[i].QPS, s.Levels[i].OutputTokPerS
	}
	limits := fmt.Sprintf("TPOT p99 ≤ %g ms, no queue growth, no errors", tpotLimitMS)
	// A level that did not hold either failed a criterion (saturation
	// lies below it) or could not be judged (it might still hold).
	if stop != nil {
		s.Reached = !strings.HasPrefix(stop.Why, "queue growth not judged")
	}
	switch {
	case len(s.Levels) == 0:
		s.Verdict = "no level ran"
	case stop == nil:
		s.Verdict = fmt.Sprintf("not saturated: every level up to QPS %g held (%s), %.0f output tok/s there; sweep higher to find saturation",
			s.QPS, limits, s.OutputTokPerS)
	case s.QPS == 0:
		s.Verdict = fmt.Sprintf("no level held: the lowest, QPS %g: %s", stop.QPS, stop.Why)
	case s.Reached:
		s.Verdict = fmt.Sprintf("saturation at QPS %g (%s): %.0f output tok/s; QPS %g failed: %s", s.QPS, limits, s.OutputTokPerS, stop.QPS, stop.Why)
	default:
		s.Verdict = fmt.Sprintf("QPS %g held (%s): %.0f output tok/s; QPS %g could not be judged: %s", s.QPS, limits, s.OutputTokPerS, stop.QPS, stop.Why)
	}
	return s
}

// writeSaturation renders a sweep's verdict and its levels.
func writeSaturation(b *strings.Builder, s *Saturation) {
	fmt.Fprintf(b, "\n### Saturation\n\n%s.\n\n", upperFirst(s.Verdict))
	b.WriteString("| QPS | Output tok/s | TPOT P99 (ms) | Queue growth (s/s) | Errors | Holds |\n|--:|--:|--:|--:|--:|---|\n")
	for _, lv := range s.Levels {
		g := "—"
		if lv.QueueGrowth != nil {
			g = fmt.Sprintf("%+.3f", *lv.QueueGrowth)
		}
		holds := "yes"
		if !lv.Holds {
			holds = "no: " + lv.Why
		}
		fmt.Fprintf(b, "| %g | %.0f | %.1f | %s | %d | %s |\n", lv.QPS, lv.OutputTokPerS, lv.TPOTP99MS, g, lv.Failed, holds)
	}
	fmt.Fprintf(b, "\nA level holds when its TPOT p99 is ≤ %g ms, no request failed and its completion lag (end − planned arrival) grew by at most %g s a second of arrivals from the middle third of the run to the last (docs/BENCH_SCHEMA.md, \"Saturation\").\n",
		s.TPOTP99LimitMS, s.QueueGrowthLimit)
}

// upperFirst capitalises a sentence's first letter.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
