package load

import (
	"sort"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// ColdRequest is a measured request the bench flags as cold: one of the
// first of its run, with a time to first token far outside the spread of
// the run's later requests (a cold engine inside the measured sample).
type ColdRequest struct {
	Workload string `json:"workload"`
	Repeat   int    `json:"repeat"`
	// Index is the request's position in its run (the workload's request
	// order, 0-based); ID is its request id in the session.
	Index  int     `json:"index"`
	ID     string  `json:"id"`
	TTFTms float64 `json:"ttft_ms"`
	// WarmMedianMs is the median TTFT of the run's later half, and
	// ThresholdMs the TTFT above which a leading request counts as cold.
	WarmMedianMs float64 `json:"warm_median_ms"`
	ThresholdMs  float64 `json:"threshold_ms"`
}

// ColdLeading applies the cold-contamination rule (stat.LeadingOutliers,
// where its reasons are) to one run's requests (in the workload's order)
// and returns the positions of the leading cold ones, with the reference
// median and the threshold (ms). ok is false when the run has too few
// successful requests for a verdict.
func ColdLeading(reqs []trace.Request) (cold []int, medianMs, thresholdMs float64, ok bool) {
	type sent struct {
		pos  int
		at   time.Duration
		ttft float64
	}
	var xs []sent
	for i, r := range reqs {
		if r.OK() && r.FirstToken > 0 {
			xs = append(xs, sent{i, r.Sent, stat.MS(r.FirstToken)})
		}
	}
	sort.SliceStable(xs, func(a, b int) bool { return xs[a].at < xs[b].at })
	ttfts := make([]float64, len(xs))
	for i, x := range xs {
		ttfts[i] = x.ttft
	}
	lead, med, thr, ok := stat.LeadingOutliers(ttfts)
	for _, i := range lead {
		cold = append(cold, xs[i].pos)
	}
	return cold, med, thr, ok
}

// coldRequests flags the leading cold requests of one measured run.
func coldRequests(workload string, repeat int, reqs []trace.Request) []ColdRequest {
	idx, med, thr, ok := ColdLeading(reqs)
	if !ok {
		return nil
	}
	out := make([]ColdRequest, 0, len(idx))
	for _, i := range idx {
		out = append(out, ColdRequest{Workload: workload, Repeat: repeat, Index: i, ID: reqs[i].ID,
			TTFTms: stat.MS(reqs[i].FirstToken), WarmMedianMs: med, ThresholdMs: thr})
	}
	return out
}
