// Package stats summarises repeated measurements the way DESIGN.md §4 asks:
// min, median, max and spread % = (max − min) / median. A difference smaller
// than the spread is noise. It is deliberately small; the session reports
// have their own, richer statistics.
package stats

import (
	"fmt"
	"slices"
	"time"
)

// Summary describes a set of durations.
type Summary struct {
	N      int           `json:"n"`
	Min    time.Duration `json:"min"`
	Median time.Duration `json:"median"`
	Max    time.Duration `json:"max"`
	// SpreadPct is (Max − Min) / Median × 100; zero when Median is zero.
	SpreadPct float64 `json:"spread_pct"`
}

// Summarize computes the summary of ds (which it does not modify). The
// median of an even count is the mean of the two middle values. An empty
// input gives the zero Summary.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = s[n/2-1] + (s[n/2]-s[n/2-1])/2
	}
	out := Summary{N: n, Min: s[0], Median: med, Max: s[n-1]}
	if med > 0 {
		out.SpreadPct = 100 * float64(out.Max-out.Min) / float64(med)
	}
	return out
}

// Ratio is a ÷ b, or zero when either is missing (zero or negative): the
// cold penalty factor is Ratio(cold TTFT, warm median TTFT).
func Ratio(a, b time.Duration) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// String formats the summary as "median 12ms (min 11ms, max 14ms, spread 25.0%, n=5)".
func (s Summary) String() string {
	if s.N == 0 {
		return "no measurements"
	}
	return fmt.Sprintf("median %v (min %v, max %v, spread %.1f%%, n=%d)", s.Median, s.Min, s.Max, s.SpreadPct, s.N)
}
