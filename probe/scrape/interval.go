package scrape

import (
	"math"
	"slices"

	"github.com/treni-top/treni-top/trace"
)

// Interval turns two consecutive snapshots of one server into the values of
// one trace.Sample (metric names from trace's MetricServer* constants).
//
// Latencies are over the interval between the pages: the mean is the
// delta of the histogram's sum over the delta of its count, p50 and p99
// interpolate in the bucket deltas the way Prometheus' histogram_quantile
// does. Without a previous snapshot (the first page, or a page of another
// family) only the gauges and the startup time are reported. A counter that
// went backwards means the server restarted: the current page's counts are
// then the interval's (everything since the restart), never a negative
// delta. Metrics the server lacks, and latencies of an interval with no
// observation, are absent from the map, not zero.
func Interval(prev *Snapshot, cur Snapshot) map[string]float64 {
	out := map[string]float64{}
	if prev != nil && prev.Family != cur.Family {
		prev = nil
	}
	gauge := func(name string, v Value) {
		if v.OK && usable(v.V) {
			out[name] = v.V
		}
	}
	gauge(trace.MetricServerRunning, cur.Running)
	gauge(trace.MetricServerWaiting, cur.Waiting)
	gauge(trace.MetricServerKVUsage, cur.KVUsage)
	gauge(trace.MetricServerStartup, cur.Startup)
	if prev == nil {
		gauge(trace.MetricServerPrefixHitRate, cur.PrefixHitRate)
		return out
	}
	if d := deltaHist(prev.TTFT, cur.TTFT); d != nil {
		latency(out, d, trace.MetricServerTTFTMean, trace.MetricServerTTFTP50, trace.MetricServerTTFTP99)
		if d.Count > 0 && usable(d.Count) {
			out[trace.MetricServerTTFTCount] = d.Count
		}
	}
	if d := deltaHist(prev.ITL, cur.ITL); d != nil {
		latency(out, d, trace.MetricServerITLMean, trace.MetricServerITLP50, trace.MetricServerITLP99)
	}
	if d := deltaHist(prev.Queue, cur.Queue); d != nil {
		latency(out, d, trace.MetricServerQueueMean, "", "")
	}
	hits, okH := deltaCounter(prev.PrefixHits, cur.PrefixHits)
	queries, okQ := deltaCounter(prev.PrefixQueries, cur.PrefixQueries)
	if okH && okQ && usable(hits) && usable(queries) {
		out[trace.MetricServerPrefixHits] = hits
		out[trace.MetricServerPrefixQueries] = queries
		if queries > 0 && hits <= queries {
			out[trace.MetricServerPrefixHitRate] = hits / queries
		}
	} else {
		gauge(trace.MetricServerPrefixHitRate, cur.PrefixHitRate)
	}
	return out
}

// latency writes the mean and, when names are given and buckets exist, the
// p50 and p99 of an interval's histogram.
func latency(out map[string]float64, d *Hist, mean, p50, p99 string) {
	if d.Count <= 0 {
		return
	}
	if m := d.Sum / d.Count; d.HasSum && usable(m) {
		out[mean] = m
	}
	if p50 == "" || !d.HasBuckets {
		return
	}
	if q, ok := Quantile(d, 0.5); ok && usable(q) {
		out[p50] = q
	}
	if q, ok := Quantile(d, 0.99); ok && usable(q) {
		out[p99] = q
	}
}

// usable is a latency or count worth reporting: finite and not negative (a
// page with negative bucket bounds or sums that overflow gives neither).
func usable(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }

// deltaHist is cur − prev, or cur alone after a restart (a count, the sum
// or a bucket went down, or the bucket layout changed). It is nil when
// either side is missing.
func deltaHist(prev, cur *Hist) *Hist {
	if prev == nil || cur == nil {
		return nil
	}
	reset := cur.Count < prev.Count ||
		(cur.HasSum && prev.HasSum && cur.Sum < prev.Sum) ||
		cur.HasBuckets != prev.HasBuckets ||
		(cur.HasBuckets && !slices.Equal(cur.Bounds, prev.Bounds))
	d := &Hist{HasSum: cur.HasSum && prev.HasSum, HasBuckets: cur.HasBuckets, Bounds: cur.Bounds}
	if !reset {
		d.Count, d.Sum = cur.Count-prev.Count, cur.Sum-prev.Sum
		d.Cum = make([]float64, len(cur.Cum))
		for i := range cur.Cum {
			d.Cum[i] = cur.Cum[i] - prev.Cum[i]
			if d.Cum[i] < 0 {
				reset = true
				break
			}
		}
	}
	if reset {
		d.Count, d.Sum, d.HasSum = cur.Count, cur.Sum, cur.HasSum
		d.Cum = append([]float64(nil), cur.Cum...)
	}
	return d
}

// deltaCounter is cur − prev, or cur after a reset.
func deltaCounter(prev, cur Value) (float64, bool) {
	if !prev.OK || !cur.OK || cur.V < 0 {
		return 0, false
	}
	if cur.V < prev.V {
		return cur.V, true
	}
	return cur.V - prev.V, true
}

// Quantile estimates the q-quantile (0 < q < 1) of a histogram by linear
// interpolation inside the bucket that holds it, like Prometheus'
// histogram_quantile: the first bucket starts at 0, and a quantile that
// falls beyond the last finite bound is that bound. It reports false for an
// empty histogram or one without finite buckets.
func Quantile(h *Hist, q float64) (float64, bool) {
	if h == nil || !h.HasBuckets || len(h.Bounds) == 0 || h.Count <= 0 || !(q > 0 && q < 1) {
		return 0, false
	}
	rank := q * h.Count
	prevCum, lower := 0.0, 0.0
	for i, le := range h.Bounds {
		c := h.Cum[i]
		if c >= rank {
			in := c - prevCum
			if in <= 0 {
				return le, true
			}
			if i == 0 && le <= 0 {
				return le, true
			}
			v := lower + (le-lower)*((rank-prevCum)/in)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return 0, false
			}
			return v, true
		}
		prevCum, lower = c, le
	}
	return h.Bounds[len(h.Bounds)-1], true
}
