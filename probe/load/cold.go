package load

import (
	"math"
	"sort"

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

// The cold-contamination rule (ColdLeading). A run's successful requests
// are taken in send order; the later half is the reference and the
// leading requests are judged against it:
//
//   - The reference is the later half, not "all the others": cold requests
//     come first, so the later half is the warm sample and a cold request
//     cannot raise the bar it is judged by.
//   - Median and MAD, not mean and standard deviation: tail latencies in
//     the reference would inflate a standard deviation; the median and the
//     median absolute deviation ignore up to half of the reference being
//     outliers. σ̂ = 1.4826·MAD estimates σ for normal noise.
//   - threshold = max(median + coldSigmas·σ̂, coldRatio·median,
//     median + coldFloorMs). Five σ̂ is far outside the warm spread (a
//     normal warm request passes it with odds of about 3 in 10⁷). The ratio
//     floor covers references with almost no spread (identical warm TTFTs
//     give MAD ≈ 0, and any jitter would pass median + 5σ̂): a cold request
//     must also take 4× the warm median, far less than the 30–90× of the
//     reported cases (40–57 s to first token against 0.6–1.4 s) but more
//     than one slow warm request. The absolute floor keeps the client's
//     own first-request costs (a fresh connection's TCP and TLS handshakes,
//     a few round trips; a hiccup of a loaded client host) from flagging a
//     server whose warm TTFT is a few milliseconds.
//   - Only a leading run of requests above the threshold is cold: a slow
//     request in the middle of a run is tail latency, which the
//     percentiles report, not a cold start.
//   - At least coldMinReference requests in the later half, or no verdict.
//     A run in which every request waits on the cold engine (a burst sent
//     at once) has no warm half to contrast with: the server's uptime
//     (ServerStart) is the evidence left there.
const (
	coldSigmas       = 5
	coldRatio        = 4
	coldFloorMs      = 100
	coldMinReference = 3
	madToSigma       = 1.4826
)

// ColdLeading applies the rule to one run's requests (in the workload's
// order) and returns the positions of the leading cold ones, with the
// reference median and the threshold (ms). ok is false when the run has
// too few successful requests for a verdict.
func ColdLeading(reqs []trace.Request) (cold []int, medianMs, thresholdMs float64, ok bool) {
	type sent struct {
		pos  int
		at   float64
		ttft float64
	}
	var xs []sent
	for i, r := range reqs {
		if r.OK() && r.FirstToken > 0 {
			xs = append(xs, sent{i, float64(r.Sent), ms(r.FirstToken)})
		}
	}
	sort.SliceStable(xs, func(a, b int) bool { return xs[a].at < xs[b].at })
	ref := xs[len(xs)/2:]
	if len(ref) < coldMinReference {
		return nil, 0, 0, false
	}
	v := make([]float64, len(ref))
	for i, x := range ref {
		v[i] = x.ttft
	}
	sort.Float64s(v)
	med := stat.Percentile(v, 50)
	for i := range v {
		v[i] = math.Abs(v[i] - med)
	}
	sort.Float64s(v)
	sigma := madToSigma * stat.Percentile(v, 50)
	thr := max(med+coldSigmas*sigma, coldRatio*med, med+coldFloorMs)
	for _, x := range xs[:len(xs)/2] {
		if x.ttft <= thr {
			break
		}
		cold = append(cold, x.pos)
	}
	return cold, med, thr, true
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
			TTFTms: ms(reqs[i].FirstToken), WarmMedianMs: med, ThresholdMs: thr})
	}
	return out
}
