package sessions

import (
	"math"
	"sort"
	"time"
)

// Stats summarises repeated measurements the way the runbook asks: min,
// median, max, spread % = (max − min) ÷ median, plus mean and percentiles.
type Stats struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
	P90    float64 `json:"p90"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
	// Spread is (max − min) ÷ median, a fraction (0.12 = 12%).
	Spread float64 `json:"spread"`
}

// Summarize computes Stats of xs (which it does not modify).
func Summarize(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	v := append([]float64(nil), xs...)
	sort.Float64s(v)
	s := Stats{N: len(v), Min: v[0], Max: v[len(v)-1]}
	var sum float64
	for _, x := range v {
		sum += x
	}
	s.Mean = sum / float64(len(v))
	s.Median = Percentile(v, 50)
	s.P90 = Percentile(v, 90)
	s.P95 = Percentile(v, 95)
	s.P99 = Percentile(v, 99)
	if s.Median != 0 {
		s.Spread = (s.Max - s.Min) / math.Abs(s.Median)
	}
	return s
}

// Percentile is the p-th percentile of sorted values by linear
// interpolation between closest ranks (numpy's default), so that p50 of an
// even count is the mean of the middle two.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n == 1 {
		return sorted[0]
	}
	pos := p / 100 * float64(n-1)
	lo := int(math.Floor(pos))
	if lo >= n-1 {
		return sorted[n-1]
	}
	frac := pos - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// ms converts a duration to float milliseconds.
func toMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// durationsMS converts durations to milliseconds.
func durationsMS(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = toMS(d)
	}
	return out
}
