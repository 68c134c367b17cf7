package stat

import (
	"math"
	"sort"
)

// The cold-contamination rule (LeadingOutliers): a run's time-to-first-token
// values in send order; the later half is the reference and the leading
// values are judged against it. treni-top bench uses it live
// (probe/load) and report on a recorded bench session (sessions).
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
//   - Only a leading run of values above the threshold is cold: a slow
//     request in the middle of a run is tail latency, which the
//     percentiles report, not a cold start.
//   - At least coldMinReference values in the later half, or no verdict.
//     A run in which every request waits on the cold engine (a burst sent
//     at once) has no warm half to contrast with.
const (
	coldSigmas       = 5
	coldRatio        = 4
	coldFloorMs      = 100
	coldMinReference = 3
	madToSigma       = 1.4826
)

// LeadingOutliers applies the rule to ttftMs (milliseconds, in send
// order) and returns the indices of the leading cold values, the
// reference median and the threshold. ok is false when there are too few
// values for a verdict.
func LeadingOutliers(ttftMs []float64) (lead []int, medianMs, thresholdMs float64, ok bool) {
	ref := ttftMs[len(ttftMs)/2:]
	if len(ref) < coldMinReference {
		return nil, 0, 0, false
	}
	v := append([]float64(nil), ref...)
	sort.Float64s(v)
	med := Percentile(v, 50)
	for i := range v {
		v[i] = math.Abs(v[i] - med)
	}
	sort.Float64s(v)
	sigma := madToSigma * Percentile(v, 50)
	thr := max(med+coldSigmas*sigma, coldRatio*med, med+coldFloorMs)
	for i, x := range ttftMs[:len(ttftMs)/2] {
		if x <= thr {
			break
		}
		lead = append(lead, i)
	}
	return lead, med, thr, true
}
