package sessions

import (
	"time"

	"github.com/treni-top/treni-top/trace/stat"
)

// Stats summarises repeated measurements: min, median, max, spread =
// (max − min) ÷ median, plus mean and percentiles (docs/ARCHITECTURE.md,
// "Measurements").
// It is trace/stat's Summary, the one implementation probe, sessions and
// tui share.
type Stats = stat.Summary

// durationsMS converts durations to milliseconds.
func durationsMS(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = stat.MS(d)
	}
	return out
}
