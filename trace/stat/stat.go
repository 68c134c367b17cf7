// Package stat is the one home of treni-top's summaries of repeated
// measurements (min, median, max, mean, percentiles, spread) and of the
// number formats every table shares. It imports nothing of treni-top, so the
// probe, the session reports and the TUI all use it; docs/ARCHITECTURE.md
// ("Measurements") says why the spread is the noise yardstick.
package stat

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Summary describes a set of measurements: min, median, max, mean,
// percentiles, and Spread = (max − min) ÷ |median| as a fraction (0.12 =
// 12%). A difference smaller than the spread is noise.
type Summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
	P90    float64 `json:"p90"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
	// Spread is (max − min) ÷ |median|, a fraction; zero when the median
	// is zero.
	Spread float64 `json:"spread"`
}

// Summarize computes the Summary of xs, which it does not modify. An empty
// input gives the zero Summary.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	v := slices.Clone(xs)
	slices.Sort(v)
	s := Summary{N: len(v), Min: v[0], Max: v[len(v)-1]}
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

// Percentile is the p-th percentile (0–100) of sorted values by linear
// interpolation between closest ranks (numpy's default, and what vLLM's
// benchmark uses), so p50 of an even count is the mean of the middle two.
// Empty input gives zero.
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
	if lo < 0 {
		return sorted[0]
	}
	return sorted[lo] + (pos-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// MS converts a duration to float milliseconds.
func MS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// FormatMS renders milliseconds for tables: "—" for zero (not observed),
// otherwise about three significant digits.
func FormatMS(v float64) string {
	switch {
	case v == 0:
		return "—"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// FormatMeasuredMS renders a value that was measured, such as the minimum
// of a summary with samples: 0 is a reading ("0", two tokens that arrived
// in one read have an inter-token gap of 0), not "—".
func FormatMeasuredMS(v float64) string {
	if v == 0 {
		return "0"
	}
	return FormatMS(v)
}

// FormatDuration renders a duration compactly for tables ("412.0 ms",
// "2.31 s", "850 µs").
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d/time.Microsecond)
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", MS(d))
	case d < time.Minute:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return d.Round(100 * time.Millisecond).String()
}

// FormatBytes renders a byte count in binary units ("1.21 GiB").
func FormatBytes(b float64) string {
	const k = 1024.0
	switch {
	case b >= k*k*k:
		return fmt.Sprintf("%.2f GiB", b/(k*k*k))
	case b >= k*k:
		return fmt.Sprintf("%.1f MiB", b/(k*k))
	case b >= k:
		return fmt.Sprintf("%.0f KiB", b/k)
	}
	return fmt.Sprintf("%.0f B", b)
}
