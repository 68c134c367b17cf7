package load

import (
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// Dist summarises a distribution in milliseconds (or whatever unit the
// field's JSON name says).
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Summarize computes a Dist of xs with trace/stat (the one home of
// percentiles); it does not modify xs.
func Summarize(xs []float64) Dist {
	s := stat.Summarize(xs)
	return Dist{N: s.N, Mean: s.Mean, Min: s.Min, Max: s.Max, P50: s.Median, P90: s.P90, P95: s.P95, P99: s.P99}
}

// SLO are the service-level objectives goodput is measured against; a zero
// field is not checked.
type SLO struct {
	TTFTms float64 `json:"ttft_ms,omitempty"`
	TPOTms float64 `json:"tpot_ms,omitempty"`
	E2Ems  float64 `json:"e2e_ms,omitempty"`
}

// Set reports whether any objective is given.
func (s SLO) Set() bool { return s.TTFTms > 0 || s.TPOTms > 0 || s.E2Ems > 0 }

// Met reports whether a successful request meets every objective. A
// request with fewer than two tokens has no TPOT and meets a TPOT objective.
func (s SLO) Met(r trace.Request) bool {
	if !r.OK() {
		return false
	}
	if s.TTFTms > 0 && (r.FirstToken == 0 || stat.MS(r.TTFT()) > s.TTFTms) {
		return false
	}
	if s.TPOTms > 0 && stat.MS(r.TPOT()) > s.TPOTms {
		return false
	}
	if s.E2Ems > 0 && stat.MS(r.E2E()) > s.E2Ems {
		return false
	}
	return true
}

// Goodput is the rate of requests that met every SLO.
type Goodput struct {
	SLO SLO `json:"slo"`
	// Met is how many requests met every objective.
	Met int `json:"met"`
	// ReqPerSec is Met over the run's duration (vLLM's "request goodput").
	ReqPerSec float64 `json:"req_per_s"`
	// Fraction is Met over all requests sent.
	Fraction float64 `json:"fraction"`
}

// RunMetrics are one run's results. Latencies are in milliseconds; only
// successful requests enter the distributions and the token counts.
type RunMetrics struct {
	// Repeat is 1-based.
	Repeat    int `json:"repeat"`
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// ErrorsByKind counts failed requests by kind: http_4xx, http_5xx,
	// timeout, closed_early, connect, server_error, malformed, canceled.
	ErrorsByKind map[string]int `json:"errors_by_kind"`
	// DurationS is from the run's start to the last response's end.
	DurationS    float64 `json:"duration_s"`
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
	// InputTokensFromServer is false when the server reported no usage and
	// InputTokens is the generator's estimate (characters ÷ 4).
	InputTokensFromServer bool    `json:"input_tokens_from_server"`
	OutputTokPerSec       float64 `json:"output_tok_per_s"`
	TotalTokPerSec        float64 `json:"total_tok_per_s"`
	ReqPerSec             float64 `json:"req_per_s"`
	TTFT                  Dist    `json:"ttft_ms"`
	TTFB                  Dist    `json:"ttfb_ms"`
	// ITL pools the gaps between consecutive token-bearing chunks of every
	// successful request.
	ITL Dist `json:"itl_ms"`
	// TPOT is per request: (E2E − TTFT) ÷ (output tokens − 1).
	TPOT Dist `json:"tpot_ms"`
	E2E  Dist `json:"e2e_ms"`
	// MultiTokenChunks counts chunks that carried several tokens; their
	// gaps are in ITL as they arrived (flagged, not hidden).
	MultiTokenChunks int      `json:"multi_token_chunks"`
	Goodput          *Goodput `json:"goodput,omitempty"`
	// Queue is whether the run built a queue (saturation.go); runs of
	// planned arrivals (Poisson, uniform) only.
	Queue *QueueTrend `json:"queue,omitempty"`
	// Bound is the fastest the run's batch can be served on the card
	// (bound.go), when the bench was given the model and the floors;
	// BoundNote says why a run has none.
	Bound     *RunBound `json:"bound,omitempty"`
	BoundNote string    `json:"bound_note,omitempty"`
}

// Measure computes a run's metrics from its requests. duration is the
// run's wall time (start to last end); estimated holds the generator's
// prompt sizes by request index, used when the server reports no usage.
func Measure(repeat int, reqs []trace.Request, duration time.Duration, slo SLO, estimated []int) RunMetrics {
	m := RunMetrics{Repeat: repeat, Requests: len(reqs), ErrorsByKind: map[string]int{}, DurationS: duration.Seconds()}
	var ttft, ttfb, itl, tpot, e2e []float64
	fromServer := true
	for i, r := range reqs {
		if !r.OK() {
			m.Failed++
			kind := r.ErrorKind
			if kind == "" {
				kind = "unknown"
			}
			m.ErrorsByKind[kind]++
			continue
		}
		m.Completed++
		if r.PromptTokens > 0 {
			m.InputTokens += r.PromptTokens
		} else {
			fromServer = false
			if i < len(estimated) {
				m.InputTokens += estimated[i]
			}
		}
		m.OutputTokens += r.OutputTokens()
		m.MultiTokenChunks += r.MultiTokenChunks
		if r.FirstToken > 0 {
			ttft = append(ttft, stat.MS(r.FirstToken))
		}
		if r.FirstByte > 0 {
			ttfb = append(ttfb, stat.MS(r.FirstByte))
		}
		for j := 1; j < len(r.Tokens); j++ {
			itl = append(itl, stat.MS(r.Tokens[j]-r.Tokens[j-1]))
		}
		if t := r.TPOT(); t > 0 {
			tpot = append(tpot, stat.MS(t))
		}
		e2e = append(e2e, stat.MS(r.E2E()))
	}
	m.InputTokensFromServer = fromServer && m.Completed > 0
	if sec := duration.Seconds(); sec > 0 {
		m.OutputTokPerSec = float64(m.OutputTokens) / sec
		m.TotalTokPerSec = float64(m.OutputTokens+m.InputTokens) / sec
		m.ReqPerSec = float64(m.Completed) / sec
	}
	m.TTFT, m.TTFB, m.ITL, m.TPOT, m.E2E = Summarize(ttft), Summarize(ttfb), Summarize(itl), Summarize(tpot), Summarize(e2e)
	if slo.Set() {
		g := &Goodput{SLO: slo}
		for _, r := range reqs {
			if slo.Met(r) {
				g.Met++
			}
		}
		if sec := duration.Seconds(); sec > 0 {
			g.ReqPerSec = float64(g.Met) / sec
		}
		if len(reqs) > 0 {
			g.Fraction = float64(g.Met) / float64(len(reqs))
		}
		m.Goodput = g
	}
	return m
}

// Spread is a metric's min, median and max across repeats, and spread =
// (max − min) ÷ median as a fraction (the noise yardstick of docs/ARCHITECTURE.md, "Measurements").
type Spread struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	Spread float64 `json:"spread"`
}

func spreadOf(xs []float64) Spread {
	s := stat.Summarize(xs)
	return Spread{Min: s.Min, Median: s.Median, Max: s.Max, Spread: s.Spread}
}

// Across summarises the measured repeats of a workload (warm-up runs are
// never among them).
type Across struct {
	Repeats         int    `json:"repeats"`
	OutputTokPerSec Spread `json:"output_tok_per_s"`
	ReqPerSec       Spread `json:"req_per_s"`
	TTFTP50         Spread `json:"ttft_p50_ms"`
	TTFTP99         Spread `json:"ttft_p99_ms"`
	TTFBP50         Spread `json:"ttfb_p50_ms"`
	ITLP50          Spread `json:"itl_p50_ms"`
	ITLP99          Spread `json:"itl_p99_ms"`
	TPOTP50         Spread `json:"tpot_p50_ms"`
	TPOTP99         Spread `json:"tpot_p99_ms"`
	E2EP50          Spread `json:"e2e_p50_ms"`
	Failed          Spread `json:"failed"`
	// GoodputReqPerSec is present when SLOs were given.
	GoodputReqPerSec *Spread `json:"goodput_req_per_s,omitempty"`
}

// Aggregate computes min/median/max across runs.
func Aggregate(runs []RunMetrics) Across {
	a := Across{Repeats: len(runs)}
	pick := func(f func(RunMetrics) float64) Spread {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = f(r)
		}
		return spreadOf(xs)
	}
	a.OutputTokPerSec = pick(func(r RunMetrics) float64 { return r.OutputTokPerSec })
	a.ReqPerSec = pick(func(r RunMetrics) float64 { return r.ReqPerSec })
	a.TTFTP50 = pick(func(r RunMetrics) float64 { return r.TTFT.P50 })
	a.TTFTP99 = pick(func(r RunMetrics) float64 { return r.TTFT.P99 })
	a.TTFBP50 = pick(func(r RunMetrics) float64 { return r.TTFB.P50 })
	a.ITLP50 = pick(func(r RunMetrics) float64 { return r.ITL.P50 })
	a.ITLP99 = pick(func(r RunMetrics) float64 { return r.ITL.P99 })
	a.TPOTP50 = pick(func(r RunMetrics) float64 { return r.TPOT.P50 })
	a.TPOTP99 = pick(func(r RunMetrics) float64 { return r.TPOT.P99 })
	a.E2EP50 = pick(func(r RunMetrics) float64 { return r.E2E.P50 })
	a.Failed = pick(func(r RunMetrics) float64 { return float64(r.Failed) })
	if len(runs) > 0 && runs[0].Goodput != nil {
		g := pick(func(r RunMetrics) float64 {
			if r.Goodput == nil {
				return 0
			}
			return r.Goodput.ReqPerSec
		})
		a.GoodputReqPerSec = &g
	}
	return a
}
