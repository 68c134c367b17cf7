package sessions

import (
	"sort"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// RequestRow is one request in the request table, times in milliseconds.
type RequestRow struct {
	Label      string      `json:"label"`
	Phase      trace.Phase `json:"phase"`
	TTFT       float64     `json:"ttft_ms"`
	TTFB       float64     `json:"ttfb_ms"`
	ITLP50     float64     `json:"itl_p50_ms"`
	ITLP99     float64     `json:"itl_p99_ms"`
	TPOT       float64     `json:"tpot_ms"`
	E2E        float64     `json:"e2e_ms"`
	Tokens     int         `json:"tokens"`
	MultiChunk int         `json:"multi_token_chunks,omitempty"`
	Error      string      `json:"error,omitempty"`
}

// Row computes the table row of one request.
func Row(q trace.Request) RequestRow {
	row := RequestRow{
		Label: q.Label, Phase: q.Phase,
		TTFT: stat.MS(q.TTFT()), TTFB: stat.MS(q.FirstByte), TPOT: stat.MS(q.TPOT()), E2E: stat.MS(q.E2E()),
		Tokens: q.OutputTokens(), MultiChunk: q.MultiTokenChunks, Error: q.Error,
	}
	if row.Label == "" {
		row.Label = q.ID
	}
	if itl := durationsMS(q.ITLs()); len(itl) > 0 {
		sort.Float64s(itl)
		row.ITLP50 = stat.Percentile(itl, 50)
		row.ITLP99 = stat.Percentile(itl, 99)
	}
	return row
}

// RequestSummary is the cold/warm decomposition of a run's requests.
type RequestSummary struct {
	Rows []RequestRow `json:"rows"`
	// Cold is the cold request's row, when there is one.
	Cold *RequestRow `json:"cold,omitempty"`
	// Warm statistics over the measured warm requests (warm-up excluded).
	WarmTTFT Stats `json:"warm_ttft_ms"`
	WarmTTFB Stats `json:"warm_ttfb_ms"`
	// WarmITL pools every inter-token gap of every warm request.
	WarmITL  Stats `json:"warm_itl_ms"`
	WarmTPOT Stats `json:"warm_tpot_ms"`
	WarmE2E  Stats `json:"warm_e2e_ms"`
	// ColdPenalty is cold_1 TTFT ÷ warm median TTFT (0 when either is
	// missing); ColdPenaltyE2E the same for E2E.
	ColdPenalty    float64 `json:"cold_penalty"`
	ColdPenaltyE2E float64 `json:"cold_penalty_e2e"`
	Errors         int     `json:"errors"`
}

// SummarizeRequests builds the request table and warm statistics.
func SummarizeRequests(reqs []trace.Request) RequestSummary {
	var s RequestSummary
	var ttft, ttfb, itl, tpot, e2e []float64
	for _, q := range reqs {
		row := Row(q)
		s.Rows = append(s.Rows, row)
		if q.Error != "" {
			s.Errors++
			continue
		}
		switch q.Phase {
		case trace.PhaseCold:
			if s.Cold == nil {
				r := row
				s.Cold = &r
			}
		case trace.PhaseWarm:
			ttft = append(ttft, row.TTFT)
			ttfb = append(ttfb, row.TTFB)
			itl = append(itl, durationsMS(q.ITLs())...)
			if row.TPOT > 0 {
				tpot = append(tpot, row.TPOT)
			}
			e2e = append(e2e, row.E2E)
		}
	}
	s.WarmTTFT, s.WarmTTFB, s.WarmITL = stat.Summarize(ttft), stat.Summarize(ttfb), stat.Summarize(itl)
	s.WarmTPOT, s.WarmE2E = stat.Summarize(tpot), stat.Summarize(e2e)
	if s.Cold != nil && s.WarmTTFT.Median > 0 {
		s.ColdPenalty = s.Cold.TTFT / s.WarmTTFT.Median
	}
	if s.Cold != nil && s.WarmE2E.Median > 0 {
		s.ColdPenaltyE2E = s.Cold.E2E / s.WarmE2E.Median
	}
	return s
}
