package stat

import (
	"slices"
	"testing"
)

func TestLeadingOutliers(t *testing.T) {
	for _, c := range []struct {
		name     string
		ttft     []float64
		lead     []int
		med, thr float64
		ok       bool
	}{
		// Warm half 100, 100, 110, 90 ms: median 100, MAD 10 → 5σ̂ = 74.1,
		// ratio 400, floor 200: threshold 400.
		{"two cold first", []float64{2000, 1500, 100, 100, 110, 100, 90, 100}, []int{0, 1}, 100, 400, true},
		{"slow in the middle is not cold", []float64{100, 2000, 100, 100, 110, 100, 90, 100}, nil, 100, 400, true},
		{"warm run", []float64{120, 100, 100, 100, 110, 100, 90, 100}, nil, 100, 400, true},
		// Warm at 2 ms: the 100 ms floor keeps a 50 ms first request warm.
		{"client start-up under the floor", []float64{50, 2, 2, 2, 2, 2}, nil, 2, 102, true},
		{"too few for a verdict", []float64{5000, 100, 100, 100}, nil, 0, 0, false},
	} {
		lead, med, thr, ok := LeadingOutliers(c.ttft)
		if !slices.Equal(lead, c.lead) || med != c.med || thr != c.thr || ok != c.ok {
			t.Errorf("%s: lead %v median %v threshold %v ok %v, want %v %v %v %v", c.name, lead, med, thr, ok, c.lead, c.med, c.thr, c.ok)
		}
	}
}
